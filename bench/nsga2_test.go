package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/evoq/evoq/pareto"
)

// NSGA-II on ZDT1 comes close to the true front in 200 generations, as
// the textbook's runs do.
func TestNSGA2ZDT1(t *testing.T) {
	t.Parallel()
	ref := [2]float64{1.1, 1.1}
	curve := NSGA2(NSGA2Settings{Pop: 100, Evaluations: 20000, Seed: 1}, pareto.ZDT1, ref)
	if len(curve) != 200 {
		t.Fatalf("%d points, want 200: the initial population and 199 generations", len(curve))
	}
	last := curve[len(curve)-1]
	ratio := last.Hypervolume / pareto.TrueHypervolume("zdt1", 1.1)
	if last.Evaluations != 20000 || ratio < 0.95 || ratio > 1 {
		t.Errorf("after %d evaluations the hypervolume ratio is %.4f, want 20000 and in [0.95, 1]", last.Evaluations, ratio)
	}
	for k, p := range curve {
		if p.Evaluations != 100*(k+1) {
			t.Fatalf("point %d after %d evaluations, want %d", k, p.Evaluations, 100*(k+1))
		}
	}
}

// A seed gives the same run; another seed gives another.
func TestNSGA2Deterministic(t *testing.T) {
	t.Parallel()
	s := NSGA2Settings{Pop: 40, Vars: 10, Evaluations: 2000, Seed: 7}
	ref := [2]float64{1.1, 1.1}
	a, b := NSGA2(s, pareto.ZDT2, ref), NSGA2(s, pareto.ZDT2, ref)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 ran twice gives two curves:\n%v\n%v", a, b)
	}
	s.Seed = 8
	if c := NSGA2(s, pareto.ZDT2, ref); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 give the same curve")
	}
}

// The problem is called exactly Evaluations times, a partial last
// generation included, and the curve counts every call.
func TestNSGA2Evaluations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		pop, evals int
		wantCounts []int
	}{
		{"whole generations", 10, 30, []int{10, 20, 30}},
		{"a partial last generation", 10, 35, []int{10, 20, 30, 35}},
		{"an odd partial generation", 10, 13, []int{10, 13}},
		{"an odd population", 7, 21, []int{7, 14, 21}},
		{"less than a population", 10, 4, []int{4}},
		{"nothing", 10, 0, []int{0}},
		{"the default population", 0, 250, []int{100, 200, 250}},
	} {
		calls := 0
		f := func(x []float64) [2]float64 {
			calls++
			if len(x) != 5 || slices.ContainsFunc(x, func(v float64) bool { return v < 0 || v > 1 || math.IsNaN(v) }) {
				t.Fatalf("%s: evaluated %v, want 5 variables in [0, 1]", tc.name, x)
			}
			return pareto.ZDT1(x)
		}
		curve := NSGA2(NSGA2Settings{Pop: tc.pop, Vars: 5, Evaluations: tc.evals, Seed: 1}, f, [2]float64{1.1, 1.1})
		var counts []int
		for _, p := range curve {
			counts = append(counts, p.Evaluations)
		}
		if calls != tc.evals || !slices.Equal(counts, tc.wantCounts) {
			t.Errorf("%s: %d calls, curve at %v; want %d calls, curve at %v", tc.name, calls, counts, tc.evals, tc.wantCounts)
		}
	}
}

// Deb's bounded operators keep every variable in [0, 1], even from
// parents on the bounds, and the mutation's index concentrates its steps:
// with index 20 nearly all of them are shorter than a quarter of the range.
// The bounded mutation scales its step to the room left, so that from 0.9
// it reaches 1 only in the limit; a step merely clamped would land on 1
// about one time in twenty.
func TestNSGA2Operators(t *testing.T) {
	t.Parallel()
	g := &nsga2{s: NSGA2Settings{Vars: 4, MutRate: 1}.withDefaults(), r: rand.New(rand.NewPCG(3, 4))}
	short := 0
	const trials = 20000
	for range trials {
		p1 := []float64{0, 1, g.r.Float64(), 0.9}
		p2 := []float64{1, 1, g.r.Float64(), 0.9}
		c1, c2 := g.sbx(p1, p2)
		x := slices.Clone(c1)
		g.mutate(x)
		for _, v := range slices.Concat(c1, c2, x) {
			if v < 0 || v > 1 || math.IsNaN(v) {
				t.Fatalf("parents %v, %v: children %v, %v, mutant %v out of [0, 1]", p1, p2, c1, c2, x)
			}
		}
		if c1[1] != 1 || c2[1] != 1 || c1[3] != 0.9 {
			t.Fatalf("equal parents' variables changed: %v, %v", c1, c2)
		}
		if x[3] == 1 {
			t.Fatalf("mutating 0.9 gave 1")
		}
		if math.Abs(x[2]-c1[2]) < 0.25 {
			short++
		}
	}
	if short < trials*95/100 {
		t.Errorf("%d of %d mutations shorter than 0.25, want 95%%", short, trials)
	}
}
