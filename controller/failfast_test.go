package controller

import (
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A held verdict (the first attempts all failed) waits for every live slot
// to fail too: one broken node that fails at once, while the healthy
// slots still train their first designs, must not fail the run; an
// attempt that works drops the verdict.
func TestFailFastWaitsForEveryLiveSlot(t *testing.T) {
	t.Parallel()
	now := epoch
	c := offline(t, Config{FailFast: 3, Now: func() time.Time { return now }})
	c.live = true
	c.initState()
	for _, w := range []string{"broken", "healthy"} {
		c.slots.put(&schema.Presence{Run: "t", Worker: w, Slots: 1, Interval: time.Second, Heartbeat: now}, now)
	}
	feed := func(seq uint64, worker string, status schema.Status) {
		t.Helper()
		d := schema.Design{V: schema.Version, Run: "t", ID: schema.DesignID("t", seq), Seq: seq, Origin: schema.OriginRandom}
		r := &schema.Result{V: schema.Version, Run: "t", DesignID: d.ID, Design: d, Status: status, Worker: worker, Error: "CUDA error"}
		c.judge(resultMsg{res: r, seq: seq}, c.fold.Apply(r, nil))
	}
	for seq := uint64(1); seq <= 5; seq++ {
		feed(seq, "broken", schema.StatusError)
	}
	if c.failFast.Held() == nil || c.failure != nil {
		t.Fatalf("after 5 failures of one slot of two: held %v, failure %v; want held, not failed", c.failFast.Held(), c.failure)
	}
	feed(6, "healthy", schema.StatusError)
	if c.failure == nil || c.failure.Attempts != 3 {
		t.Fatalf("every live slot failed: failure %+v; want the held verdict on the first 3", c.failure)
	}

	c = offline(t, Config{FailFast: 3, Now: func() time.Time { return now }})
	c.live = true
	c.initState()
	for _, w := range []string{"broken", "healthy"} {
		c.slots.put(&schema.Presence{Run: "t", Worker: w, Slots: 1, Interval: time.Second, Heartbeat: now}, now)
	}
	for seq := uint64(1); seq <= 4; seq++ {
		feed(seq, "broken", schema.StatusError)
	}
	feed(5, "healthy", schema.StatusOK)
	feed(6, "broken", schema.StatusError)
	if !c.failFast.Passed() || c.failFast.Held() != nil || c.failure != nil {
		t.Fatalf("an attempt worked: passed %v, held %v, failure %v; want passed and nothing held", c.failFast.Passed(), c.failFast.Held(), c.failure)
	}
}

// A node that fails at once while the slots the run expects are still
// joining does not fail the run; once the grace for them is over, its
// failures are every slot's there is, and the run fails, also when the
// node's slots are no longer fed.
func TestFailFastWaitsForExpectedSlots(t *testing.T) {
	t.Parallel()
	for _, heldAway := range []bool{false, true} {
		now := epoch
		c := offline(t, Config{FailFast: 3, ExpectSlots: 4, JoinGrace: time.Minute, Now: func() time.Time { return now }})
		c.live, c.liveSince = true, now
		c.initState()
		beat := func() {
			c.slots.put(&schema.Presence{Run: "t", Worker: "broken", Host: "node1", Slots: 1, Interval: time.Second, Heartbeat: now}, now)
		}
		beat()
		for seq := uint64(1); seq <= 3; seq++ {
			d := schema.Design{V: schema.Version, Run: "t", ID: schema.DesignID("t", seq), Seq: seq, Origin: schema.OriginRandom}
			r := &schema.Result{V: schema.Version, Run: "t", DesignID: d.ID, Design: d, Status: schema.StatusError,
				Worker: "broken", Host: "node1", Error: "CUDA error"}
			c.judge(resultMsg{res: r, seq: seq}, c.fold.Apply(r, nil))
		}
		if c.failFast.Held() == nil || c.failure != nil {
			t.Fatalf("one node's failures while 3 of 4 expected slots are to come: held %v, failure %v; want held, not failed", c.failFast.Held(), c.failure)
		}
		if heldAway {
			c.heldEarly, c.heldEarlyAt = map[string][]int{"broken": {0}}, map[string]time.Time{"broken": now}
		}
		now = now.Add(30 * time.Second)
		beat()
		c.decideFailure(false)
		if c.failure != nil {
			t.Fatalf("within the grace: failure %+v; want none", c.failure)
		}
		now = now.Add(31 * time.Second)
		beat()
		c.decideFailure(false)
		if c.failure == nil || c.failure.Attempts != 3 {
			t.Fatalf("held away %v, past the grace: failure %+v; want the held verdict", heldAway, c.failure)
		}
	}
}
