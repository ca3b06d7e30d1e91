package controller

import (
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/schema"
)

// recorder is a Metrics that keeps what it is given.
type recorder struct {
	mu      sync.Mutex
	counted []*schema.Result
	snaps   []Snapshot
}

func (r *recorder) Counted(res *schema.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counted = append(r.counted, res)
}

func (r *recorder) Observe(s Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, s)
}

func (r *recorder) take() ([]*schema.Result, []Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counted, r.snaps
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget, slots = "metrics", 60, 2
	m := &recorder{}
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool = budget, 5, 5
	cfg.ExpectSlots, cfg.WaitSlots = slots, slots
	cfg.Progress = 20 * time.Millisecond // the loop's tick, which observes
	cfg.Metrics = m
	done := bu.start(t, bu.ctx, cfg)
	bu.worker(t, run, "w1", slots, evaluators.Sim{Mean: 10 * time.Millisecond, Fail: 0.3}, 0)
	o := bu.wait(t, done)
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	counted, snaps := m.take()
	checkCounted(t, "live run", counted, o.s)
	if len(snaps) == 0 {
		t.Fatal("Observe never called")
	}
	best := false
	for _, s := range snaps {
		if s.Budget != budget || s.SlotsLive > slots || s.SlotsBusy > s.SlotsLive || s.InFlight < 0 || s.Queued < 0 {
			t.Errorf("snapshot %+v: want budget %d, at most %d live slots, busy <= live", s, budget, slots)
		}
		if s.Best != nil {
			best = true
			if *s.Best > *o.s.BestFitness {
				t.Errorf("snapshot best %v above the run's best %v", *s.Best, *o.s.BestFitness)
			}
		}
	}
	if !best {
		t.Error("no snapshot has a best fitness")
	}

	// A restarted controller counts what it replays, once each.
	again := &recorder{}
	cfg.Metrics, cfg.WaitSlots = again, 0 // the worker left when the run ended
	o = bu.wait(t, bu.start(t, bu.ctx, cfg))
	if o.err != nil {
		t.Fatalf("restart: Run: %v", o.err)
	}
	counted, _ = again.take()
	checkCounted(t, "restart", counted, o.s)
}

// checkCounted checks that Counted saw each design once, and as many of
// each status as the summary.
func checkCounted(t *testing.T, what string, counted []*schema.Result, s *runstate.Summary) {
	t.Helper()
	byStatus := map[schema.Status]int{}
	seen := map[string]bool{}
	for _, r := range counted {
		if seen[r.DesignID] {
			t.Errorf("%s: %s counted twice", what, r.DesignID)
		}
		seen[r.DesignID] = true
		byStatus[r.Status]++
	}
	want := map[schema.Status]int{schema.StatusOK: s.OK, schema.StatusInfeasible: s.Infeasible,
		schema.StatusError: s.Error, schema.StatusTimeout: s.Timeout, schema.StatusLost: s.Lost}
	if len(counted) != s.Evaluations || byStatus[schema.StatusOK] != want[schema.StatusOK] ||
		byStatus[schema.StatusInfeasible] != want[schema.StatusInfeasible] || s.Infeasible == 0 {
		t.Errorf("%s: counted %d results %v; summary has %d: %v, with some infeasible", what, len(counted), byStatus, s.Evaluations, want)
	}
}

// OnResult is handed every stored result the controller folds, in stream
// order: as many as the stream holds, each sequence once, rising.
func TestOnResult(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget, slots = "onresult", 40, 2
	var mu sync.Mutex
	var seqs []uint64
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool = budget, 5, 5
	cfg.ExpectSlots, cfg.WaitSlots = slots, slots
	cfg.OnResult = func(seq uint64, r *schema.Result, err error, _ int) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil && r != nil {
			seqs = append(seqs, seq)
		}
	}
	done := bu.start(t, bu.ctx, cfg)
	bu.worker(t, run, "w1", slots, evaluators.Sim{Mean: 5 * time.Millisecond, Fail: 0.3}, 0)
	if o := bu.wait(t, done); o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seqs) < budget {
		t.Fatalf("OnResult got %d results, want at least the budget, %d", len(seqs), budget)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("OnResult out of stream order: %d after %d", seqs[i], seqs[i-1])
		}
	}
}
