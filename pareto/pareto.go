// Package pareto ranks designs by several objectives under constraints:
// constraint domination (Deb), non-domination ranks, crowding distance, a
// bounded steady-state pool that keeps the best by rank then spread, and
// the two-objective hypervolume. Every function is pure and deterministic:
// the same points in the same order give the same ranks, the same pool
// and the same evictions, so a replay of the results rebuilds the front.
//
// Objectives are minimized; a caller maximizing one negates it.
package pareto

import (
	"cmp"
	"math"
	"slices"
)

// Point is one design's objectives, to minimize, and its total constraint
// violation: 0 when it meets every constraint, else the sum of how far it
// misses each.
type Point struct {
	Obj       []float64
	Violation float64
}

// Feasible reports whether p meets every constraint.
func (p Point) Feasible() bool { return p.Violation <= 0 }

// Dominates reports whether a constraint-dominates b (Deb 2000): a
// feasible point dominates an infeasible one; of two infeasible points the
// one with the smaller violation dominates; of two feasible points a
// dominates b when it is no worse in every objective and better in one.
func Dominates(a, b Point) bool {
	switch af, bf := a.Feasible(), b.Feasible(); {
	case af && !bf:
		return true
	case !af && !bf:
		return a.Violation < b.Violation
	case !af:
		return false
	}
	better := false
	for i := range a.Obj {
		switch {
		case a.Obj[i] > b.Obj[i]:
			return false
		case a.Obj[i] < b.Obj[i]:
			better = true
		}
	}
	return better
}

// Ranks returns each point's non-domination rank, 0 for the points no
// other point dominates (the front), 1 for those dominated only by rank-0
// points, and so on (the fast non-dominated sort of NSGA-II, O(m n²)).
func Ranks(ps []Point) []int {
	n := len(ps)
	ranks := make([]int, n)
	count := make([]int, n)       // how many points dominate i
	dominated := make([][]int, n) // the points i dominates
	var front []int
	for i := range ps {
		for j := i + 1; j < n; j++ {
			switch {
			case Dominates(ps[i], ps[j]):
				dominated[i] = append(dominated[i], j)
				count[j]++
			case Dominates(ps[j], ps[i]):
				dominated[j] = append(dominated[j], i)
				count[i]++
			}
		}
	}
	for i := range ps {
		if count[i] == 0 {
			front = append(front, i)
		}
	}
	for r := 0; len(front) > 0; r++ {
		var next []int
		for _, i := range front {
			ranks[i] = r
			for _, j := range dominated[i] {
				if count[j]--; count[j] == 0 {
					next = append(next, j)
				}
			}
		}
		front = next
	}
	return ranks
}

// Crowding returns each point's crowding distance within its rank: per
// objective, the gap between its neighbours normalized by the rank's
// range, summed; the extremes of each objective get +Inf, so that a rank's
// ends are kept. Infeasible points, ranked by violation alone, get 0.
func Crowding(ps []Point, ranks []int) []float64 {
	d := make([]float64, len(ps))
	byRank := map[int][]int{}
	for i, r := range ranks {
		if ps[i].Feasible() {
			byRank[r] = append(byRank[r], i)
		}
	}
	for _, idx := range byRank {
		crowd(ps, idx, d)
	}
	return d
}

// crowd adds the crowding distance of the points idx, one rank, to d.
func crowd(ps []Point, idx []int, d []float64) {
	if len(idx) == 0 {
		return
	}
	for m := range ps[idx[0]].Obj {
		s := slices.Clone(idx)
		// Ties broken by index, so the distances do not depend on the
		// sort's whims.
		slices.SortFunc(s, func(a, b int) int {
			if c := cmp.Compare(ps[a].Obj[m], ps[b].Obj[m]); c != 0 {
				return c
			}
			return a - b
		})
		lo, hi := ps[s[0]].Obj[m], ps[s[len(s)-1]].Obj[m]
		d[s[0]], d[s[len(s)-1]] = math.Inf(1), math.Inf(1)
		if hi == lo {
			continue
		}
		for k := 1; k < len(s)-1; k++ {
			d[s[k]] += (ps[s[k+1]].Obj[m] - ps[s[k-1]].Obj[m]) / (hi - lo)
		}
	}
}

// Better reports whether point i beats point j in a tournament: the lower
// rank, then the larger crowding distance, then, for infeasible points,
// the smaller violation (which their rank already says).
func Better(ranks []int, crowding []float64, i, j int) bool {
	if ranks[i] != ranks[j] {
		return ranks[i] < ranks[j]
	}
	return crowding[i] > crowding[j]
}

// Hypervolume2D is the area that the feasible points of ps dominate
// inside the box from each point up to ref (two objectives, minimized);
// points not below ref in both objectives add nothing.
func Hypervolume2D(ps []Point, ref [2]float64) float64 {
	var pts [][2]float64
	for _, p := range ps {
		if p.Feasible() && len(p.Obj) == 2 && p.Obj[0] < ref[0] && p.Obj[1] < ref[1] {
			pts = append(pts, [2]float64{p.Obj[0], p.Obj[1]})
		}
	}
	slices.SortFunc(pts, func(a, b [2]float64) int {
		if c := cmp.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return cmp.Compare(a[1], b[1])
	})
	// In increasing first objective, the points that lower the best
	// second objective so far are the front's staircase; each adds the
	// strip from it to the next step (or ref) and up to ref.
	var stairs [][2]float64
	for _, p := range pts {
		if len(stairs) == 0 || p[1] < stairs[len(stairs)-1][1] {
			stairs = append(stairs, p)
		}
	}
	hv := 0.0
	for k, p := range stairs {
		right := ref[0]
		if k+1 < len(stairs) {
			right = stairs[k+1][0]
		}
		hv += (right - p[0]) * (ref[1] - p[1])
	}
	return hv
}
