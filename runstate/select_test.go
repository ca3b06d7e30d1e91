package runstate

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/evoq/evoq/schema"
)

// stoppedAt is a stopped result of design seq with the fitness it reached.
func stoppedAt(seq uint64, fitness float64) *schema.Result {
	r := result(seq, schema.StatusStopped, 0)
	r.Fitness = fitness
	r.Metrics = map[string]any{"stopped_at": int64(3)}
	return r
}

func asha(sel string) *schema.EarlyStop {
	return &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, Select: sel}
}

// With SelectReached a stopped design is a member of the pool with the
// fitness it reached, and competes for it as an ok one does; it is never
// the run's best. Without it (off, a record from before the field, no
// rule) the pool holds designs that trained to their end alone.
func TestFoldSelectReached(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rule    *schema.EarlyStop
		reached bool
	}{
		{"reached", asha(schema.SelectReached), true},
		{"off", asha(schema.SelectOff), false},
		{"recorded before select", asha(""), false},
		{"no rule", nil, false},
		{"rule none", &schema.EarlyStop{Rule: RuleNone, Select: schema.SelectReached}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := testFold(2, 2, ReplaceWorst)
			f.SetSelect(tc.rule)
			f.Apply(result(1, schema.StatusOK, 0.5), nil)
			f.Apply(result(2, schema.StatusOK, 0.6), nil)
			// Reached 0.7 at its rung: better than the pool's worst.
			f.Apply(stoppedAt(3, 0.7), nil)
			ids := memberIDs(f.Pool())
			if tc.reached {
				if f.Added() != true || f.Evicted() != schema.DesignID("t", 1) || ids != "t-2 t-3" {
					t.Fatalf("pool %q, added %v, evicted %q; want the stopped design in, t-1 out", ids, f.Added(), f.Evicted())
				}
			} else if f.Added() || f.Evicted() != "" || ids != "t-1 t-2" {
				t.Fatalf("pool %q, added %v, evicted %q; want the ok designs alone", ids, f.Added(), f.Evicted())
			}
			if b := f.Best(); b == nil || b.Design.ID != schema.DesignID("t", 2) {
				t.Fatalf("best %+v; want t-2, the best that trained to its end", b)
			}
			// A stopped design below the pool's worst is evicted at once.
			f.Apply(stoppedAt(4, 0.1), nil)
			if got := memberIDs(f.Pool()); got != ids || f.Added() != tc.reached || (tc.reached && f.Evicted() != schema.DesignID("t", 4)) {
				t.Fatalf("pool %q (was %q), added %v, evicted %q", got, ids, f.Added(), f.Evicted())
			}
			if f.Count(schema.StatusStopped) != 2 {
				t.Fatalf("%d stopped counted, want 2", f.Count(schema.StatusStopped))
			}
		})
	}
}

// A stopped design wins a tournament on the fitness it reached.
func TestTournamentStoppedParent(t *testing.T) {
	t.Parallel()
	f := testFold(1, 2, ReplaceWorst)
	f.SetSelect(asha(schema.SelectReached))
	f.Apply(result(1, schema.StatusOK, 0.5), nil)
	f.Apply(stoppedAt(2, 0.8), nil)
	w := f.Pool().Tournament(rand.New(rand.NewPCG(1, 2)), 2)
	if w.Design.ID != schema.DesignID("t", 2) || w.Fitness != 0.8 {
		t.Fatalf("winner %s %v; want the stopped t-2 at 0.8", w.Design.ID, w.Fitness)
	}
}

// A pool ranked by domination takes no stopped design: it has no
// measured objectives.
func TestFoldSelectRankedPool(t *testing.T) {
	t.Parallel()
	o, err := ObjectivesOf(&schema.Run{Objectives: []string{"fitness:max", "loss:min"}})
	if err != nil {
		t.Fatal(err)
	}
	f := NewFoldFor(NewTally("t", 1<<30, Rules{}), 1, 4, ReplaceWorst, o, nil)
	f.SetSelect(asha(schema.SelectReached))
	r := stoppedAt(1, 0.9)
	r.Metrics["loss"] = 0.1
	f.Apply(r, nil)
	if f.Pool().Len() != 0 || f.Added() {
		t.Fatalf("a ranked pool took a stopped design: %d members", f.Pool().Len())
	}
}

func memberIDs(p *Pool) string {
	s := ""
	for i, m := range p.Members() {
		if i > 0 {
			s += " "
		}
		s += m.Design.ID
	}
	return s
}

// With SelectPromoted a design stopped at the first rung stays out of the
// pool, and one stopped at or past the second joins it, whichever way its
// result's stopped_at was decoded.
func TestFoldSelectPromoted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		at   any
		in   bool
	}{
		{"first rung", int64(1), false},
		{"between the first two", int64(2), false},
		{"second rung", int64(3), true},
		{"third rung", uint64(9), true},
		{"third rung as JSON", json.Number("9"), true},
		{"third rung as a float", 9.0, true},
		{"no step", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := testFold(1, 2, ReplaceWorst)
			f.SetSelect(asha(schema.SelectPromoted))
			f.Apply(result(1, schema.StatusOK, 0.5), nil)
			r := stoppedAt(2, 0.7)
			r.Metrics["stopped_at"] = tc.at
			if tc.at == nil {
				delete(r.Metrics, "stopped_at")
			}
			f.Apply(r, nil)
			if f.Added() != tc.in || (f.Pool().Len() == 2) != tc.in {
				t.Fatalf("stopped at %v: added %v, pool %q; want in the pool: %v", tc.at, f.Added(), memberIDs(f.Pool()), tc.in)
			}
		})
	}
}

// With a cost tie, of two members about as fit the cheaper wins a
// tournament; a clear difference in fitness, or a member of unknown cost,
// is compared by fitness alone.
func TestTournamentCostTie(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		tie        float64
		fit, cost  [2]float64
		wantWinner int
	}{
		{"off", 0, [2]float64{0.80, 0.79}, [2]float64{10, 1}, 0},
		{"within the tie, the cheaper", 0.02, [2]float64{0.80, 0.79}, [2]float64{10, 1}, 1},
		{"within the tie, the fitter is cheaper", 0.02, [2]float64{0.80, 0.79}, [2]float64{1, 10}, 0},
		{"beyond the tie", 0.005, [2]float64{0.80, 0.79}, [2]float64{10, 1}, 0},
		{"unknown cost", 0.02, [2]float64{0.80, 0.79}, [2]float64{10, 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := NewPool(2, ReplaceWorst)
			p.SetCostTie(tc.tie)
			for i := range 2 {
				p.Add(Member{Design: schema.Design{ID: []string{"a", "b"}[i]}, Fitness: tc.fit[i], Cost: tc.cost[i]})
			}
			// Both members enter every tournament of 2, in either order.
			for seed := range uint64(8) {
				w := p.Tournament(rand.New(rand.NewPCG(seed, 1)), 2)
				if want := []string{"a", "b"}[tc.wantWinner]; w.Design.ID != want {
					t.Fatalf("seed %d: winner %s, want %s", seed, w.Design.ID, want)
				}
			}
		})
	}
}

// A member's cost is its evaluation's slot-seconds, resumed training
// included; a stopped design's is what its training would have cost to
// its end at the rate it trained, and unknown when its end is.
func TestFoldMemberCost(t *testing.T) {
	t.Parallel()
	bounded := asha(schema.SelectReached)
	bounded.MaxStep = 30
	gene := asha(schema.SelectReached)
	gene.MaxStepGene = "epochs"
	for _, tc := range []struct {
		name    string
		rule    *schema.EarlyStop
		genome  map[string]any
		stopped float64
	}{
		// 1 s to step 3 of 30: 10 s to its end.
		{"max step", bounded, nil, 10},
		// Its own end, 12 epochs, before the rule's.
		{"its gene", gene, map[string]any{"epochs": int64(12)}, 4},
		{"no end known", asha(schema.SelectReached), nil, 0},
		{"gene missing, no max step", gene, map[string]any{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := testFold(1, 3, ReplaceWorst)
			f.SetSelect(tc.rule)
			ok := result(1, schema.StatusOK, 0.5)
			ok.ResumedSeconds = 2
			f.Apply(ok, nil)
			st := stoppedAt(2, 0.4)
			if tc.genome != nil {
				st.Design.Genome = tc.genome
			}
			f.Apply(st, nil)
			m := f.Pool().Members()
			if len(m) != 2 || m[0].Cost != 3 || m[1].Cost != tc.stopped {
				t.Fatalf("members %+v; want costs 3 (1 s evaluated, 2 resumed) and %g (stopped at 3)", m, tc.stopped)
			}
		})
	}
}
