package space

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
)

// SBXEta is the distribution index of the simulated binary crossover of
// float parameters: the larger, the closer a child stays to its parents
// (Deb and Agrawal 1995; 15 to 20 is usual in NSGA-II).
const SBXEta = 15

// Crossover recombines two genomes of the space into a child: each int
// or choice parameter is taken from either parent with equal chance,
// each float by simulated binary crossover (on the log scale for a log
// parameter), each list item by item: the child takes the length of one
// parent, each index both parents have is the recombination of their
// items there, and each index only the longer has is that parent's item.
// Both parents must fit the space; the child does. Its randomness comes
// from r alone, so a seeded r gives the same child.
func (s *Space) Crossover(a, b map[string]any, r *rand.Rand) (map[string]any, error) {
	pa, err := s.Validate(a)
	if err != nil {
		return nil, err
	}
	pb, err := s.Validate(b)
	if err != nil {
		return nil, err
	}
	return s.CrossoverValid(pa, pb, r), nil
}

// CrossoverValid is Crossover of two canonical genomes: each returned by
// Validate or by one of the space's operators, and unchanged since. It
// checks nothing, so a caller that keeps its parents' canonical copies
// (the controller's pool) validates each parent once, not once per child.
// The child shares the values it does not change with its parents, as
// every operator's child does; none of them is ever changed in place.
func (s *Space) CrossoverValid(a, b map[string]any, r *rand.Rand) map[string]any {
	return s.root.cross(a, b, r)
}

func (g *group) cross(a, b map[string]any, r *rand.Rand) map[string]any {
	out := make(map[string]any, len(g.fields))
	for _, f := range g.fields {
		out[f.name] = crossParam(f.p, a[f.name], b[f.name], r)
	}
	return out
}

// crossParam recombines two canonical values of p.
func crossParam(p param, a, b any, r *rand.Rand) any {
	switch p := p.(type) {
	case *floatParam:
		return p.sbx(a.(float64), b.(float64), r)
	case *listParam:
		return p.cross(a.([]any), b.([]any), r)
	}
	// int, choice and anything else with no order to blend: one parent's
	// value, as uniform crossover takes it.
	if r.IntN(2) == 0 {
		return a
	}
	return b
}

// sbx is one child of the simulated binary crossover of x and y, within
// the bounds (the bounded form is left to clamping: the spread factor's
// tail past a bound lands on it).
func (p *floatParam) sbx(x, y float64, r *rand.Rand) float64 {
	if p.log {
		x, y = math.Log(x), math.Log(y)
	}
	u := r.Float64()
	beta := math.Pow(2*u, 1.0/(SBXEta+1))
	if u > 0.5 {
		beta = math.Pow(1/(2*(1-u)), 1.0/(SBXEta+1))
	}
	c := 0.5 * ((1+beta)*x + (1-beta)*y)
	if r.IntN(2) == 0 {
		c = 0.5 * ((1-beta)*x + (1+beta)*y)
	}
	if p.log {
		return p.fromLog(c)
	}
	return clampF(c, p.min, p.max)
}

func (p *listParam) cross(a, b []any, r *rand.Rand) []any {
	if r.IntN(2) == 1 {
		a, b = b, a
	}
	// a gives the length; b's items recombine with a's where both have one.
	out := make([]any, len(a))
	for i := range a {
		if i < len(b) {
			out[i] = p.item.cross(a[i].(map[string]any), b[i].(map[string]any), r)
		} else {
			out[i] = a[i]
		}
	}
	return out
}

// MutateEach alters each mutable parameter of g with probability rate (a
// list as a whole: one of its edits), and at least one, so that the child
// differs from its parent where the space allows: with rate 0 it is
// Mutate. rate must lie in [0, 1].
func (s *Space) MutateEach(g map[string]any, rate float64, r *rand.Rand) (map[string]any, error) {
	if !(rate >= 0 && rate <= 1) {
		return nil, fmt.Errorf("mutation rate %v: want 0 to 1", rate)
	}
	parent, err := s.Validate(g)
	if err != nil {
		return nil, err
	}
	return s.MutateEachValid(parent, rate, r), nil
}

// MutateEachValid is MutateEach of a canonical genome (see CrossoverValid)
// at a rate already known to lie in [0, 1].
func (s *Space) MutateEachValid(parent map[string]any, rate float64, r *rand.Rand) map[string]any {
	if !s.root.mutable() {
		return parent
	}
	child := maps.Clone(parent)
	changed := false
	for _, i := range s.root.movable {
		f := s.root.fields[i]
		if r.Float64() < rate {
			v := f.p.mutate(parent[f.name], r)
			changed = changed || !reflect.DeepEqual(v, parent[f.name])
			child[f.name] = v
		}
	}
	if changed {
		return child
	}
	return s.MutateValid(child, r)
}
