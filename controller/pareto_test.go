package controller

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/schema"
)

func objectives(t *testing.T, objs string, cons ...string) Objectives {
	t.Helper()
	o, err := pareto.ParseObjectives(objs)
	if err != nil {
		t.Fatal(err)
	}
	out := Objectives{Objs: o}
	for _, c := range cons {
		con, err := pareto.ParseConstraint(c)
		if err != nil {
			t.Fatal(err)
		}
		out.Cons = append(out.Cons, con)
	}
	return out
}

// withMetrics is result seq, ok, with metrics.
func withMetrics(seq uint64, fitness float64, metrics map[string]any) *schema.Result {
	r := result(seq, schema.StatusOK, fitness)
	r.Metrics = metrics
	return r
}

// zdtResults are n results of random points of ZDT1, the same for a seed.
func zdtResults(n int, seed uint64) []*schema.Result {
	r := rand.New(rand.NewPCG(seed, 0))
	var out []*schema.Result
	for i := range n {
		x := make([]float64, pareto.ZDTVars)
		for j := range x {
			x[j] = r.Float64() * math.Pow(r.Float64(), 3) // some near the front
		}
		f := pareto.ZDT1(x)
		out = append(out, withMetrics(uint64(i+1), -(f[0]+f[1]), map[string]any{"f1": f[0], "f2": f[1]}))
	}
	return out
}

func TestParetoFold(t *testing.T) {
	t.Parallel()
	o := objectives(t, "f1:min,f2:min")
	results := zdtResults(400, 1)
	fold := func() *runstate.Fold {
		f := runstate.NewFoldFor(runstate.NewTally("t", 1<<30, runstate.Rules{}), 20, 30, runstate.ReplaceWorst, o, nil)
		for _, r := range results {
			if v := f.Apply(r, nil); v != runstate.Counted {
				t.Fatalf("result %d: %v", r.Design.Seq, v)
			}
		}
		return f
	}
	f := fold()
	p := f.Pool()
	if !p.Ranked() || p.Len() != 30 {
		t.Fatalf("ranked %t, %d members; want a ranked pool of 30", p.Ranked(), p.Len())
	}
	// The front is exactly the members no other member dominates.
	members := p.Members()
	front := map[string]bool{}
	for _, m := range p.Front() {
		front[m.Design.ID] = true
	}
	for _, m := range members {
		dominated := false
		for _, q := range members {
			dominated = dominated || pareto.Dominates(q.Point, m.Point)
		}
		if front[m.Design.ID] == dominated {
			t.Errorf("%s: on the front %t, dominated %t", m.Design.ID, front[m.Design.ID], dominated)
		}
	}
	// No point of the whole stream dominates the front more than what the
	// pool has lost to crowding: every front member is non-dominated by
	// the pool, and the best f1 and best f2 of the stream are kept (the
	// extremes' crowding distance is infinite).
	best := [2]float64{math.Inf(1), math.Inf(1)}
	for _, r := range results {
		best[0], best[1] = min(best[0], r.Metrics["f1"].(float64)), min(best[1], r.Metrics["f2"].(float64))
	}
	var got [2]float64 = [2]float64{math.Inf(1), math.Inf(1)}
	for _, m := range p.Front() {
		got[0], got[1] = min(got[0], m.Point.Obj[0]), min(got[1], m.Point.Obj[1])
	}
	if got != best {
		t.Errorf("front's best objectives %v; the stream's are %v", got, best)
	}
	// The same results give the same pool and front.
	g := fold()
	if g.Pool().Digest() != p.Digest() || g.Pool().FrontDigest() != p.FrontDigest() {
		t.Errorf("replay: digests %s/%s, want %s/%s", g.Pool().Digest(), g.Pool().FrontDigest(), p.Digest(), p.FrontDigest())
	}
	// The hypervolume's reference point is the first 20 results' worst,
	// widened by a tenth of their range.
	hv, ref, ok := f.Hypervolume()
	if !ok {
		t.Fatal("no hypervolume after 400 results")
	}
	for m := range 2 {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range results[:20] {
			v := r.Metrics["f"+string(rune('1'+m))].(float64)
			lo, hi = min(lo, v), max(hi, v)
		}
		if want := hi + runstate.HVMargin*(hi-lo); ref[m] != want {
			t.Errorf("reference point %v; objective %d wants %v", ref, m, want)
		}
	}
	var pts []pareto.Point
	for _, m := range p.Front() {
		pts = append(pts, m.Point)
	}
	if want := pareto.Hypervolume(pts, ref); hv != want || hv <= 0 {
		t.Errorf("hypervolume %v, want %v (> 0)", hv, want)
	}
	sum := runstate.ParetoOf(f, "zdt1")
	if len(sum.Front) != len(p.Front()) || sum.FrontDigest != p.FrontDigest() || *sum.Hypervolume != hv {
		t.Errorf("summary: %d on the front, digest %s, hypervolume %v", len(sum.Front), sum.FrontDigest, *sum.Hypervolume)
	}
	if sum.HypervolumeRatio != nil {
		t.Errorf("ratio %v for a reference point below the true front's", *sum.HypervolumeRatio)
	}
	if fm := sum.Front[0]; fm.Objectives["f1"] != p.Front()[0].Point.Obj[0] || fm.Objectives["f2"] != p.Front()[0].Point.Obj[1] {
		t.Errorf("front member's objectives %v, want its point %v", fm.Objectives, p.Front()[0].Point)
	}
}

// A given reference point is used as it is, in the objectives' own units:
// a maximized objective's is a lower bound; the ratio to a known front
// comes with it.
func TestParetoReference(t *testing.T) {
	t.Parallel()
	f := runstate.NewFoldFor(runstate.NewTally("t", 1<<30, runstate.Rules{}), 5, 10, runstate.ReplaceWorst, objectives(t, "fitness:max,params:min"), []float64{0, 100})
	if _, _, ok := f.Hypervolume(); !ok {
		t.Fatal("no hypervolume with a given reference point")
	}
	f.Apply(withMetrics(1, 0.5, map[string]any{"params": 50}), nil)
	f.Apply(withMetrics(2, 0.8, map[string]any{"params": 80.0}), nil)
	hv, ref, _ := f.Hypervolume()
	// (0.5 × 50) + (0.8 - 0.5) × 20 = 25 + 6
	if !reflect.DeepEqual(ref, []float64{0, 100}) || math.Abs(hv-31) > 1e-9 {
		t.Errorf("hypervolume %v from %v; want 31 from [0 100]", hv, ref)
	}
	z := runstate.NewFoldFor(runstate.NewTally("t", 1<<30, runstate.Rules{}), 5, 100, runstate.ReplaceWorst, objectives(t, "f1:min,f2:min"), []float64{1.1, 1.1})
	for _, r := range zdtResults(50, 2) {
		z.Apply(r, nil)
	}
	hv, _, _ = z.Hypervolume()
	if s := runstate.ParetoOf(z, "zdt1"); s.HypervolumeRatio == nil || math.Abs(*s.HypervolumeRatio-hv/pareto.TrueHypervolume("zdt1", 1.1)) > 1e-6 {
		t.Errorf("ratio %v; want hypervolume %v over the true front's %v", s.HypervolumeRatio, hv, pareto.TrueHypervolume("zdt1", 1.1))
	}
}

// Constraint domination: a feasible design ranks before any infeasible
// one, and of two infeasible ones the smaller violation first.
func TestParetoConstraint(t *testing.T) {
	t.Parallel()
	f := runstate.NewFoldFor(runstate.NewTally("t", 1<<30, runstate.Rules{}), 1, 2, runstate.ReplaceWorst, objectives(t, "fitness:max", "params<=100"), nil)
	f.Apply(withMetrics(1, 0.99, map[string]any{"params": 500}), nil) // infeasible, best fitness
	f.Apply(withMetrics(2, 0.98, map[string]any{"params": 150}), nil) // infeasible, smaller violation
	if ev := f.Evicted(); ev != "" {
		t.Fatalf("evicted %s while the pool fills", ev)
	}
	f.Apply(withMetrics(3, 0.10, map[string]any{"params": 100}), nil) // feasible, worst fitness
	if ev := f.Evicted(); ev != schema.DesignID("t", 1) {
		t.Errorf("evicted %q; want the larger violation, t-1", ev)
	}
	f.Apply(withMetrics(4, 0.20, map[string]any{"params": 10}), nil)
	if ev := f.Evicted(); ev != schema.DesignID("t", 2) {
		t.Errorf("evicted %q; want the infeasible t-2 before any feasible design", ev)
	}
	front := f.Pool().Front()
	if len(front) != 1 || front[0].Design.ID != schema.DesignID("t", 4) {
		t.Errorf("front %v; want t-4 alone", front)
	}
	// The tournament over the whole pool picks the front.
	if w := f.Pool().Tournament(rand.New(rand.NewPCG(1, 1)), 2); w.Design.ID != schema.DesignID("t", 4) {
		t.Errorf("tournament of the whole pool won by %s; want t-4", w.Design.ID)
	}
}

// An ok result without an objective counts, but stays out of the pool: a
// worker that checks the objectives makes it an error result first.
func TestParetoUnmeasured(t *testing.T) {
	t.Parallel()
	f := runstate.NewFoldFor(runstate.NewTally("t", 1<<30, runstate.Rules{}), 1, 5, runstate.ReplaceWorst, objectives(t, "fitness:max,params:min"), nil)
	if v := f.Apply(withMetrics(1, 0.5, map[string]any{"other": 1}), nil); v != runstate.Counted {
		t.Fatalf("verdict %v", v)
	}
	if f.Terminal() != 1 || f.Pool().Len() != 0 || f.Unmeasured() != 1 {
		t.Errorf("terminal %d, pool %d, unmeasured %d; want 1, 0, 1", f.Terminal(), f.Pool().Len(), f.Unmeasured())
	}
}

// Variation: with both operators at 0 a child is what Space.Mutate makes
// of one tournament winner, with the same draws as before operators were
// kept; with crossover every child has two parents, and the randomness is
// the seed's alone.
func TestVary(t *testing.T) {
	t.Parallel()
	sp := mlpSpace(t)
	f := testFold(10, 10, runstate.ReplaceWorst)
	for i := range 10 {
		r := result(uint64(i+1), schema.StatusOK, float64(i))
		r.Design.Genome = sp.Random(rand.New(rand.NewPCG(9, uint64(i))))
		f.Apply(r, nil)
	}
	ctl := func(cx, mr float64) *Controller {
		return &Controller{cfg: Config{Run: "t", Space: sp, Crossover: new(cx), MutationRate: new(mr)}.withDefaults(), fold: f}
	}
	legacy := ctl(0, 0)
	for seq := range uint64(20) {
		r := rand.New(rand.NewPCG(3, seq))
		g, parents, err := legacy.vary(r)
		if err != nil {
			t.Fatal(err)
		}
		r2 := rand.New(rand.NewPCG(3, seq))
		parent := f.Pool().Tournament(r2, legacy.cfg.Tournament)
		want, _ := sp.Mutate(parent.Design.Genome, r2)
		if !reflect.DeepEqual(g, want) || !reflect.DeepEqual(parents, []string{parent.Design.ID}) {
			t.Fatalf("seq %d: %v of %v; want %v of %s", seq, g, parents, want, parent.Design.ID)
		}
	}
	cross := ctl(1, 0.2)
	two := 0
	for seq := range uint64(50) {
		g, parents, err := cross.vary(rand.New(rand.NewPCG(3, seq)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Validate(g); err != nil {
			t.Fatalf("child does not fit the space: %v", err)
		}
		if len(parents) == 2 {
			two++
		}
		again, parents2, _ := cross.vary(rand.New(rand.NewPCG(3, seq)))
		if !reflect.DeepEqual(g, again) || !reflect.DeepEqual(parents, parents2) {
			t.Fatalf("seq %d: the same draws made another child", seq)
		}
	}
	// Two tournaments of 3 among 10 pick the same winner now and then.
	if two < 25 {
		t.Errorf("%d of 50 children of crossover have two parents", two)
	}
}

func TestParetoConfig(t *testing.T) {
	t.Parallel()
	base := Config{Run: "t", Space: mlpSpace(t), Objectives: objectives(t, "fitness:max,params:min")}
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"valid", func(*Config) {}, ""},
		{"oldest with two objectives", func(c *Config) { c.Replace = runstate.ReplaceOldest }, "Replace"},
		{"oldest with fitness alone", func(c *Config) { c.Replace, c.Objectives = runstate.ReplaceOldest, Objectives{} }, ""},
		{"a reference point short", func(c *Config) { c.HVRef = []float64{1} }, "HVRef"},
		{"a reference point not finite", func(c *Config) { c.HVRef = []float64{1, math.Inf(1)} }, "HVRef"},
		{"crossover above 1", func(c *Config) { c.Crossover = new(1.5) }, "Crossover"},
		{"mutation rate below 0", func(c *Config) { c.MutationRate = new(-0.1) }, "MutationRate"},
		{"an objective twice", func(c *Config) { c.Objectives.Objs = append(c.Objectives.Objs, c.Objectives.Objs[0]) }, "Objectives"},
	}
	for _, tt := range tests {
		cfg := base
		tt.edit(&cfg)
		err := cfg.Validate()
		var fe *schema.FieldError
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field):
			t.Errorf("%s: %v; want an error on %s", tt.name, err, tt.field)
		}
	}
}
