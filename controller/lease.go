package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// A controller holds a lease on its run for as long as it runs it: an
// entry in the lease bucket, renewed every LeaseRenew and expiring
// broker.LeaseTTL after the last renewal. Two controllers of one run
// would each publish the designs they count as unpublished, and fold the
// same results into two diverging views; the store lock guards only an
// embedded broker's directory, the lease guards a run on any broker.

// LeaseRenew is how often a controller renews its lease.
const LeaseRenew = time.Second

var (
	// ErrRunHeld means another live controller runs the run.
	ErrRunHeld = errors.New("another controller runs this run")
	// ErrLeaseLost means another controller took the run over while this
	// one ran it: this one stops.
	ErrLeaseLost = errors.New("this controller lost its lease on the run")
)

// HeldError is ErrRunHeld with the holder's lease.
type HeldError struct{ Lease *schema.Lease }

func (e *HeldError) Error() string {
	l := e.Lease
	return fmt.Sprintf("%v: controller pid %d on %s holds it since %s (last renewed %s); stop it first, or if it is dead wait %s for its lease to expire",
		ErrRunHeld, l.PID, l.Host, l.Since.Format(time.RFC3339), l.Renewed.Format(time.RFC3339), broker.LeaseTTL)
}

func (e *HeldError) Unwrap() error { return ErrRunHeld }

// lease is a controller's lease on its run.
type lease struct {
	kv  jetstream.KeyValue
	me  schema.Lease
	rev uint64
	log logrus.FieldLogger
	// figures is what the next renewal carries (setFigures).
	figures atomic.Pointer[schema.Figures]
}

// setFigures gives the next renewals the controller's figures.
func (l *lease) setFigures(f *schema.Figures) { l.figures.Store(f) }

func newLease(kv jetstream.KeyValue, run string, now time.Time, log logrus.FieldLogger) *lease {
	host, _ := os.Hostname()
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	return &lease{kv: kv, log: log, me: schema.Lease{Run: run, Host: host, PID: os.Getpid(),
		Holder: hex.EncodeToString(tok[:]), Since: now.UTC(), Renewed: now.UTC()}}
}

// acquire takes the lease, or returns a HeldError when a live controller
// holds it. A holder that renews within a few renewal periods is live; one
// whose lease the broker expires, or whose process is gone from this
// host, is not.
func (l *lease) acquire(ctx context.Context) error {
	for {
		rev, err := l.kv.Create(ctx, l.me.Run, l.encode())
		if err == nil {
			l.rev = rev
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("take the run's lease: %w", err)
		}
		e, err := l.kv.Get(ctx, l.me.Run)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired meanwhile
		}
		if err != nil {
			return fmt.Errorf("read the run's lease: %w", err)
		}
		holder, _ := schema.DecodeLease(e.Value())
		if holder != nil && holder.Host == l.me.Host && !processAlive(holder.PID) {
			l.log.WithFields(logrus.Fields{"pid": holder.PID, "since": holder.Since}).Info("the run's last controller on this host is gone; taking over its lease")
			return l.takeOver(ctx, e.Revision())
		}
		if err := l.awaitExpiry(ctx, e, holder); err != nil {
			return err
		}
	}
}

// awaitExpiry watches a held lease for up to its expiry: a renewal means
// a live holder; a lease the broker removed, or left unrenewed past its
// expiry, is free.
func (l *lease) awaitExpiry(ctx context.Context, held jetstream.KeyValueEntry, holder *schema.Lease) error {
	if holder != nil {
		l.log.WithFields(logrus.Fields{"host": holder.Host, "pid": holder.PID}).
			Info("another controller holds the run's lease; waiting to see whether it is alive")
	}
	deadline := time.Now().Add(broker.LeaseTTL + 2*LeaseRenew)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(LeaseRenew / 4):
		}
		e, err := l.kv.Get(ctx, l.me.Run)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return nil
		case err != nil:
			continue
		case e.Revision() != held.Revision():
			if h, derr := schema.DecodeLease(e.Value()); derr == nil {
				holder = h
			}
			if holder == nil {
				return ErrRunHeld
			}
			return &HeldError{Lease: holder}
		}
	}
	l.log.Warn("the run's lease was not renewed nor expired in time; taking it over")
	return l.takeOver(ctx, held.Revision())
}

// takeOver replaces a dead holder's lease, unless it changed since rev.
func (l *lease) takeOver(ctx context.Context, rev uint64) error {
	n, err := l.kv.Update(ctx, l.me.Run, l.encode(), rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return ErrRunHeld // another controller was faster
	}
	if err != nil {
		return fmt.Errorf("take over the run's lease: %w", err)
	}
	l.rev = n
	return nil
}

// keep renews the lease until ctx ends; it sends ErrLeaseLost (wrapped
// with the new holder) on lost if another controller takes the run.
func (l *lease) keep(ctx context.Context, lost chan<- error) {
	t := time.NewTicker(LeaseRenew)
	defer t.Stop()
	var warned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := l.renew(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, ErrLeaseLost):
			lost <- err
			return
		case time.Since(warned) > 10*time.Second:
			warned = time.Now()
			l.log.WithError(err).Warn("renewing the run's lease failed; retrying")
		}
	}
}

// renew renews the lease. When the broker expired it meanwhile (this
// controller was cut off longer than the lease lasts) and nobody took it,
// it is taken again.
func (l *lease) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, broker.LeaseTTL/2)
	defer cancel()
	l.me.Renewed = time.Now().UTC()
	l.me.Figures = l.figures.Load()
	rev, err := l.kv.Update(ctx, l.me.Run, l.encode(), l.rev)
	if err == nil {
		l.rev = rev
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return err
	}
	e, gerr := l.kv.Get(ctx, l.me.Run)
	if errors.Is(gerr, jetstream.ErrKeyNotFound) {
		rev, err := l.kv.Create(ctx, l.me.Run, l.encode())
		if err == nil {
			l.rev = rev
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		e, gerr = l.kv.Get(ctx, l.me.Run)
	}
	if gerr != nil {
		return gerr
	}
	holder, derr := schema.DecodeLease(e.Value())
	if derr == nil && holder.Holder == l.me.Holder {
		l.rev = e.Revision() // our own renewal, whose confirmation was lost
		return nil
	}
	if derr != nil {
		return fmt.Errorf("%w: its lease holds something else", ErrLeaseLost)
	}
	return fmt.Errorf("%w: controller pid %d on %s took it over", ErrLeaseLost, holder.PID, holder.Host)
}

// release gives the lease up, so that a next controller need not wait for
// it to expire.
func (l *lease) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = l.kv.Delete(ctx, l.me.Run, jetstream.LastRevision(l.rev))
}

func (l *lease) encode() []byte {
	b, err := schema.EncodeLease(&l.me)
	if err != nil {
		panic(fmt.Sprintf("encode a valid lease: %v", err)) // the fields are ours and valid
	}
	return b
}

// processAlive reports whether a process with this pid runs on this host.
// A zombie does not: a controller killed stays one until its parent (a
// batch script, a shell) reaps it, and answers signal 0 meanwhile.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !zombie(pid)
}

// zombie reports whether the process pid has ended and awaits its
// parent's wait, where /proc says so (Linux); false where it cannot tell.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses, so the
	// state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// LeaseFresh is how recently a controller must have renewed its lease to
// count as live: a missed renewal or two. The broker expires a lease only
// broker.LeaseTTL after its last renewal, long enough to ride out a
// broker's restart; a reader that waited for that would show a dead
// controller's figures for seconds as if it ran.
const LeaseFresh = 3 * LeaseRenew

// LeaseView is a run's lease as a reader finds it.
type LeaseView struct {
	Lease *schema.Lease
	// Renewed is when the broker stored the last renewal, on the reader's
	// clock, and Age how long ago that was.
	Renewed time.Time
	Age     time.Duration
	// PIDGone says that the holder ran on this host and its process is
	// gone.
	PIDGone bool
}

// Live reports whether the holder still renews its lease: it did within
// LeaseFresh, and, when it runs on this host, its process is there.
func (v *LeaseView) Live() bool { return v.Age < LeaseFresh && !v.PIDGone }

// ReadLease returns run's lease, or nil when no controller holds it. The
// lease's age is measured on the broker's clock, which stored the renewal
// and answers with its own time, so that a reader on a host whose clock
// is off from the controller's still tells a live controller from a dead
// one; where the broker does not say its time, the reader's clock serves.
func ReadLease(ctx context.Context, js jetstream.JetStream, run string) (*LeaseView, error) {
	kv, err := js.KeyValue(ctx, schema.LeaseBucket)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l, err := schema.DecodeLease(e.Value())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	age := now.Sub(e.Created())
	if bt, ok := BrokerTime(ctx, kv); ok {
		age = bt.Sub(e.Created())
	}
	age = max(age, 0)
	v := &LeaseView{Lease: l, Renewed: now.Add(-age), Age: age}
	if host, _ := os.Hostname(); host != "" && l.Host == host && !processAlive(l.PID) {
		v.PIDGone = true
	}
	return v, nil
}

// BrokerTime is the broker's clock now, as it answers a status request on
// kv's stream; false when it did not say.
func BrokerTime(ctx context.Context, kv jetstream.KeyValue) (time.Time, bool) {
	st, err := kv.Status(ctx)
	if err != nil {
		return time.Time{}, false
	}
	s, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || s.StreamInfo() == nil || s.StreamInfo().TimeStamp.IsZero() {
		return time.Time{}, false
	}
	return s.StreamInfo().TimeStamp, true
}

// LeaseHolder returns the lease of the controller that runs run, or nil
// when none holds it.
func LeaseHolder(ctx context.Context, js jetstream.JetStream, run string) (*schema.Lease, error) {
	kv, err := js.KeyValue(ctx, schema.LeaseBucket)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return schema.DecodeLease(e.Value())
}
