package controller

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/schema"
)

// foreignRun is result made a result of design seq of another run.
func foreignRun(run string, seq uint64) *schema.Result {
	r := result(seq, schema.StatusOK, 0.5)
	r.Run, r.Design.Run = run, run
	r.DesignID = schema.DesignID(run, seq)
	r.Design.ID = r.DesignID
	return r
}

// TestTallyRule feeds one stream of results, in order, to a tally of run
// "t" with budget 5 and checks the verdict on each.
func TestTallyRule(t *testing.T) {
	t.Parallel()
	badID := result(4, schema.StatusOK, 1)
	badID.DesignID, badID.Design.ID = "t-04", "t-04"
	mixed := result(4, schema.StatusOK, 1)
	mixed.Design.Run = "u"         // the result says run t, its design run u
	prefix := foreignRun("t-1", 2) // ID "t-1-2": run t's prefix, not its design
	steps := []struct {
		name string
		r    *schema.Result
		err  error
		want Verdict
	}{
		{"the first result of a design", result(1, schema.StatusOK, 0.1), nil, Counted},
		{"a second result of that design", again(result(1, schema.StatusOK, 0.1), schema.StatusOK, 9), nil, Duplicate},
		{"the same result stored again", result(1, schema.StatusOK, 0.1), nil, Duplicate},
		{"a result that did not decode", nil, errors.New("msgpack: invalid code"), Malformed},
		{"a result that did not validate", result(2, schema.StatusOK, 1), schema.ErrInvalid, Malformed},
		{"another run's design", foreignRun("u", 2), nil, Foreign},
		{"a run whose ID starts with this run's", prefix, nil, Foreign},
		{"a design ID not the run's form", badID, nil, Foreign},
		{"a design of another run under this run's result", mixed, nil, Foreign},
		{"seq 0", result(0, schema.StatusOK, 1), nil, Foreign},
		{"seq beyond the budget", result(6, schema.StatusOK, 1), nil, Foreign},
		{"a seq no foreign result took", result(2, schema.StatusError, 0), nil, Counted},
		{"the last seq of the budget, out of order", result(5, schema.StatusLost, 0), nil, Counted},
		{"a lost record after the result", result(5, schema.StatusLost, 0), nil, Duplicate},
		{"a seq whose malformed result did not count", result(4, schema.StatusInfeasible, 0), nil, Counted},
	}
	tally := NewTally("t", 5, Rules{})
	for _, s := range steps {
		if got := tally.Judge(s.r, s.err); got != s.want {
			t.Errorf("%s: %s, want %s", s.name, got, s.want)
		}
	}
	if tally.Counted() != 4 {
		t.Errorf("%d counted, want 4", tally.Counted())
	}
	for seq, want := range map[uint64]bool{1: true, 2: true, 3: false, 4: true, 5: true, 6: false} {
		if tally.Has(seq) != want {
			t.Errorf("Has(%d) = %v, want %v", seq, !want, want)
		}
	}
	for seq, want := range map[uint64]int{0: 0, 1: 1, 2: 2, 3: 2, 4: 3, 5: 4, 9: 4} {
		if got := tally.CountedUpTo(seq); got != want {
			t.Errorf("CountedUpTo(%d) = %d, want %d", seq, got, want)
		}
	}
}

// TestTallyRaisedBudget pins the edge the rule documents: a result for a
// seq between an old budget and a raised one is foreign under the old
// budget and counts under the raised one.
func TestTallyRaisedBudget(t *testing.T) {
	t.Parallel()
	r := result(7, schema.StatusOK, 1)
	if v := NewTally("t", 5, Rules{}).Judge(r, nil); v != Foreign {
		t.Errorf("budget 5: %s, want foreign", v)
	}
	if v := NewTally("t", 10, Rules{}).Judge(r, nil); v != Counted {
		t.Errorf("budget 10: %s, want counted", v)
	}
}

// TestFoldIgnoresWhatDoesNotCount checks that only a counted result
// changes the fold.
func TestFoldIgnoresWhatDoesNotCount(t *testing.T) {
	t.Parallel()
	f := NewFold(NewTally("t", 3, Rules{}), 1, 2, ReplaceWorst)
	if v := f.Apply(result(1, schema.StatusOK, 0.2), nil); v != Counted {
		t.Fatalf("first result: %s", v)
	}
	digest := f.Pool().Digest()
	for _, r := range []*schema.Result{result(4, schema.StatusOK, 9), foreignRun("u", 2), nil} {
		var err error
		if r == nil {
			err = schema.ErrInvalid
		}
		f.Apply(r, err)
	}
	if f.Terminal() != 1 || f.Count(schema.StatusOK) != 1 || f.MaxSeq() != 1 || f.Pool().Digest() != digest || f.Best().Fitness != 0.2 {
		t.Errorf("terminal %d, ok %d, max seq %d, best %v: a result that does not count changed the fold",
			f.Terminal(), f.Count(schema.StatusOK), f.MaxSeq(), f.Best().Fitness)
	}
}

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
