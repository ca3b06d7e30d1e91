package runstate

import (
	"math"

	"github.com/evoq/evoq/pareto"
)

// HVMargin widens the derived reference point beyond the initial designs'
// worst values, as a share of their range, so that the worst of them
// still adds to the hypervolume.
const HVMargin = 0.1

// hvTrack follows the hypervolume of a ranked pool's front. Its reference
// point (oriented to minimize) is given, or derived once from the first
// init measured results: in each objective, the worst value among them
// (among the feasible ones, when there are any) plus HVMargin of their
// range (of the value's size, or 1, when they all have one value). It is
// then fixed for the run, so that the hypervolume of one run is
// comparable across its life, and a replay derives the same one.
type hvTrack struct {
	ref   []float64
	init  int
	first []pareto.Point // measured results while ref is derived
	dirty bool
	front []pareto.Point
	value float64
}

func newHVTrack(o Objectives, ref []float64, init int) *hvTrack {
	t := &hvTrack{init: max(init, 1)}
	if len(ref) > 0 {
		t.ref = o.Oriented(ref)
	}
	return t
}

// seen notes a measured result.
func (t *hvTrack) seen(p pareto.Point) {
	if t.ref != nil {
		return
	}
	t.first = append(t.first, p)
	if len(t.first) < t.init {
		return
	}
	pts := t.first
	var feasible []pareto.Point
	for _, q := range pts {
		if q.Feasible() {
			feasible = append(feasible, q)
		}
	}
	if len(feasible) > 0 {
		pts = feasible
	}
	d := len(pts[0].Obj)
	t.ref = make([]float64, d)
	for m := range d {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, q := range pts {
			lo, hi = min(lo, q.Obj[m]), max(hi, q.Obj[m])
		}
		span := hi - lo
		if span == 0 {
			span = max(math.Abs(hi), 1)
		}
		t.ref[m] = hi + HVMargin*span
	}
	t.first = nil
	t.dirty = true
}

// update notes the pool after a result went in.
func (t *hvTrack) update(p *Pool) {
	t.front = t.front[:0]
	for _, m := range p.Front() {
		t.front = append(t.front, m.Point)
	}
	t.dirty = true
}

// hypervolume is the front's, computed when asked for.
func (t *hvTrack) hypervolume() float64 {
	if t.dirty && t.ref != nil {
		t.value = pareto.Hypervolume(t.front, t.ref)
		t.dirty = false
	}
	return t.value
}
