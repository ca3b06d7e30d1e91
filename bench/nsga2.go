package bench

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/evoq/evoq/pareto"
)

// The NSGA-II defaults: Deb et al. (2002) and Deb's reference code.
const (
	NSGA2PopDefault       = 100
	NSGA2CrossoverDefault = 0.9
	NSGA2CrossEtaDefault  = 15
	NSGA2MutEtaDefault    = 20
)

// NSGA2Settings configures NSGA2, the textbook generational NSGA-II that
// evoq's asynchronous search is compared with at the same number of
// evaluations. A zero field takes its default.
type NSGA2Settings struct {
	// Pop is the population, and the offspring made each generation.
	// Defaults to NSGA2PopDefault; below 2 it counts as 2, the fewest a
	// tournament can choose from.
	Pop int
	// Vars is the number of variables, each in [0, 1]. Defaults to
	// pareto.ZDTVars.
	Vars int
	// Evaluations is the budget of evaluations of the problem, the
	// initial population's included. Zero evaluates nothing.
	Evaluations int
	// Crossover is the probability that a pair of parents is recombined
	// rather than copied. Defaults to NSGA2CrossoverDefault.
	Crossover float64
	// CrossEta is the distribution index of the simulated binary
	// crossover. Defaults to NSGA2CrossEtaDefault.
	CrossEta float64
	// MutEta is the distribution index of the polynomial mutation.
	// Defaults to NSGA2MutEtaDefault.
	MutEta float64
	// MutRate is each variable's probability of mutation. Defaults to
	// 1/Vars.
	MutRate float64
	// Seed seeds the one random source, so that a seed gives the same
	// run.
	Seed uint64
}

func (s NSGA2Settings) withDefaults() NSGA2Settings {
	if s.Pop == 0 {
		s.Pop = NSGA2PopDefault
	}
	s.Pop = max(s.Pop, 2)
	if s.Vars == 0 {
		s.Vars = pareto.ZDTVars
	}
	if s.Crossover == 0 {
		s.Crossover = NSGA2CrossoverDefault
	}
	if s.CrossEta == 0 {
		s.CrossEta = NSGA2CrossEtaDefault
	}
	if s.MutEta == 0 {
		s.MutEta = NSGA2MutEtaDefault
	}
	if s.MutRate == 0 {
		s.MutRate = 1 / float64(s.Vars)
	}
	return s
}

// NSGA2Point is the hypervolume of NSGA2's first front after a number of
// evaluations.
type NSGA2Point struct {
	Evaluations int     `json:"evaluations"`
	Hypervolume float64 `json:"hypervolume"`
}

// nsga2PCGStream is the second word of the PCG state; the seed is the
// first.
const nsga2PCGStream = 0x6e736761322d3032 // "nsga2-02"

// NSGA2 runs the textbook NSGA-II (Deb, Pratap, Agarwal and Meyarivan
// 2002) on the two objectives f, minimized, of Vars variables in [0, 1],
// and returns the hypervolume up to ref of the population's first front
// after the initial population and after each generation, with the
// evaluations so far.
//
// A generation picks parents by binary tournament on the crowded
// comparison (lower rank, then larger crowding distance, then a coin),
// makes Pop offspring by simulated binary crossover and polynomial
// mutation in Deb's bounded forms, and keeps the best Pop of parents and
// offspring together: whole fronts in rank order, the last one that fits
// only in part cut to its least crowded points. Each individual enters two
// tournaments per generation, as in Deb's code.
//
// It spends exactly s.Evaluations: when fewer than Pop evaluations are
// left, the last generation makes only that many offspring, and survival
// still keeps Pop, so that NSGA-II and evoq are compared at the same
// count. All randomness comes from one PCG seeded with s.Seed.
func NSGA2(s NSGA2Settings, f func(x []float64) [2]float64, ref [2]float64) []NSGA2Point {
	s = s.withDefaults()
	g := &nsga2{s: s, f: f, r: rand.New(rand.NewPCG(s.Seed, nsga2PCGStream))}
	g.initial()
	var out []NSGA2Point
	for {
		// The whole population's hypervolume is its first front's: a
		// dominated point adds nothing.
		out = append(out, NSGA2Point{Evaluations: g.evals, Hypervolume: pareto.Hypervolume2D(g.points, ref)})
		if g.evals >= s.Evaluations {
			return out
		}
		g.generation()
	}
}

// nsga2 is one run's state: the population's variables and points, its
// ranks and crowding distances as survival left them, and the
// evaluations spent.
type nsga2 struct {
	s        NSGA2Settings
	f        func([]float64) [2]float64
	r        *rand.Rand
	xs       [][]float64
	points   []pareto.Point
	ranks    []int
	crowding []float64
	evals    int
	order    []int // the tournament entrants not yet drawn this round
}

// evaluate scores x and counts it against the budget.
func (g *nsga2) evaluate(x []float64) pareto.Point {
	g.evals++
	o := g.f(x)
	return pareto.Point{Obj: []float64{o[0], o[1]}}
}

// initial draws and evaluates the random initial population, as much of
// it as the budget allows.
func (g *nsga2) initial() {
	for range min(g.s.Pop, g.s.Evaluations) {
		x := make([]float64, g.s.Vars)
		for i := range x {
			x[i] = g.r.Float64()
		}
		g.xs = append(g.xs, x)
		g.points = append(g.points, g.evaluate(x))
	}
	g.ranks = pareto.Ranks(g.points)
	g.crowding = pareto.Crowding(g.points, g.ranks)
}

// generation makes and evaluates the offspring, as many as Pop or the
// budget left allows, and keeps the best Pop of parents and offspring.
func (g *nsga2) generation() {
	n := min(g.s.Pop, g.s.Evaluations-g.evals)
	var kids [][]float64
	for len(kids) < n {
		a, b := g.sbx(g.xs[g.tournament()], g.xs[g.tournament()])
		kids = append(kids, a, b)
	}
	kids = kids[:n] // an odd count drops the last pair's second child
	xs, points := g.xs, g.points
	for _, x := range kids {
		g.mutate(x)
		xs = append(xs, x)
		points = append(points, g.evaluate(x))
	}
	g.survive(xs, points)
}

// tournament draws two entrants and returns the better by the crowded
// comparison, a coin deciding a tie. Entrants come from a shuffled
// permutation of the population, drawn two at a time and shuffled anew
// when spent, so that each individual enters two tournaments for every
// Pop offspring (Deb's two permutations).
func (g *nsga2) tournament() int {
	i, j := g.draw(), g.draw()
	switch {
	case pareto.Better(g.ranks, g.crowding, i, j):
		return i
	case pareto.Better(g.ranks, g.crowding, j, i):
		return j
	case g.r.Float64() <= 0.5:
		return i
	}
	return j
}

func (g *nsga2) draw() int {
	if len(g.order) == 0 {
		g.order = g.r.Perm(len(g.xs))
	}
	i := g.order[0]
	g.order = g.order[1:]
	return i
}

// survive keeps the best Pop of xs and points: whole fronts in rank
// order, then the least crowded of the front that fits only in part (ties
// kept in order). The ranks and crowding distances of the merged set stay
// with the survivors for the next tournaments, as in Deb's code: a
// survivor's rank is the same among the survivors, since every front
// before its own survives whole.
func (g *nsga2) survive(xs [][]float64, points []pareto.Point) {
	ranks := pareto.Ranks(points)
	crowding := pareto.Crowding(points, ranks)
	idx := make([]int, len(points))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := cmp.Compare(ranks[a], ranks[b]); c != 0 {
			return c
		}
		return cmp.Compare(crowding[b], crowding[a])
	})
	idx = idx[:min(g.s.Pop, len(idx))]
	g.xs, g.points = make([][]float64, len(idx)), make([]pareto.Point, len(idx))
	g.ranks, g.crowding = make([]int, len(idx)), make([]float64, len(idx))
	for k, i := range idx {
		g.xs[k], g.points[k], g.ranks[k], g.crowding[k] = xs[i], points[i], ranks[i], crowding[i]
	}
	g.order = nil // a new population starts a new permutation
}

// sbxEps is the least gap between two parents' variables that SBX
// spreads; closer variables are copied, as in Deb's code.
const sbxEps = 1e-14

// sbx is Deb's bounded simulated binary crossover of two parents in
// [0, 1]^Vars: with probability Crossover, each variable, with
// probability 0.5, is spread into two children by a factor drawn so that
// neither leaves the bounds, and the children swap it with probability
// 0.5; every other variable is copied.
func (g *nsga2) sbx(p1, p2 []float64) ([]float64, []float64) {
	c1, c2 := slices.Clone(p1), slices.Clone(p2)
	if g.r.Float64() > g.s.Crossover {
		return c1, c2
	}
	for i := range c1 {
		if g.r.Float64() > 0.5 || math.Abs(p1[i]-p2[i]) <= sbxEps {
			continue
		}
		y1, y2 := min(p1[i], p2[i]), max(p1[i], p2[i])
		u := g.r.Float64()
		lo := 0.5 * ((y1 + y2) - sbxBeta(u, 1+2*y1/(y2-y1), g.s.CrossEta)*(y2-y1))
		hi := 0.5 * ((y1 + y2) + sbxBeta(u, 1+2*(1-y2)/(y2-y1), g.s.CrossEta)*(y2-y1))
		lo, hi = clamp01(lo), clamp01(hi)
		if g.r.Float64() <= 0.5 {
			lo, hi = hi, lo
		}
		c1[i], c2[i] = lo, hi
	}
	return c1, c2
}

// sbxBeta is the spread factor for the uniform draw u when the bound lies
// beta times the parents' half gap away: the distribution of index eta,
// its tail beyond the bound folded back inside.
func sbxBeta(u, beta, eta float64) float64 {
	alpha := 2 - math.Pow(beta, -(eta+1))
	if u <= 1/alpha {
		return math.Pow(u*alpha, 1/(eta+1))
	}
	return math.Pow(1/(2-u*alpha), 1/(eta+1))
}

// mutate is Deb's bounded polynomial mutation of x in [0, 1]^Vars, in
// place: each variable with probability MutRate moves by a perturbation of
// index MutEta scaled so that it stays within the bounds.
func (g *nsga2) mutate(x []float64) {
	eta := g.s.MutEta
	for i, y := range x {
		if g.r.Float64() > g.s.MutRate {
			continue
		}
		u := g.r.Float64()
		var dq float64
		// Deb's delta1 and delta2, the distances to the bounds over the
		// range, are y and 1 - y here.
		if u <= 0.5 {
			v := 2*u + (1-2*u)*math.Pow(1-y, eta+1)
			dq = math.Pow(v, 1/(eta+1)) - 1
		} else {
			v := 2*(1-u) + 2*(u-0.5)*math.Pow(y, eta+1)
			dq = 1 - math.Pow(v, 1/(eta+1))
		}
		x[i] = clamp01(y + dq)
	}
}

func clamp01(v float64) float64 { return min(max(v, 0), 1) }
