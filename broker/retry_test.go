package broker_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
)

var (
	errFlaky = errors.New("flaky")
	errFatal = errors.New("fatal")
)

// TestRetry drives Retry with an op that fails a number of times, and
// checks what it returns, how often it called op and the waits it
// announced: the schedule, not how long anything took.
func TestRetry(t *testing.T) {
	t.Parallel()
	const us = time.Microsecond
	cases := []struct {
		name      string
		b         broker.Backoff
		failures  int // op fails this many times, then succeeds
		fail      error
		cancelAt  int // cancel ctx during this attempt (0: never)
		wantCalls int
		wantWaits []time.Duration
		wantStop  error // the RetryError's Stop; nil: no RetryError
		wantErr   error // errors.Is(err, wantErr); nil: err == nil
	}{
		{name: "succeeds at once", b: broker.Backoff{Initial: us}, wantCalls: 1},
		{name: "doubles up to Max", b: broker.Backoff{Initial: us, Max: 4 * us}, failures: 5, fail: errFlaky,
			wantCalls: 6, wantWaits: []time.Duration{us, 2 * us, 4 * us, 4 * us, 4 * us}},
		{name: "Max below Initial is Initial", b: broker.Backoff{Initial: 3 * us, Max: us}, failures: 3, fail: errFlaky,
			wantCalls: 4, wantWaits: []time.Duration{3 * us, 3 * us, 3 * us}},
		{name: "permanent error at once", b: broker.Backoff{Initial: us, Permanent: func(err error) bool { return errors.Is(err, errFatal) }},
			failures: 5, fail: errFatal, wantCalls: 1, wantErr: errFatal},
		{name: "ctx ends", b: broker.Backoff{Initial: us}, failures: 100, fail: errFlaky, cancelAt: 3,
			wantCalls: 3, wantWaits: []time.Duration{us, 2 * us}, wantStop: context.Canceled, wantErr: errFlaky},
		{name: "ctx ended before", b: broker.Backoff{Initial: us}, failures: 100, fail: errFlaky, cancelAt: -1,
			wantCalls: 1, wantStop: context.Canceled, wantErr: errFlaky},
		{name: "limit passes during a wait", b: broker.Backoff{Initial: time.Hour, Limit: time.Millisecond}, failures: 100, fail: errFlaky,
			wantCalls: 1, wantWaits: []time.Duration{time.Hour}, wantStop: broker.ErrRetryLimit, wantErr: errFlaky},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelAt < 0 {
				cancel()
			}
			var waits []time.Duration
			b := tc.b
			b.OnRetry = func(err error, wait time.Duration) {
				if !errors.Is(err, tc.fail) {
					t.Errorf("OnRetry got %v, want %v", err, tc.fail)
				}
				waits = append(waits, wait)
			}
			calls := 0
			err := broker.Retry(ctx, b, func() error {
				calls++
				if calls == tc.cancelAt {
					cancel()
				}
				if calls <= tc.failures {
					return tc.fail
				}
				return nil
			})
			if calls != tc.wantCalls {
				t.Errorf("op called %d times, want %d", calls, tc.wantCalls)
			}
			if !reflect.DeepEqual(waits, tc.wantWaits) {
				t.Errorf("waits %v, want %v", waits, tc.wantWaits)
			}
			var re *broker.RetryError
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Retry: %v, want nil", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Retry: %v, want %v", err, tc.wantErr)
			case tc.wantStop == nil && errors.As(err, &re):
				t.Fatalf("Retry: %v, want no RetryError", err)
			case tc.wantStop != nil && (!errors.As(err, &re) || !errors.Is(re.Stop, tc.wantStop) || !errors.Is(re.Last, tc.fail)):
				t.Fatalf("Retry: %#v, want a RetryError stopped by %v after %v", err, tc.wantStop, tc.fail)
			}
		})
	}
}

// TestRetryDefaults checks the first wait of a Backoff left empty.
func TestRetryDefaults(t *testing.T) {
	t.Parallel()
	var waits []time.Duration
	calls := 0
	err := broker.Retry(context.Background(), broker.Backoff{OnRetry: func(_ error, w time.Duration) { waits = append(waits, w) }},
		func() error {
			if calls++; calls == 1 {
				return errFlaky
			}
			return nil
		})
	if err != nil || !reflect.DeepEqual(waits, []time.Duration{broker.RetryInitialDefault}) {
		t.Fatalf("Retry: %v, waits %v; want nil and one wait of %s", err, waits, broker.RetryInitialDefault)
	}
}

// A reminder warns first after its first interval, then at doubling
// intervals up to its most.
func TestReminder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := broker.NewReminder(t0, 5*time.Second, 30*time.Second)
	var at []time.Duration
	for s := 0; s <= 120; s++ {
		if now := t0.Add(time.Duration(s) * time.Second); r.Due(now) {
			at = append(at, now.Sub(t0))
		}
	}
	want := []time.Duration{5 * time.Second, 15 * time.Second, 35 * time.Second, 65 * time.Second, 95 * time.Second}
	if !slices.Equal(at, want) {
		t.Errorf("warned at %v, want %v", at, want)
	}
}
