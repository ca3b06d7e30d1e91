package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// TestControllerPendsQueuedAfterRestart stops a novel run's controller
// with designs on the work queue, stores the result of one of them as a
// worker does before its ack, and restarts the controller: the designs
// still in flight are pending again, so that its children avoid them, and
// the one whose result replay counted is not.
func TestControllerPendsQueuedAfterRestart(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	cfg := bu.config("novelq")
	cfg.Budget, cfg.Init, cfg.Pool = 20, 3, 2
	cfg.Novel = new(true)
	ctx, cancel := context.WithCancel(bu.ctx)
	done := bu.start(t, ctx, cfg)
	queued := func() []*schema.Design { return bu.queuedDesigns(t, "novelq") }
	bu.waitFor(t, "the designs published", func() bool { return len(queued()) >= 2 })
	cancel()
	<-done
	inFlight := queued()
	// A worker evaluated the first design and stored its result; its ack
	// did not come, so the design is still on the queue.
	first := inFlight[0]
	at := time.Now()
	bu.storeAttempt(t, &schema.Result{Run: "novelq", DesignID: first.ID, Design: *first, Status: schema.StatusOK, Fitness: 0.5,
		Worker: "w1", Host: "h1", Slot: 0, Attempt: 1, Start: at, Stop: at, Gap: -1})

	c, err := New(bu.js, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel = context.WithCancel(bu.ctx)
	defer cancel()
	looped := make(chan struct{})
	var once sync.Once
	c.cfg.OnProgress = func(Progress) { once.Do(func() { close(looped) }) } // after its first top-up
	ran := make(chan error, 1)
	go func() { _, err := c.Run(ctx); ran <- err }()
	select {
	case <-looped:
	case <-bu.ctx.Done():
		t.Fatal("the restarted controller did not start its loop")
	}
	cancel()
	<-ran
	// Run has returned: its state is this goroutine's to read.
	if !c.novel() {
		t.Fatal("the restarted run is not novel")
	}
	if c.fold.Terminal() != 1 {
		t.Fatalf("replay folded %d results, want 1", c.fold.Terminal())
	}
	for _, d := range inFlight[1:] {
		if k := runstate.GenomeKey(d.Genome); c.pending[k] < 1 {
			t.Errorf("design %s is on the queue but not pending after the restart: a child may repeat it", d.ID)
		}
		if !c.repeats(runstate.GenomeKey(d.Genome)) {
			t.Errorf("design %s in flight is not a repeat to the restarted controller", d.ID)
		}
	}
	k := runstate.GenomeKey(first.Genome)
	n := 0
	for _, d := range inFlight[1:] {
		if runstate.GenomeKey(d.Genome) == k {
			n++
		}
	}
	if c.pending[k] != n {
		t.Errorf("design %s, counted in replay, is pending %d times, want %d: replay did not balance its pend", first.ID, c.pending[k], n)
	}
	// Every design the restarted controller published is pending too,
	// once each with those it found.
	total := 0
	for _, v := range c.pending {
		total += v
	}
	if want := len(queued()) - 1; total != want {
		t.Errorf("%d designs pending after the restart, want %d (the queue's, less the one counted)", total, want)
	}
}
