package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/schema"
)

// A controller restarted on a run whose whole budget was already published
// has nothing to publish, yet its summary has a wall time and a rate: the
// evaluations it counted itself over its own time, the replayed ones left
// out.
func TestSummaryAfterRestart(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget, before = "resumed", 12, 3
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool = budget, 5, 5
	cfg.Margin = budget // with no worker yet, the whole budget is published at once
	ctx1, cancel1 := context.WithCancel(bu.ctx)
	defer cancel1()
	done1 := bu.start(t, ctx1, cfg)
	bu.waitFor(t, "whole budget published", func() bool { return bu.published(t) == budget })
	cons := bu.consumer(t, run)
	for i := range before {
		storeByHand(t, bu, cons, float64(i))
	}
	cancel1()
	if o := bu.wait(t, done1); !errors.Is(o.err, context.Canceled) {
		t.Fatalf("first controller returned %v", o.err)
	}

	// The second controller replays, then marks the run starting and
	// running; a worker started before would evaluate the queued designs
	// while it replays, and every result would count as replayed.
	rev := bu.runRevision(t, run)
	done2 := bu.start(t, bu.ctx, cfg)
	bu.waitFor(t, "resumed second controller", func() bool { return bu.runRevision(t, run) >= rev+2 })
	bu.worker(t, run, "w1", 2, evaluators.Noop{}, 0)
	o := bu.wait(t, done2)
	if o.err != nil {
		t.Fatalf("second controller: %v", o.err)
	}
	s := o.s
	if s.Evaluations != budget {
		t.Fatalf("evaluations %d, want %d", s.Evaluations, budget)
	}
	if s.WallS <= 0 || s.EvalsPerS <= 0 {
		t.Fatalf("wall_s %v, evals_per_s %v; want the second controller's own time and rate", s.WallS, s.EvalsPerS)
	}
	t.Logf("after the restart: wall_s %v, evals_per_s %v", s.WallS, s.EvalsPerS)
	// The figures are rounded: WallS and WaitFirstSlotS to 1 ms,
	// EvalsPerS to 0.1. The worker joined after the replay: the rate is
	// over the time from then.
	counted, work := float64(budget-before), s.WallS-s.WaitFirstSlotS
	lo, hi := counted/(work+0.001)-0.05, counted/max(work-0.001, 1e-9)+0.05
	if s.EvalsPerS < lo || s.EvalsPerS > hi {
		t.Errorf("evals_per_s %v over wall_s %v s less wait_first_slot_s %v s; want the %v results counted after the restart over it, %.1f to %.1f",
			s.EvalsPerS, s.WallS, s.WaitFirstSlotS, counted, lo, hi)
	}
}

// storeByHand takes one design off the work queue, stores an ok result
// for it and acks it, as a worker would.
func storeByHand(t *testing.T, bu *bundle, cons jetstream.Consumer, fitness float64) {
	t.Helper()
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("take a design: %v", err)
	}
	d, err := schema.DecodeDesign(msg.Data())
	if err != nil {
		t.Fatalf("design does not decode: %v", err)
	}
	now := time.Now()
	data, err := schema.EncodeResult(&schema.Result{V: schema.Version, Run: d.Run, DesignID: d.ID, Design: *d,
		Status: schema.StatusOK, Fitness: fitness, Worker: "hand", Attempt: 1, Start: now, Stop: now, Gap: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bu.js.Publish(bu.ctx, schema.ResultSubject(d.Run), data); err != nil {
		t.Fatalf("store the result of %s: %v", d.ID, err)
	}
	if err := msg.Ack(); err != nil {
		t.Fatalf("ack %s: %v", d.ID, err)
	}
}

// Utilization divides by the slot-time of the slots that evaluated, not
// by the live count seen (heartbeats, which a loaded broker delays): four
// slots busy the whole window are fully used, not twice over; and the
// slots live at once are at least those the results show.
func TestSummaryUtilizationSlots(t *testing.T) {
	t.Parallel()
	f := testFold(1, 5, runstate.ReplaceWorst)
	for seq := uint64(1); seq <= 8; seq++ {
		r := result(seq, schema.StatusOK, 1)
		// Slots 0..3 each run 0..10 s, then 10..20 s: the last start is at
		// 10 s, every slot busy up to it.
		r.Slot = int(seq-1) % 4
		r.Start = epoch.Add(time.Duration((seq-1)/4) * 10 * time.Second)
		r.Stop = r.Start.Add(10 * time.Second)
		f.Apply(r, nil)
	}
	tr := newSlotTracker()
	now := epoch.Add(time.Second)
	tr.put(&schema.Presence{Run: "t", Worker: "w", Slots: 2, Interval: time.Minute, Heartbeat: now, Started: epoch}, now)
	c := &Controller{cfg: Config{Run: "t", Space: mlpSpace(t)}, fold: f, slots: tr}
	s := c.Summary()
	if s.Slots != 4 || s.SlotsUsed != 4 || s.UtilSteady != 1 {
		t.Errorf("slots %d, used %d, util_steady %v; want 4, 4, 1", s.Slots, s.SlotsUsed, s.UtilSteady)
	}
}

// Workers that join after the controller published its first designs:
// the summary keeps the wall time, says how much of it passed before a
// slot was live, and takes the rate and the progress line's ETA over the
// rest.
func TestSummaryWaitFirstSlot(t *testing.T) {
	t.Parallel()
	now := epoch.Add(20 * time.Second)
	c := offline(t, Config{Budget: 10, Init: 2, Pool: 2, Now: func() time.Time { return now }})
	c.liveSince = epoch
	if s := c.Summary(); s.WaitFirstSlotS != 20 || s.EvalsPerS != 0 {
		t.Errorf("no slot yet: wait_first_slot_s %v, evals_per_s %v; want 20, 0", s.WaitFirstSlotS, s.EvalsPerS)
	}
	c.slots.put(presence("w", 2, 0, time.Hour, false), epoch.Add(12*time.Second))
	for i := range 4 {
		seq := uint64(i + 1)
		r := result(seq, schema.StatusOK, float64(i))
		r.Slot = i % 2
		r.Start = epoch.Add(time.Duration(12+2*i) * time.Second)
		r.Stop = r.Start.Add(time.Second)
		c.fold.Apply(r, nil)
	}
	s := c.Summary()
	if s.WallS != 20 || s.WaitFirstSlotS != 12 || s.EvalsPerS != 0.5 {
		t.Errorf("wall_s %v, wait_first_slot_s %v, evals_per_s %v; want 20, 12 and 4 evaluations over 8 s: 0.5",
			s.WallS, s.WaitFirstSlotS, s.EvalsPerS)
	}
	p := c.Progress()
	if p.Rate != 0.5 || p.ETA != 12*time.Second {
		t.Errorf("progress rate %v/s, ETA %v; want 0.5/s and the 6 evaluations left at it, 12s", p.Rate, p.ETA)
	}
}
