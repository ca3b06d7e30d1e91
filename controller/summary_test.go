package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
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
	// Both figures are rounded: WallS to 1 ms, EvalsPerS to 0.1.
	counted := float64(budget - before)
	lo, hi := counted/(s.WallS+0.0005)-0.05, counted/max(s.WallS-0.0005, 1e-9)+0.05
	if s.EvalsPerS < lo || s.EvalsPerS > hi {
		t.Errorf("evals_per_s %v over wall_s %v s; want the %v results counted after the restart over it, %.1f to %.1f",
			s.EvalsPerS, s.WallS, counted, lo, hi)
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

// Utilization divides by every slot that evaluated, when the live count
// seen (heartbeats, which a loaded broker delays) is short of it: four
// slots busy the whole window are fully used, not twice over.
func TestSummaryUtilizationSlots(t *testing.T) {
	t.Parallel()
	f := testFold(1, 5, ReplaceWorst)
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
	if s.Slots != 2 || s.SlotsUsed != 4 || s.UtilSteady != 1 {
		t.Errorf("slots %d, used %d, util_steady %v; want 2, 4, 1", s.Slots, s.SlotsUsed, s.UtilSteady)
	}
}
