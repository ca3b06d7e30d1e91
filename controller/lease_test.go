package controller

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
)

// leases declares the buckets on a fresh broker and returns the lease
// bucket.
func leases(t *testing.T, bu *bundle) jetstream.KeyValue {
	t.Helper()
	if err := broker.Declare(bu.ctx, bu.js); err != nil {
		t.Fatal(err)
	}
	kv, err := bu.js.KeyValue(bu.ctx, schema.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// A second controller of a run whose controller lives is refused, naming
// the holder; once the holder stops renewing, its lease expires and the
// next controller takes the run.
func TestLeaseRefusesASecondControllerUntilTheFirstDies(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	kv := leases(t, bu)
	first := newLease(kv, "r", time.Now(), bu.log)
	first.me.Host = "node-a" // another host: its pid cannot be checked here
	if err := first.acquire(bu.ctx); err != nil {
		t.Fatal(err)
	}
	keepCtx, stopKeeping := context.WithCancel(bu.ctx)
	lost := make(chan error, 1)
	go first.keep(keepCtx, lost)

	second := newLease(kv, "r", time.Now(), bu.log)
	err := second.acquire(bu.ctx)
	var held *HeldError
	if !errors.As(err, &held) || held.Lease.Host != "node-a" || held.Lease.Holder != first.me.Holder {
		t.Fatalf("second acquire = %v; want a HeldError naming node-a", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "node-a") || !strings.Contains(msg, "pid") {
		t.Errorf("error %q does not name the holder's host and pid", msg)
	}

	stopKeeping() // the first controller dies without releasing its lease
	began := time.Now()
	if err := second.acquire(bu.ctx); err != nil {
		t.Fatalf("acquire after the holder died: %v", err)
	}
	if took := time.Since(began); took > broker.LeaseTTL+3*LeaseRenew+5*time.Second {
		t.Errorf("took the dead holder's run after %s; its lease lasts %s", took, broker.LeaseTTL)
	}
	h, err := broker.LeaseHolder(bu.ctx, bu.js, "r")
	if err != nil || h == nil || h.Holder != second.me.Holder {
		t.Fatalf("holder after the takeover = %+v, %v; want the second controller", h, err)
	}
}

// A controller whose lease was taken over learns it at its next renewal.
func TestLeaseLost(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	kv := leases(t, bu)
	l := newLease(kv, "r", time.Now(), bu.log)
	if err := l.acquire(bu.ctx); err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	go l.keep(bu.ctx, lost)
	other := newLease(kv, "r", time.Now(), bu.log)
	if _, err := kv.Put(bu.ctx, "r", other.encode()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, ErrLeaseLost) {
			t.Errorf("lost = %v; want ErrLeaseLost", err)
		}
	case <-time.After(10 * LeaseRenew):
		t.Fatal("the controller did not notice that its lease was taken")
	}
}

// On one host, a holder whose process is gone is replaced at once, and a
// released lease is free at once.
func TestLeaseDeadProcessAndRelease(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	kv := leases(t, bu)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := newLease(kv, "r", time.Now(), bu.log)
	dead.me.PID = gone.Process.Pid
	if err := dead.acquire(bu.ctx); err != nil {
		t.Fatal(err)
	}
	next := newLease(kv, "r", time.Now(), bu.log)
	ctx := testutil.Context(t, 2*time.Second) // well inside the lease's TTL
	if err := next.acquire(ctx); err != nil {
		t.Fatalf("taking over from a dead process of this host: %v", err)
	}
	next.release(bu.ctx)
	last := newLease(kv, "r", time.Now(), bu.log)
	last.me.Host = "node-b"
	if err := last.acquire(ctx); err != nil {
		t.Fatalf("acquire after a release: %v", err)
	}
}

// A reader tells a live controller from a dead one within a missed
// renewal or two, not the lease's TTL: by the age of its last renewal on
// the broker's clock, and at once on this host when its process is gone.
func TestReadLease(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	kv := leases(t, bu)
	if v, err := broker.ReadLease(bu.ctx, bu.js, "r"); err != nil || v != nil {
		t.Fatalf("ReadLease of a run nobody holds = %+v, %v; want nil", v, err)
	}

	l := newLease(kv, "r", time.Now(), bu.log)
	l.me.Host = "node-a" // another host: only the renewals tell
	if err := l.acquire(bu.ctx); err != nil {
		t.Fatal(err)
	}
	keepCtx, stopKeeping := context.WithCancel(bu.ctx)
	go l.keep(keepCtx, make(chan error, 1))
	v, err := broker.ReadLease(bu.ctx, bu.js, "r")
	if err != nil || v == nil || !v.Live() || v.PIDGone {
		t.Fatalf("ReadLease of a renewed lease = %+v, %v; want live", v, err)
	}
	stopKeeping() // killed: no more renewals, no release
	stopped := time.Now()
	deadline := time.Now().Add(broker.LeaseTTL)
	for v.Live() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if v, err = broker.ReadLease(bu.ctx, bu.js, "r"); err != nil || v == nil {
			t.Fatalf("ReadLease = %+v, %v", v, err)
		}
	}
	took := time.Since(stopped)
	if v.Live() || took > broker.LeaseFresh+LeaseRenew {
		t.Fatalf("a lease unrenewed for %s reads live=%v (age %s); want not live within %s", took, v.Live(), v.Age, broker.LeaseFresh+LeaseRenew)
	}
	if v.Renewed.After(stopped.Add(time.Second)) || v.Renewed.Before(stopped.Add(-2*LeaseRenew)) {
		t.Errorf("last renewal read as %s; the renewals stopped at %s", v.Renewed, stopped)
	}

	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := newLease(kv, "s", time.Now(), bu.log)
	dead.me.PID = gone.Process.Pid
	if err := dead.acquire(bu.ctx); err != nil {
		t.Fatal(err)
	}
	v, err = broker.ReadLease(bu.ctx, bu.js, "s")
	if err != nil || v == nil || !v.PIDGone || v.Live() {
		t.Fatalf("ReadLease of a fresh lease whose process on this host is gone = %+v, %v; want pid gone, not live", v, err)
	}
}
