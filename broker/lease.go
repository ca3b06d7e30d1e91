package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaseRenew is how often a controller renews its run's lease.
const LeaseRenew = time.Second

// ProcessAlive reports whether a process with this pid runs on this host.
// A zombie does not: a controller killed stays one until its parent (a
// batch script, a shell) reaps it, and answers signal 0 meanwhile.
func ProcessAlive(pid int) bool {
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
	if host, _ := os.Hostname(); host != "" && l.Host == host && !ProcessAlive(l.PID) {
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
