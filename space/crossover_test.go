package space_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

const crossYAML = `
name: cross
params:
  lr: {type: float, min: 0.0001, max: 1.0, log: true}
  dropout: {type: float, min: 0.0, max: 0.5}
  width: {type: int, min: 8, max: 512, log: true}
  act: {type: choice, values: [relu, tanh, gelu]}
  layers:
    type: list
    min: 1
    max: 4
    item:
      units: {type: int, min: 4, max: 256}
      drop: {type: float, min: 0.0, max: 0.9}
`

// Every child of two genomes of the space fits the space, takes one
// parent's list length, and the same seed gives the same child.
func TestCrossoverFits(t *testing.T) {
	t.Parallel()
	s := mustParse(t, crossYAML)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		a, b := s.Random(r), s.Random(r)
		seed := uint64(i)
		c, err := s.Crossover(a, b, rand.New(rand.NewPCG(seed, 9)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Validate(c); err != nil {
			t.Fatalf("child of %v and %v does not fit: %v", a, b, err)
		}
		n, na, nb := len(c["layers"].([]any)), len(a["layers"].([]any)), len(b["layers"].([]any))
		if n != na && n != nb {
			t.Fatalf("child has %d layers, its parents %d and %d", n, na, nb)
		}
		for _, k := range []string{"width", "act"} {
			if !reflect.DeepEqual(c[k], a[k]) && !reflect.DeepEqual(c[k], b[k]) {
				t.Fatalf("child's %s %v is neither parent's (%v, %v)", k, c[k], a[k], b[k])
			}
		}
		again, _ := s.Crossover(a, b, rand.New(rand.NewPCG(seed, 9)))
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("the same seed gave two children: %v and %v", c, again)
		}
	}
	if _, err := s.Crossover(map[string]any{"lr": 7.0}, s.Random(r), r); err == nil {
		t.Error("a parent outside the space was accepted")
	}
}

// Simulated binary crossover puts children near their parents, on either
// side of each (half of them between the parents, by its spread factor's
// law), centred on the parents' mean; equal parents give themselves.
func TestCrossoverSBX(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "name: f\nparams:\n  x: {type: float, min: 0.0, max: 1.0}\n")
	r := rand.New(rand.NewPCG(3, 4))
	sum, inside, near := 0.0, 0, 0
	const n = 20000
	for range n {
		c, err := s.Crossover(map[string]any{"x": 0.2}, map[string]any{"x": 0.8}, r)
		if err != nil {
			t.Fatal(err)
		}
		x := c["x"].(float64)
		sum += x
		if x >= 0.2 && x <= 0.8 {
			inside++
		}
		if math.Min(math.Abs(x-0.2), math.Abs(x-0.8)) < 0.1 {
			near++
		}
	}
	if mean := sum / n; math.Abs(mean-0.5) > 0.01 {
		t.Errorf("mean child %.4f, want 0.5", mean)
	}
	if share := float64(inside) / n; math.Abs(share-0.5) > 0.02 {
		t.Errorf("%.3f of the children lie between their parents; want half", share)
	}
	if share := float64(near) / n; share < 0.8 {
		t.Errorf("%.3f of the children lie within 0.1 of a parent; want most (eta %d)", share, 15)
	}
	c, _ := s.Crossover(map[string]any{"x": 0.3}, map[string]any{"x": 0.3}, r)
	if c["x"] != 0.3 {
		t.Errorf("equal parents 0.3 gave %v", c["x"])
	}
}

// MutateEach changes about rate of the parameters, never none, and its
// children fit the space.
func TestMutateEach(t *testing.T) {
	t.Parallel()
	s := mustParse(t, crossYAML)
	r := rand.New(rand.NewPCG(5, 6))
	for _, rate := range []float64{0, 0.2, 1} {
		changed := 0
		const n = 3000
		for range n {
			a := s.Random(r)
			c, err := s.MutateEach(a, rate, r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Validate(c); err != nil {
				t.Fatalf("child %v does not fit: %v", c, err)
			}
			d := 0
			for k := range a {
				if !reflect.DeepEqual(a[k], c[k]) {
					d++
				}
			}
			if d == 0 {
				t.Fatalf("rate %v: a child equal to its parent %v", rate, a)
			}
			changed += d
		}
		// 5 parameters; at rate 0 exactly one changes, at rate 1 nearly all
		// (a mutation may land on the same value), at 0.2 about one.
		mean := float64(changed) / n
		want := map[float64][2]float64{0: {1, 1}, 0.2: {1, 1.6}, 1: {4.5, 5}}[rate]
		if mean < want[0] || mean > want[1] {
			t.Errorf("rate %v: %.2f parameters changed on average, want %v", rate, mean, want)
		}
	}
	if _, err := s.MutateEach(s.Random(r), 1.5, r); err == nil {
		t.Error("a rate of 1.5 was accepted")
	}
	if _, err := s.MutateEach(map[string]any{"lr": 7.0}, 0.5, r); err == nil {
		t.Error("a parent outside the space was accepted")
	}
}

// The operators on canonical genomes make the children their checking
// forms make from the same seed, and never change a parent: the
// controller keeps its parents' canonical copies and reuses them for
// every child.
func TestValidOperatorsMatchAndKeepParents(t *testing.T) {
	t.Parallel()
	s := mustParse(t, crossYAML)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 1000 {
		a, err := s.Validate(s.Random(r))
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Validate(s.Random(r))
		if err != nil {
			t.Fatal(err)
		}
		keepA, keepB := deepCopy(a), deepCopy(b)
		seed := uint64(i)
		rng := func() *rand.Rand { return rand.New(rand.NewPCG(seed, 5)) }

		want, _ := s.Crossover(a, b, rng())
		if got := s.CrossoverValid(a, b, rng()); !reflect.DeepEqual(got, want) {
			t.Fatalf("CrossoverValid gave %v, Crossover %v", got, want)
		}
		want, _ = s.Mutate(a, rng())
		if got := s.MutateValid(a, rng()); !reflect.DeepEqual(got, want) {
			t.Fatalf("MutateValid gave %v, Mutate %v", got, want)
		}
		want, _ = s.MutateEach(a, 0.3, rng())
		if got := s.MutateEachValid(a, 0.3, rng()); !reflect.DeepEqual(got, want) {
			t.Fatalf("MutateEachValid gave %v, MutateEach %v", got, want)
		}
		if !reflect.DeepEqual(a, keepA) || !reflect.DeepEqual(b, keepB) {
			t.Fatalf("an operator changed a parent: %v became %v, %v became %v", keepA, a, keepB, b)
		}
	}
}

func deepCopy(g map[string]any) map[string]any {
	out := make(map[string]any, len(g))
	for k, v := range g {
		switch x := v.(type) {
		case map[string]any:
			out[k] = deepCopy(x)
		case []any:
			items := make([]any, len(x))
			for i, e := range x {
				if m, ok := e.(map[string]any); ok {
					items[i] = deepCopy(m)
				} else {
					items[i] = e
				}
			}
			out[k] = items
		default:
			out[k] = v
		}
	}
	return out
}
