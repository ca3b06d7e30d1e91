package runstate

import (
	"encoding/json"
	"math"

	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/schema"
)

// Fold is the controller's state as a pure fold over the results stream:
// replaying the same results in the same order rebuilds the same pool,
// counts and statistics. Which results count is its Tally's to say; a
// design counts once, however many results it has.
type Fold struct {
	tally    *Tally
	init     int
	pool     *Pool
	counts   map[schema.Status]int
	maxSeq   uint64
	best     *Member
	bestRand *Member // best of the designs of random origin
	stats    *Stats
	evicted  string // the design the last Apply evicted from the pool
	added    bool   // the last Apply put its design in the pool
	// joinFrom is the step from which a stopped design joins the pool
	// (SetSelect); 0: none does, 1: every one does.
	joinFrom int64
	// rule is the run's early-stopping rule (SetSelect): where a stopped
	// design's training would have ended, for its cost.
	rule *schema.EarlyStop
	obj  Objectives
	// unmeasured counts ok results that lack an objective (a worker that
	// did not check them): counted, but kept out of the pool.
	unmeasured int
	hv         *hvTrack
	figures    *Figures
	stop       stopTrack
	seen       seenSet
	lastKey    uint64 // GenomeKey of the last counted design's genome
	track      bool   // keep seen and lastKey (TrackSeen)
}

// NewFold returns an empty fold that counts the results t counts; t is
// new and the fold's own, since judging a result records it. init is the
// number of initial random designs, pool and replace configure the pool.
func NewFold(t *Tally, init, pool int, replace Replace) *Fold {
	return NewFoldFor(t, init, pool, replace, Objectives{}, nil)
}

// NewFoldFor is NewFold for a run's objectives: with several (or with
// constraints) the pool is ranked by domination and replace is not read.
// ref is the hypervolume's reference point in the objectives' own units;
// nil derives it from the first init results (see hvTrack).
func NewFoldFor(t *Tally, init, pool int, replace Replace, o Objectives, ref []float64) *Fold {
	f := &Fold{
		tally: t, figures: NewFigures(),
		init:   init,
		pool:   NewPool(pool, replace),
		counts: map[schema.Status]int{},
		stats:  NewStats(),
		obj:    o,
	}
	if o.Pareto() {
		f.pool = NewRankedPool(pool)
		f.hv = newHVTrack(o, ref, init)
	}
	return f
}

// Apply judges the next stored result in stream order, as
// schema.DecodeResult returned it, and folds it in when it counts. Any
// other verdict leaves the fold as it was.
func (f *Fold) Apply(r *schema.Result, err error) Verdict {
	f.evicted, f.added = "", false
	v := f.tally.Judge(r, err)
	f.figures.Add(v, r)
	if v != Counted {
		return v
	}
	f.counts[r.Status]++
	f.maxSeq = max(f.maxSeq, r.Design.Seq)
	f.stats.Add(r)
	f.lastKey = 0
	if f.track && r.Design.Genome != nil {
		f.lastKey = GenomeKey(r.Design.Genome)
		f.seen.add(f.lastKey)
	}
	improved := f.add(r)
	f.stop.observe(improved, f.best, f.Terminal())
	return v
}

// add puts the counted result r in the pool when it is ok and measured,
// and reports whether it is a better best.
func (f *Fold) add(r *schema.Result) bool {
	if r.Status == schema.StatusStopped && f.joins(r) {
		// What a stopped design reached is what its training had shown
		// when its rung judged it: a learning curve that rises puts its
		// final fitness at or above it, so in the pool it competes on a
		// value it is likely to beat, and enters only when that is better
		// than the pool's worst. It is never the run's best, which is a
		// design that trained to its end.
		f.evicted, f.added = f.pool.Add(Member{Design: r.Design, Fitness: r.Fitness, Cost: f.stoppedCost(r)}), true
		return false
	}
	if r.Status != schema.StatusOK {
		return false
	}
	m := Member{Design: r.Design, Fitness: r.Fitness}
	if !r.Start.IsZero() && r.Stop.After(r.Start) {
		m.Cost = r.Duration().Seconds() + r.ResumedSeconds
	}
	if f.pool.Ranked() {
		p, err := f.obj.Measure(r.Fitness, r.Metrics)
		if err != nil {
			f.unmeasured++
			return false
		}
		m.Point = p
		f.hv.seen(p)
	}
	f.evicted, f.added = f.pool.Add(m), true
	if f.hv != nil {
		f.hv.update(f.pool)
	}
	if r.Design.Origin == schema.OriginRandom && (f.bestRand == nil || m.Fitness > f.bestRand.Fitness) {
		f.bestRand = &m
	}
	if f.best == nil || m.Fitness > f.best.Fitness {
		f.best = &m
		return true
	}
	return false
}

// TrackSeen makes the fold keep the genomes of the designs it counts, for
// Seen and LastKey: a novel run's controller asks for it before the first
// Apply; the tools that read a run, which make no designs, do not pay for
// it.
func (f *Fold) TrackSeen() { f.track = true }

// Seen reports whether the genome of key k (GenomeKey) is that of one of
// the last SeenWindow counted designs, whatever their status: a design
// that would evaluate it again.
func (f *Fold) Seen(k uint64) bool { return f.seen.has(k) }

// LastKey is the GenomeKey of the genome of the design the last Apply
// counted; 0 when it counted none or the design had no genome.
func (f *Fold) LastKey() uint64 { return f.lastKey }

// SetStopRule sets the rule that ends the run before its budget (see
// StopRule). Set it before the first Apply: it judges every result.
func (f *Fold) SetStopRule(r StopRule) { f.stop.rule = r }

// SetSelect sets which designs may be parents in a run with an
// early-stopping rule e (schema.EarlyStop.Select): with SelectReached a
// stopped design joins the pool with the fitness it reached, as an ok
// one does with its final fitness. A pool ranked by domination takes
// none: a stopped design has no measured objectives. Set it before the
// first Apply; nil, SelectOff and "" (a run recorded before the field)
// keep the pool to designs that trained to their end.
//
// With SelectPromoted only a design stopped at or past the second rung
// joins: it went on at the first, where a rank says least of the final
// one (docs/BENCHMARKS.md, early stopping). With several brackets
// (schema.EarlyStop.Brackets) that is bracket 0's second rung: a design
// of a later bracket stopped at its own first rung joins, judged as late.
func (f *Fold) SetSelect(e *schema.EarlyStop) {
	f.joinFrom, f.rule = 0, e
	if e == nil || e.Rule == RuleNone {
		return
	}
	switch e.Select {
	case schema.SelectReached:
		f.joinFrom = 1
	case schema.SelectPromoted:
		f.joinFrom = max(e.MinStep*int64(max(e.Eta, 2)), 1)
	}
}

// joins reports whether stopped result r joins the pool: by the run's
// selection, from the step it stopped at (the worker's stopped_at; a
// result without it joins only when every stopped design does).
func (f *Fold) joins(r *schema.Result) bool {
	if f.joinFrom == 0 || f.pool.Ranked() {
		return false
	}
	if f.joinFrom == 1 {
		return true
	}
	step, ok := stepOf(r.Metrics["stopped_at"])
	return ok && step >= f.joinFrom
}

// stoppedCost is what stopped result r would have cost trained to its
// end: the slot-seconds it took (resumed training included) scaled by its
// end (its MaxStepGene, else the rule's MaxStep) over the step it stopped
// at, so that a cost tie (Pool.SetCostTie) compares it with a finished
// design's whole cost. A design stopped at step 3 of 30 in 0.4 s would
// have cost about 4 s. 0 (unknown) when its end or its step is not known.
func (f *Fold) stoppedCost(r *schema.Result) float64 {
	if f.rule == nil || r.Start.IsZero() || !r.Stop.After(r.Start) {
		return 0
	}
	step, ok := stepOf(r.Metrics["stopped_at"])
	if !ok || step <= 0 {
		return 0
	}
	end, ok := f.rule.End(r.Design.Genome)
	if !ok {
		end = float64(f.rule.MaxStep)
	}
	if end <= float64(step) {
		return 0
	}
	return (r.Duration().Seconds() + r.ResumedSeconds) * end / float64(step)
}

// stepOf reads a step from a result's metrics, as msgpack or JSON
// decoded it.
func stepOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case uint64:
		return int64(min(x, math.MaxInt64)), true
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case float64:
		return int64(x), !math.IsNaN(x)
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}

// Added reports whether the last Apply put its design in the pool (it may
// have been evicted at once: see Evicted).
func (f *Fold) Added() bool { return f.added }

// StopRule is the fold's stop rule.
func (f *Fold) StopRule() StopRule { return f.stop.rule }

// Stop is why the stop rule ended the run, and the counted results when
// it did; "" while it has not.
func (f *Fold) Stop() (schema.StopReason, int) { return f.stop.reason, f.stop.at }

// SinceBest is the number of counted results since the best last
// improved (since the first, while there is no best).
func (f *Fold) SinceBest() int { return f.stop.sinceBest }

// Objectives are the fold's objectives.
func (f *Fold) Objectives() Objectives { return f.obj }

// Unmeasured is the number of ok results kept out of a ranked pool for
// want of an objective.
func (f *Fold) Unmeasured() int { return f.unmeasured }

// Hypervolume is the hypervolume of the pool's front and its reference
// point, in the objectives' own units; ok is false for a pool of one
// fitness, and while the reference point is not known yet.
func (f *Fold) Hypervolume() (hv float64, ref []float64, ok bool) {
	if f.hv == nil || f.hv.ref == nil {
		return 0, nil, false
	}
	return f.hv.hypervolume(), f.obj.Values(pareto.Point{Obj: f.hv.ref}), true
}

// Evicted is the ID of the design the last Apply evicted from the pool
// (the one it added, when that was the worst), or "".
func (f *Fold) Evicted() string { return f.evicted }

// Terminal is the number of designs with a terminal result.
func (f *Fold) Terminal() int { return f.tally.Counted() }

// Count is the number of designs that ended with status s.
func (f *Fold) Count(s schema.Status) int { return f.counts[s] }

// MaxSeq is the highest design sequence number with a counted result.
func (f *Fold) MaxSeq() uint64 { return f.maxSeq }

// Has reports whether design seq has a terminal result.
func (f *Fold) Has(seq uint64) bool { return f.tally.Has(seq) }

// Figures are what `evoq status` shows of the results folded.
func (f *Fold) Figures() *Figures { return f.figures }

// Tally is the rule the fold counts results by.
func (f *Fold) Tally() *Tally { return f.tally }

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
func (f *Fold) Random() bool { return f.Terminal() < f.init || f.pool.Len() == 0 }
