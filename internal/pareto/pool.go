package pareto

import "math"

// Pool is a bounded steady-state population ranked by several objectives:
// each Add inserts one point and, over the size, removes the worst of
// all: the highest rank, then within it the smallest crowding distance,
// then the oldest. The ranks and distances are recomputed on every Add
// (O(m n²)), twice: BenchmarkPoolAdd measured 0.25 ms at size 100 and
// 23 ms at size 1,000 on a 2-core machine, too slow for a pool of 1,000
// behind a fast evaluator; an incremental rank is the next step.
type Pool[T any] struct {
	size     int
	items    []T
	points   []Point
	ranks    []int
	crowding []float64
}

// NewPool returns an empty pool of at most size members.
func NewPool[T any](size int) *Pool[T] { return &Pool[T]{size: size} }

// Len is the number of members.
func (p *Pool[T]) Len() int { return len(p.items) }

// Item is member i, oldest first; Point, Rank and Crowding are its
// figures now.
func (p *Pool[T]) Item(i int) T           { return p.items[i] }
func (p *Pool[T]) Point(i int) Point      { return p.points[i] }
func (p *Pool[T]) Rank(i int) int         { return p.ranks[i] }
func (p *Pool[T]) Crowding(i int) float64 { return p.crowding[i] }
func (p *Pool[T]) Better(i, j int) bool   { return Better(p.ranks, p.crowding, i, j) }
func (p *Pool[T]) Points() []Point        { return p.points }

// Add inserts item with its point and returns the evicted member, if the
// pool was full: it may be the one just added.
func (p *Pool[T]) Add(item T, pt Point) (evicted T, ok bool) {
	p.items = append(p.items, item)
	p.points = append(p.points, pt)
	p.rerank()
	if len(p.items) <= p.size {
		return evicted, false
	}
	w := p.worst()
	evicted = p.items[w]
	p.items = append(p.items[:w], p.items[w+1:]...)
	p.points = append(p.points[:w], p.points[w+1:]...)
	p.rerank()
	return evicted, true
}

func (p *Pool[T]) rerank() {
	p.ranks = Ranks(p.points)
	p.crowding = Crowding(p.points, p.ranks)
}

// worst is the member to evict: the highest rank, the smallest crowding
// distance in it (for infeasible members, the largest violation), the
// oldest of equals.
func (p *Pool[T]) worst() int {
	w := 0
	for i := 1; i < len(p.items); i++ {
		if p.worse(i, w) {
			w = i
		}
	}
	return w
}

// worse reports whether member i is strictly worse than member j; ties
// keep the older (lower index) as the worse.
func (p *Pool[T]) worse(i, j int) bool {
	if p.ranks[i] != p.ranks[j] {
		return p.ranks[i] > p.ranks[j]
	}
	if vi, vj := p.points[i].Violation, p.points[j].Violation; vi != vj {
		return vi > vj
	}
	ci, cj := p.crowding[i], p.crowding[j]
	if math.IsInf(ci, 1) && math.IsInf(cj, 1) {
		return false
	}
	return ci < cj
}

// Front is the indexes of the rank-0 members, oldest first.
func (p *Pool[T]) Front() []int {
	var f []int
	for i, r := range p.ranks {
		if r == 0 && p.points[i].Feasible() {
			f = append(f, i)
		}
	}
	return f
}
