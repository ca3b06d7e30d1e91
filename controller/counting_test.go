package controller

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/schema"
)

// TestControllerSkipsCountedSeqs stores, besides a run's own results, a
// result for a design of the run's budget that the controller has not
// published, one beyond the budget and one of another run, and checks that
// the controller publishes every other design once, never that one, and
// ends at its budget: with the results stored before it starts (a restart
// replaying them) and while it runs.
func TestControllerSkipsCountedSeqs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		before bool
	}{
		{"stored before a restart", true},
		{"stored while running", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bu := setup(t)
			const run, budget, ahead = "skip", 30, 9
			rng := rand.New(rand.NewPCG(3, 4))
			store := func(r *schema.Result) {
				t.Helper()
				data, err := schema.EncodeResult(r)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := bu.js.Publish(bu.ctx, schema.ResultSubject(run), data); err != nil {
					t.Fatalf("store a result: %v", err)
				}
			}
			stored := func(seq uint64) *schema.Result {
				d := schema.Design{Run: run, ID: schema.DesignID(run, seq), Seq: seq, Genome: bu.space.Random(rng),
					Origin: schema.OriginRandom, Created: time.Now()}
				return &schema.Result{Run: run, DesignID: d.ID, Design: d, Status: schema.StatusOK, Fitness: 0.5,
					Worker: "intruder", Attempt: 1, Start: time.Now(), Stop: time.Now()}
			}
			others := func() {
				store(stored(ahead))
				store(stored(budget + 1))
				other := stored(2)
				other.Run, other.Design.Run = "other", "other"
				other.DesignID, other.Design.ID = schema.DesignID("other", 2), schema.DesignID("other", 2)
				store(other)
			}
			own := 0
			if tt.before {
				// A run whose designs 1..3 are done and whose queue is
				// empty, with a result stored ahead of the designs published.
				for seq := uint64(1); seq <= 3; seq++ {
					store(stored(seq))
				}
				own = 3
				others()
			}
			var mu sync.Mutex
			var last Progress
			cfg := bu.config(run)
			cfg.Budget, cfg.Init, cfg.Pool = budget, 5, 5
			cfg.OnProgress = func(p Progress) { mu.Lock(); last = p; mu.Unlock() }
			ctx, cancel := context.WithCancel(bu.ctx)
			defer cancel()
			done := bu.start(t, ctx, cfg)
			if !tt.before {
				// No worker yet: the controller publishes its margin and
				// waits; the results stored now are ahead of it.
				bu.waitFor(t, "the first designs queued", func() bool { return bu.queued(t, run) > 0 })
				others()
				bu.waitFor(t, "the result ahead counted", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return last.Evaluations == 1
				})
			}
			bu.worker(t, run, "w1", 4, evaluators.Noop{}, 0)
			o := bu.wait(t, done)
			if o.err != nil {
				t.Fatalf("Run: %v", o.err)
			}
			if o.s.Evaluations != budget {
				t.Errorf("%d evaluations, want %d", o.s.Evaluations, budget)
			}
			if n := bu.published(t); n != budget-1-own {
				t.Errorf("%d designs published, want %d: all but the %d done before and the one taken ahead", n, budget-1-own, own)
			}
			perSeq := map[uint64]int{}
			for _, r := range bu.results(t, run) {
				if r.Run == run {
					perSeq[r.Design.Seq]++
				}
			}
			for seq := uint64(1); seq <= budget; seq++ {
				if perSeq[seq] != 1 {
					t.Errorf("design %d has %d results, want 1", seq, perSeq[seq])
				}
			}
		})
	}
}
