package controller

import (
	"github.com/evoq/evoq/schema"
)

// Fold is the controller's state as a pure fold over the results stream:
// replaying the same results in the same order rebuilds the same pool,
// counts and statistics. A design counts once, however many results it has.
type Fold struct {
	init     int
	pool     *Pool
	done     doneSet
	counts   map[schema.Status]int
	terminal int
	maxSeq   uint64
	best     *Member
	bestRand *Member // best of the designs of random origin
	stats    *Stats
}

// NewFold returns an empty fold; init is the number of initial random
// designs, pool and replace configure the pool.
func NewFold(init, pool int, replace Replace) *Fold {
	return &Fold{
		init:   init,
		pool:   NewPool(pool, replace),
		done:   doneSet{above: map[uint64]struct{}{}},
		counts: map[schema.Status]int{},
		stats:  NewStats(),
	}
}

// Apply folds one result in. It returns false, changing nothing, for a
// result whose design already has a terminal result.
func (f *Fold) Apply(r *schema.Result) bool {
	if !f.done.add(r.Design.Seq) {
		return false
	}
	f.terminal++
	f.counts[r.Status]++
	f.maxSeq = max(f.maxSeq, r.Design.Seq)
	f.stats.Add(r)
	if r.Status != schema.StatusOK {
		return true
	}
	m := Member{Design: r.Design, Fitness: r.Fitness}
	f.pool.Add(m)
	if f.best == nil || m.Fitness > f.best.Fitness {
		f.best = &m
	}
	if r.Design.Origin == schema.OriginRandom && (f.bestRand == nil || m.Fitness > f.bestRand.Fitness) {
		f.bestRand = &m
	}
	return true
}

// Terminal is the number of designs with a terminal result.
func (f *Fold) Terminal() int { return f.terminal }

// Count is the number of designs that ended with status s.
func (f *Fold) Count(s schema.Status) int { return f.counts[s] }

// MaxSeq is the highest design sequence number seen in a result.
func (f *Fold) MaxSeq() uint64 { return f.maxSeq }

// Has reports whether design seq has a terminal result.
func (f *Fold) Has(seq uint64) bool { return f.done.has(seq) }

// Pool is the current pool.
func (f *Fold) Pool() *Pool { return f.pool }

// Best is the fittest ok design so far, or nil.
func (f *Fold) Best() *Member { return f.best }

// BestRandom is the fittest design of random origin, or nil.
func (f *Fold) BestRandom() *Member { return f.bestRand }

// Stats are the run's timing statistics.
func (f *Fold) Stats() *Stats { return f.stats }

// Random reports whether the next design should be random rather than a
// mutant: until init designs have a terminal result, and while the pool
// is empty.
func (f *Fold) Random() bool { return f.terminal < f.init || f.pool.Len() == 0 }

// doneSet remembers which design sequence numbers are done in memory
// proportional to the designs in flight, not to the history: every seq up
// to low is done, plus those in above.
type doneSet struct {
	low   uint64
	above map[uint64]struct{}
}

func (d *doneSet) has(seq uint64) bool {
	if seq <= d.low {
		return true
	}
	_, ok := d.above[seq]
	return ok
}

func (d *doneSet) add(seq uint64) bool {
	if d.has(seq) {
		return false
	}
	d.above[seq] = struct{}{}
	for {
		if _, ok := d.above[d.low+1]; !ok {
			return true
		}
		delete(d.above, d.low+1)
		d.low++
	}
}
