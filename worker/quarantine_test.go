package worker

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
)

// TestWorkerAvoids publishes a retry that avoids the worker (by ID or by
// host) and checks at which delivery the worker evaluates it after all:
// at MaxDeliver-1, or after AvoidHandBacks hand-backs without a limit.
func TestWorkerAvoids(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name        string
		maxDeliver  int
		hosts       []string
		workers     []string
		wantAttempt int
	}{
		{"avoided by ID, the default limit", 3, nil, []string{"w1"}, 2},
		{"avoided by host", 3, []string{"node-1"}, nil, 2},
		{"a single delivery: evaluated at once", 1, nil, []string{"w1"}, 1},
		{"not avoided", 3, []string{"node-2"}, []string{"w2"}, 1},
		{"no limit", -1, nil, []string{"w1"}, AvoidHandBacks + 1},
	}
	for i, tt := range tests {
		run := "avoid" + string(rune('a'+i))
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b.declare(t, run, broker.ConsumerConfig{MaxDeliver: tt.maxDeliver})
			d := newDesign(t, run, 1, map[string]any{"x": 1.0})
			d.Retry, d.AvoidHosts, d.AvoidWorkers = 1, tt.hosts, tt.workers
			data, err := schema.EncodeDesign(d)
			if err != nil {
				t.Fatal(err)
			}
			b.publishRaw(t, run, data)
			b.start(t, Config{Run: run, ID: "w1", Host: "node-1", Evaluator: noop})
			r := b.results(t, run, 1)[0]
			if r.Attempt != tt.wantAttempt || r.Status != schema.StatusOK || r.Design.Retry != 1 {
				t.Errorf("evaluated at delivery %d (%s, retry %d), want delivery %d", r.Attempt, r.Status, r.Design.Retry, tt.wantAttempt)
			}
			if id := r.MsgID(); id != d.ID+"/retry1/"+string(rune('0'+tt.wantAttempt)) {
				t.Errorf("result Nats-Msg-Id %s: not the retry's own", id)
			}
		})
	}
}

// TestWorkerQuarantine quarantines the slot evaluating a design, then the
// other: the first finishes its design and takes no other while the
// second goes on, the heartbeat lists the quarantined slots, and once
// both are quarantined the worker leaves with ErrQuarantined naming its
// host and last error. Orders for another worker, and malformed ones,
// change nothing.
func TestWorkerQuarantine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run = "quarantine"
	b.declare(t, run, broker.ConsumerConfig{Slots: 2})
	g := newGate()
	w := b.start(t, Config{Run: run, ID: "w1", Host: "node-7", Slots: 2, Evaluator: g})
	order := func(worker string, slots ...int) {
		t.Helper()
		data, err := schema.EncodeControl(&schema.Control{Run: run, Worker: worker, Quarantine: slots,
			Reason: "failed its last designs", Sent: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.NC.Publish(schema.ControlSubject(run, worker), data); err != nil {
			t.Fatal(err)
		}
	}
	b.publish(t, run, 1, 1)
	first := g.waitStarted(t)
	order("w2", 0, 1) // another worker's order
	if err := b.NC.Publish(schema.ControlSubject(run, "w1"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	order("w1", first.Slot)
	testutil.WaitFor(t, 10*time.Second, "the heartbeat to list the quarantined slot", func() bool {
		p := b.presence(t, run, "w1")
		return p != nil && slices.Equal(p.Quarantined, []int{first.Slot})
	})
	b.publish(t, run, 2, 3)
	second := g.waitStarted(t)
	if second.Slot == first.Slot {
		t.Fatalf("the quarantined slot %d took design %s", first.Slot, second.Design.ID)
	}
	g.release <- struct{}{} // one of the two running designs ends
	g.release <- struct{}{}
	third := g.waitStarted(t)
	if third.Slot == first.Slot {
		t.Fatalf("the quarantined slot %d took design %s", first.Slot, third.Design.ID)
	}
	order("w1", 0, 1)
	close(g.release)
	waitDone(t, w, 30*time.Second)
	err := w.Err()
	if !errors.Is(err, ErrQuarantined) || !strings.Contains(err.Error(), "node-7") {
		t.Errorf("worker left with %v; want ErrQuarantined naming its host", err)
	}
	if rs := b.results(t, run, 3); len(rs) != 3 {
		t.Errorf("%d results, want the 3 designs finished", len(rs))
	}
	if info := b.consumer(t, run); info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("%d designs pending, %d unacked after the worker left", info.NumPending, info.NumAckPending)
	}
	if p := b.presence(t, run, "w1"); p != nil {
		t.Errorf("presence %+v kept after the worker left", p)
	}
}

// A free slot waits for its design without a timer of its own: over many
// FetchWaits on an empty queue it asks once, and the dispatcher alone
// renews the pull requests. A quarantine order wakes the waiting slots at
// once, and the quarantined one stops asking.
func TestIdleSlotsWaitUntilWoken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run, id, slots = "idle-wait", "w-idle", 3
	b.declare(t, run, broker.ConsumerConfig{Slots: slots})
	g := newGate()
	w := b.start(t, Config{Run: run, ID: id, Slots: slots, Evaluator: g, FetchWait: 100 * time.Millisecond})
	testutil.WaitFor(t, 10*time.Second, "every slot waiting", func() bool {
		_, waiting := w.feed.asked()
		return waiting == slots
	})
	// Twenty FetchWaits: the requests out are renewed, the slots not.
	time.Sleep(20 * w.cfg.FetchWait)
	if n := w.feed.askCount(); n != slots {
		t.Errorf("%d asks for a design by %d idle slots over 20 FetchWaits, want one each", n, slots)
	}
	testutil.WaitFor(t, 10*time.Second, "a pull request renewed at the broker", func() bool {
		return b.consumer(t, run).NumWaiting >= 1
	})

	data, err := schema.EncodeControl(&schema.Control{Run: run, Worker: id, Quarantine: []int{1},
		Reason: "failed its last designs", Sent: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.NC.Publish(schema.ControlSubject(run, id), data); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the quarantined slot to stop waiting", func() bool {
		_, waiting := w.feed.asked()
		return waiting == slots-1
	})
	// The request out may still cover the quarantined slot and bring a
	// design for it: handed back, it goes to a slot that frees.
	b.publish(t, run, 1, slots)
	close(g.release)
	for _, r := range b.results(t, run, slots) {
		if r.Slot == 1 {
			t.Errorf("the quarantined slot evaluated design %s", r.DesignID)
		}
	}
}
