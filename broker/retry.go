package broker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of Backoff.
const (
	// RetryInitialDefault is the first wait: short, since most failures
	// are a leader election or a reconnect that ends within a moment.
	RetryInitialDefault = 50 * time.Millisecond
	// RetryMaxDefault caps the wait, so that a broker that comes back is
	// noticed within seconds.
	RetryMaxDefault = 2 * time.Second
)

// ErrRetryLimit is RetryError's Stop when Backoff.Limit passed.
var ErrRetryLimit = errors.New("gave up retrying")

// Backoff is how Retry spaces its attempts: Initial after the first
// failure, doubling after each one up to Max.
type Backoff struct {
	// Initial is the wait after the first failure. Defaults to
	// RetryInitialDefault.
	Initial time.Duration
	// Max caps the wait. Defaults to RetryMaxDefault, or to Initial when
	// that is longer.
	Max time.Duration
	// Limit bounds the whole retry: once Limit has passed since Retry
	// began, it stops waiting and gives up. Defaults to 0: until ctx ends.
	Limit time.Duration
	// Permanent says which errors retrying cannot mend (a full store, a
	// setting the broker refuses); Retry returns them at once. Defaults to
	// none.
	Permanent func(error) bool
	// OnRetry is told of every failure that is retried, and of the wait
	// before the next attempt: the caller's warning, alert or count.
	// Defaults to nothing.
	OnRetry func(err error, wait time.Duration)
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = RetryInitialDefault
	}
	if b.Max <= 0 {
		b.Max = RetryMaxDefault
	}
	b.Max = max(b.Max, b.Initial)
	return b
}

// RetryError is Retry's error when it gave up: ctx ended, or Limit
// passed, before op succeeded. It matches both errors.Is(err, Stop) and
// errors.Is(err, Last).
type RetryError struct {
	// Stop is why Retry stopped: ctx's error, or ErrRetryLimit.
	Stop error
	// Last is the error of op's last attempt: the broker's reason.
	Last error
}

func (e *RetryError) Error() string { return fmt.Sprintf("%v (%v)", e.Last, e.Stop) }

func (e *RetryError) Unwrap() []error { return []error{e.Stop, e.Last} }

// Retry calls op until it returns nil, waiting between failures as b
// says. It returns nil once op succeeds; op's error at once when
// b.Permanent holds for it; else, when ctx ends or b.Limit passes, a
// *RetryError. op is called at least once, whatever the state of ctx.
func Retry(ctx context.Context, b Backoff, op func() error) error {
	b = b.withDefaults()
	var deadline <-chan time.Time
	if b.Limit > 0 {
		t := time.NewTimer(b.Limit)
		defer t.Stop()
		deadline = t.C
	}
	gaveUp := func(last error) error {
		if ctx.Err() != nil {
			return &RetryError{Stop: ctx.Err(), Last: last}
		}
		return &RetryError{Stop: fmt.Errorf("%w after %s", ErrRetryLimit, b.Limit), Last: last}
	}
	for wait := b.Initial; ; wait = min(2*wait, b.Max) {
		err := op()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrAccount) || (b.Permanent != nil && b.Permanent(err)):
			return err
		case ctx.Err() != nil || passed(deadline):
			return gaveUp(err)
		}
		if b.OnRetry != nil {
			b.OnRetry(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return gaveUp(err)
		case <-deadline:
			t.Stop()
			return gaveUp(err)
		case <-t.C:
		}
	}
}

// passed reports whether deadline has fired; a nil one never does.
func passed(deadline <-chan time.Time) bool {
	select {
	case <-deadline:
		return true
	default:
		return false
	}
}

// Reminder spaces the repeated warnings about a condition that lasts (no
// worker for a run, a worker waiting for its run): the first one first
// after it began, then at doubling intervals up to most. A condition that
// lasts hours on purpose (workers queued behind other batch jobs) should
// not bury a log, but any few minutes of the log should say why nothing
// runs.
type Reminder struct {
	next      time.Time
	gap, most time.Duration
}

// NewReminder starts the warnings of a condition that began at start.
func NewReminder(start time.Time, first, most time.Duration) *Reminder {
	return &Reminder{next: start.Add(first), gap: first, most: max(most, first)}
}

// Due reports whether to warn at now; when it does, the next warning is
// scheduled.
func (r *Reminder) Due(now time.Time) bool {
	if now.Before(r.next) {
		return false
	}
	r.gap = min(2*r.gap, r.most)
	r.next = now.Add(r.gap)
	return true
}
