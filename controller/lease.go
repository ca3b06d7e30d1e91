package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
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
const LeaseRenew = broker.LeaseRenew

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
		if holder != nil && holder.Host == l.me.Host && !broker.ProcessAlive(holder.PID) {
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
