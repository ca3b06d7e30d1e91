// Package dashboard serves a run's live dashboard: one page, embedded in
// the binary, that a browser keeps open while the run goes on.
//
// One Follower per process reads the run's streams once, in stream order,
// into a Model built on runstate's fold (the same fold the controller and
// `evoq replay` use); in a controller's process the controller hands it
// the results it folds instead (Options.Fed). A Hub hands each new snapshot to every open page
// over server-sent events. A page costs one write of bytes already
// encoded; ten pages cost what one does, plus the writes. Nothing is read
// back from the history per page or per refresh.
package dashboard

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/evoq/evoq/internal/report"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// maxCurves is the number of learning curves a snapshot draws: the most
// recent designs that reported.
const maxCurves = 40

// poolRows is the number of pool members the page lists.
const poolRows = 20

// design is what the model keeps of one design: every stored result
// (its attempts), for the page that opens it.
type design struct {
	seq      uint64
	attempts []*schema.Result
}

// curve is one design's learning curve, from its reports.
type curve struct {
	seq     uint64
	points  []point
	stopped bool
	rungs   []point // where a rung decided, and at what value
}

type point struct{ X, Y float64 }

// worker is a worker as its last heartbeat shows it.
type worker struct {
	p    schema.Presence
	seen time.Time
	live bool
}

// Model is a run's state as the dashboard shows it: runstate's fold of
// the results, the early-stopping rule's fold of the reports, and the
// workers' last heartbeats. It is safe for concurrent use: the follower's
// consumers feed it while the publisher takes snapshots.
type Model struct {
	mu      sync.Mutex
	run     string
	rec     *schema.Run
	fold    *runstate.Fold
	rungs   *runstate.Rungs
	designs map[uint64]*design
	maxSeq  uint64 // the highest design seq of a result seen
	curves  map[uint64]*curve
	order   []uint64 // designs with a curve, oldest report first
	t0      time.Time
	bestE   []point // best fitness against counted evaluations
	bestT   []point // best fitness against seconds since the first result
	hv      []point // hypervolume against counted evaluations
	results uint64
	last    time.Time // time of the last stored result
	workers map[string]*worker
	lease   *leaseState
	rates   []rateMark
	queued  int // designs waiting on the work queue, as last read
	// idleSince is when each worker was first seen idle while there was
	// work, in an unbroken run of ticks.
	idleSince map[string]time.Time
	// changed counts every change; a snapshot is encoded only when it
	// moved.
	changed uint64
}

type leaseState struct {
	holder string
	host   string
	live   bool
	read   bool
}

type rateMark struct {
	at   time.Time
	done int
}

// NewModel returns the empty model of a run with record rec (nil when the
// record did not read: then no result counts, as for every reader).
func NewModel(run string, rec *schema.Run) (*Model, error) {
	m := &Model{run: run, rec: rec, designs: map[uint64]*design{}, curves: map[uint64]*curve{}, workers: map[string]*worker{}}
	budget, init, pool, replace := 0, 1, 1, runstate.ReplaceWorst
	var obj runstate.Objectives
	var ref []float64
	if rec != nil {
		budget, init, pool, ref = rec.Budget, max(rec.Init, 1), max(rec.Pool, 1), rec.HVRef
		if r, err := runstate.ParseReplace(rec.Replace); err == nil {
			replace = r
		}
		o, err := runstate.ObjectivesOf(rec)
		if err != nil {
			return nil, fmt.Errorf("run %s: objectives: %w", run, err)
		}
		obj = o
	}
	m.fold = runstate.NewFoldFor(runstate.NewTally(run, budget, runstate.RulesOf(rec)), init, pool, replace, obj, ref)
	m.fold.SetStopRule(runstate.StopRuleOf(rec))
	if rec != nil {
		m.fold.SetSelect(rec.EarlyStop)
	}
	if rec != nil && rec.EarlyStop != nil {
		m.rungs = runstate.NewRungs(run, rec.EarlyStop)
	}
	return m, nil
}

// Result folds in the next stored result, in stream order.
func (m *Model) Result(seq uint64, at time.Time, r *schema.Result, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changed++
	m.results = seq
	m.last = at
	if r != nil && r.Design.Seq > m.maxSeq {
		m.maxSeq = r.Design.Seq
	}
	before := m.fold.Best()
	v := m.fold.Apply(r, err)
	if r == nil || err != nil {
		return
	}
	if m.t0.IsZero() || (!r.Start.IsZero() && r.Start.Before(m.t0)) {
		m.t0 = r.Start
	}
	d := m.designs[r.Design.Seq]
	if d == nil {
		d = &design{seq: r.Design.Seq}
		m.designs[r.Design.Seq] = d
	}
	d.attempts = append(d.attempts, r)
	m.pruneDesigns()
	if v != runstate.Counted {
		return
	}
	n := float64(m.fold.Terminal())
	if b := m.fold.Best(); b != nil && (before == nil || b.Fitness != before.Fitness) {
		m.bestE = append(m.bestE, point{n, b.Fitness})
		m.bestT = append(m.bestT, point{r.Stop.Sub(m.t0).Seconds(), b.Fitness})
	}
	if hv, _, ok := m.fold.Hypervolume(); ok && (len(m.hv) == 0 || m.hv[len(m.hv)-1].Y != hv) {
		m.hv = append(m.hv, point{n, hv})
	}
}

// Report folds in the next stored intermediate report, in stream order.
func (m *Model) Report(r *schema.Report) {
	if r == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changed++
	c := m.curves[r.Seq]
	if c == nil {
		c = &curve{seq: r.Seq}
		m.curves[r.Seq] = c
	}
	if n := len(m.order); n == 0 || m.order[n-1] != r.Seq {
		m.order = slices.DeleteFunc(m.order, func(s uint64) bool { return s == r.Seq })
		m.order = append(m.order, r.Seq)
		m.pruneCurves()
	}
	c.points = append(c.points, point{float64(r.Step), r.Fitness})
	if m.rungs == nil {
		return
	}
	if d, ok := m.rungs.Apply(r); ok && d.Rung > 0 {
		c.rungs = append(c.rungs, point{float64(r.Step), r.Fitness})
		c.stopped = c.stopped || d.Stop
	}
}

// keptCurves and keptDesigns bound what the model keeps for the page
// beyond the fold: the curves of the designs that reported last, and the
// attempts of the designs evaluated last and of the pool's members. A run
// of a million designs would otherwise keep every genome and curve twice,
// once in the fold and once here.
const (
	keptCurves  = 4 * maxCurves
	keptDesigns = 4096
)

// pruneCurves forgets the curves of all but the keptCurves designs that
// reported last.
func (m *Model) pruneCurves() {
	if len(m.order) <= 2*keptCurves {
		return
	}
	cut := len(m.order) - keptCurves
	for _, s := range m.order[:cut] {
		delete(m.curves, s)
	}
	m.order = slices.Clone(m.order[cut:])
}

// pruneDesigns forgets the attempts of designs neither in the pool nor
// among the keptDesigns evaluated last.
func (m *Model) pruneDesigns() {
	if len(m.designs) <= 2*(keptDesigns+m.fold.Pool().Len()) {
		return
	}
	keep := map[uint64]bool{}
	for _, mb := range m.fold.Pool().Members() {
		keep[mb.Design.Seq] = true
	}
	if b := m.fold.Best(); b != nil {
		keep[b.Design.Seq] = true
	}
	// The highest design seen, not the highest counted: results the
	// fold does not count (beyond a budget it has not seen raised yet)
	// must not keep every design for ever.
	last := m.maxSeq
	for s := range m.designs {
		if !keep[s] && s+keptDesigns < last {
			delete(m.designs, s)
		}
	}
}

// Record takes in the run's record as last read; nil keeps the one the
// model has.
func (m *Model) Record(rec *schema.Run) {
	if rec == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changed++
	m.rec = rec
	m.fold.Tally().Raise(rec.Budget) // `evoq run extend`, or a continued run's larger budget
}

// RaiseBudget raises the budget results are judged by to the one the
// controller judged them by (`evoq run extend`, a continued run given a
// larger budget), before the record says so.
func (m *Model) RaiseBudget(budget int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fold.Tally().Raise(budget)
}

// Workers takes in the workers' last heartbeats, read at now.
func (m *Model) Workers(ps []schema.Presence, stored []time.Time, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changed++
	m.workers = map[string]*worker{}
	for i, p := range ps {
		m.workers[p.Worker] = &worker{p: p, seen: stored[i], live: runstate.Alive(p, stored[i], now) && !p.Leaving}
	}
}

// Lease takes in whether a controller holds the run's lease; read false
// says the lease could not be read.
func (m *Model) Lease(holder, host string, live, read bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changed++
	m.lease = &leaseState{holder: holder, host: host, live: live, read: read}
}

// Queue takes in the number of designs waiting on the work queue.
func (m *Model) Queue(queued int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queued = queued
}

// IdleWarnAfter is how long a worker's slots must idle while there is
// work before the page warns of it: the controller's --idle-alarm
// default, so that a slot between two designs is not news.
const IdleWarnAfter = 30 * time.Second

// idleWarnings are the workers whose slots have idled, while designs wait
// or the budget has designs left, for IdleWarnAfter (runstate.IdleWorkers
// judges each tick, as evoq status does).
func (m *Model) idleWarnings(now time.Time) []string {
	var loads []runstate.WorkerLoad
	for _, id := range m.workerIDs() {
		w := m.workers[id]
		loads = append(loads, runstate.WorkerLoad{Worker: id, Slots: w.p.Slots - len(w.p.Quarantined), Busy: w.p.Busy, Live: w.live, Evaluations: int(w.p.Done)})
	}
	open := m.rec != nil && (m.rec.Phase == schema.PhaseRunning || m.rec.Phase == schema.PhaseStarting)
	idle := runstate.IdleWorkers(loads, runstate.QueueFigures{Queued: m.queued},
		runstate.BudgetFigures{Budget: m.fold.Tally().Budget(), Done: m.fold.Terminal(), Open: open})
	since := map[string]time.Time{}
	var out []string
	for _, w := range idle {
		t, ok := m.idleSince[w.Worker]
		if !ok {
			t = now
		}
		since[w.Worker] = t
		if now.Sub(t) >= IdleWarnAfter {
			out = append(out, fmt.Sprintf("%s (for %s)", w, now.Sub(t).Round(time.Second)))
		}
	}
	m.idleSince = since
	return out
}

// Changes counts the model's changes, so that a publisher encodes a
// snapshot only when there is something new.
func (m *Model) Changes() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// rate is counted evaluations per second over the last minute of marks,
// the marks taken at each snapshot.
func (m *Model) rate(now time.Time, done int) float64 {
	m.rates = append(m.rates, rateMark{now, done})
	for len(m.rates) > 2 && now.Sub(m.rates[1].at) > time.Minute {
		m.rates = m.rates[1:]
	}
	first := m.rates[0]
	dt := now.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(done-first.done) / dt
}

// poolRowsOf lists the pool's members, fittest first.
func poolRowsOf(ms []runstate.Member) []PoolRow {
	ms = slices.Clone(ms)
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Fitness > ms[j].Fitness })
	var out []PoolRow
	for i, mb := range ms {
		if i == poolRows {
			break
		}
		out = append(out, PoolRow{ID: mb.Design.ID, Seq: mb.Design.Seq, Fitness: finite(mb.Fitness),
			Origin: string(mb.Design.Origin), Genome: genomeText(mb.Design.Genome, 90)})
	}
	return out
}

// finite maps NaN and infinities to nil, which JSON can carry.
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// genomeText writes a genome as the report does, cut to n characters.
func genomeText(g map[string]any, n int) string {
	s := report.GenomeText(g)
	if len(s) > n {
		s = s[:n-1] + "…"
	}
	return s
}
