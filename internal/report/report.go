// Package report pictures a run: from its stored results (and the workers'
// heartbeats where they are still kept) it draws, for a run of several
// objectives, the front and its hypervolume against evaluations, then
// best fitness against evaluations and against time, the learning curves of the designs that
// reported intermediate fitness, a per-slot Gantt chart coloured by status,
// utilization over time and the status breakdown, overall and by host,
// lists the top designs, and writes it all as one self-contained HTML
// page with the charts also as PNG files.
package report

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// TopDefault is the number of designs in the top designs table.
const TopDefault = 10

// Entry is one stored result, in stream order.
type Entry struct {
	Seq    uint64
	Result *schema.Result
}

// Worker is a worker known from its heartbeat: its slots appear in the
// Gantt chart and the utilization even if they never got a design.
type Worker struct {
	ID        string
	Host      string
	Slots     int
	Started   time.Time
	Heartbeat time.Time
}

// Input is what a report is drawn from.
type Input struct {
	RunID string
	// Run is the run's recorded state; nil if it did not decode, and then
	// no result counts: the budget that bounds the run's designs is
	// unknown.
	Run *schema.Run
	// Results are the stored results that decoded, in stream order;
	// runstate.Tally judges which count.
	Results   []Entry
	Malformed int // stored results that did not decode
	// Reports are the run's stored intermediate reports that decoded, in
	// stream order; none draws no learning curves.
	Reports          []ReportEntry
	MalformedReports int // stored reports that did not decode
	Workers          []Worker
	Generated        time.Time
	// Top is the length of the top designs table (TopDefault if 0).
	Top int
}

// slotKey names one evaluation slot.
type slotKey struct {
	worker string
	slot   int
}

// span is one evaluation on a slot, in seconds from the run's start.
type span struct {
	start, stop float64
	status      schema.Status
}

// slotRow is one row of the Gantt chart.
type slotRow struct {
	key       slotKey
	host      string
	spans     []span
	from, to  float64 // the slot's known lifetime, seconds from t0
	evaluated bool
	// quarantined is when the slot was quarantined, seconds from t0; NaN
	// when it is not.
	quarantined float64
}

// point is one (x, y) pair of a series.
type point struct{ x, y float64 }

// Design is one row of the top designs table.
type Design struct {
	Rank     int
	ID       string
	Fitness  float64
	Origin   schema.Origin
	Genome   string
	Worker   string
	Slot     int
	GPU      string
	Duration time.Duration
}

// Analysis holds the figures the charts and tables show.
type Analysis struct {
	RunID       string
	Phase       schema.Phase
	Budget      int
	Init        int
	Space       string
	Results     int // stored results that decoded
	Malformed   int
	Evaluations int // designs with a terminal result: the counted results
	Duplicates  int // further results of designs already counted
	Foreign     int // results for designs that are not the run's (see runstate.Tally)
	Retried     int // failed attempts retried elsewhere (see runstate.Tally)
	Quarantined int // slots the results leave quarantined
	Counts      map[schema.Status]int
	Best        *float64
	BestID      string
	Start, End  time.Time
	Slots       int     // slots known from results and heartbeats
	SlotsUsed   int     // slots that evaluated at least one design
	Workers     int     // distinct workers
	Utilization float64 // busy slot-time over known slot lifetime
	Rate        float64 // evaluations per second over the run's span
	Top         []Design
	Hosts       []Host // the run's results by host, most failures first
	// EarlyStop is the run's early-stopping rule, nil for none.
	EarlyStop *schema.EarlyStop
	// Reports and MalformedReports are the stored intermediate reports
	// that decoded and that did not.
	Reports          int
	MalformedReports int
	Curves           CurveFigures
	// Pareto is the front of a run of several objectives (or of one
	// objective under constraints) as its controller's summary has it:
	// the front, its hypervolume, the reference point and, for a
	// built-in problem, the ratio to the true front's; nil for a run of
	// one fitness.
	Pareto *runstate.Pareto
	// ObjectivesError says why the run's recorded objectives did not
	// read; the report is then drawn as for one fitness.
	ObjectivesError string

	// Series, in stream order or time order.
	bestByEval  []point // evaluation number → best so far
	fitByEval   map[schema.Origin][]point
	bestByTime  []point // seconds since Start → best so far
	rows        []slotRow
	busy, live  []point // seconds since Start → busy and live slots
	spanSeconds float64
	curves      curveSet
	pareto      *paretoSet // nil for a run of one fitness
}

// Analyze computes the report's figures from the input.
func Analyze(in Input) *Analysis {
	a := &Analysis{RunID: in.RunID, Results: len(in.Results), Malformed: in.Malformed,
		Counts: map[schema.Status]int{}, fitByEval: map[schema.Origin][]point{}}
	if in.Run != nil {
		a.Phase, a.Budget, a.Init, a.Space = in.Run.Phase, in.Run.Budget, in.Run.Init, in.Run.Space
		a.EarlyStop = in.Run.EarlyStop
	}
	a.Reports, a.MalformedReports = len(in.Reports), in.MalformedReports
	var counted []*schema.Result
	var quarantined map[slotKey]time.Time
	all := in.Results
	in.Results, counted, quarantined = a.judge(in)
	a.analyzePareto(in, all, len(counted))
	a.Hosts = hostBreakdown(in.Results)
	a.Start, a.End = timeBounds(in)
	secs := func(t time.Time) float64 { return t.Sub(a.Start).Seconds() }
	a.spanSeconds = math.Max(secs(a.End), 0)

	var ok []*schema.Result // each design's counted ok result, in stream order
	bySeq := make(map[uint64]*schema.Result, len(counted))
	for _, r := range counted {
		bySeq[r.Design.Seq] = r
		a.Evaluations++
		a.Counts[r.Status]++
		if r.Status == schema.StatusOK {
			if a.Best == nil || r.Fitness > *a.Best {
				f := r.Fitness
				a.Best, a.BestID = &f, r.DesignID
			}
			a.fitByEval[r.Design.Origin] = append(a.fitByEval[r.Design.Origin], point{float64(a.Evaluations), r.Fitness})
			ok = append(ok, r)
		}
		if a.Best != nil {
			a.bestByEval = append(a.bestByEval, point{float64(a.Evaluations), *a.Best})
		}
	}
	byStop := append([]*schema.Result(nil), ok...)
	sort.SliceStable(byStop, func(i, j int) bool { return byStop[i].Stop.Before(byStop[j].Stop) })
	best := math.Inf(-1)
	for _, r := range byStop {
		if r.Fitness > best {
			best = r.Fitness
			a.bestByTime = append(a.bestByTime, point{secs(r.Stop), best})
		}
	}
	if len(a.bestByTime) > 0 {
		a.bestByTime = append(a.bestByTime, point{a.spanSeconds, best})
	}
	a.rows = slotRows(in, secs, quarantined)
	a.Slots = len(a.rows)
	workers := map[string]bool{}
	for _, row := range a.rows {
		workers[row.key.worker] = true
		if row.evaluated {
			a.SlotsUsed++
		}
	}
	a.Workers = len(workers)
	a.busy, a.live, a.Utilization = occupancy(a.rows, a.spanSeconds)
	if a.spanSeconds > 0 {
		a.Rate = float64(a.Evaluations) / a.spanSeconds
	}
	top := in.Top
	if top <= 0 {
		top = TopDefault
	}
	a.Top = topDesigns(ok, top)
	a.curves = learningCurves(in.RunID, in.Reports, bySeq)
	a.Curves = a.curves.figures()
	return a
}

// judge applies the counting rule to the results in stream order. It
// returns the run's own results, counted, retried or duplicate, for the
// charts of time and slots (a duplicate kept its slot busy too; a foreign
// result is no part of the run), the counted ones, and the slots the
// results leave quarantined, with the end of the failure that
// quarantined each.
func (a *Analysis) judge(in Input) (own []Entry, counted []*schema.Result, quarantined map[slotKey]time.Time) {
	budget := 0
	if in.Run != nil {
		budget = in.Run.Budget
	}
	tally := runstate.NewTally(in.RunID, budget, runstate.RulesOf(in.Run))
	quarantined = map[slotKey]time.Time{}
	for _, e := range in.Results {
		v := tally.Judge(e.Result, nil)
		for _, ev := range tally.SlotEvents() {
			k := slotKey{ev.Slot.Worker, ev.Slot.Slot}
			switch ev.Kind {
			case runstate.SlotQuarantined:
				quarantined[k] = ev.Slot.LastFailure
			case runstate.SlotRecovered:
				delete(quarantined, k)
			}
		}
		switch v {
		case runstate.Counted:
			counted = append(counted, e.Result)
		case runstate.Retried:
			a.Retried++
		case runstate.Duplicate:
			a.Duplicates++
		case runstate.Foreign:
			a.Foreign++
			continue
		case runstate.Malformed:
			a.Malformed++
			continue
		}
		own = append(own, e)
	}
	a.Quarantined = len(quarantined)
	return own, counted, quarantined
}

// timeBounds returns the earliest evaluation start (or the run's creation)
// and the latest evaluation stop (or heartbeat).
func timeBounds(in Input) (start, end time.Time) {
	widen := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if start.IsZero() || t.Before(start) {
			start = t
		}
		if t.After(end) {
			end = t
		}
	}
	for _, e := range in.Results {
		widen(e.Result.Start)
		widen(e.Result.Stop)
	}
	if start.IsZero() && in.Run != nil {
		widen(in.Run.Created)
	}
	for _, w := range in.Workers {
		if !start.IsZero() && w.Started.Before(start) {
			// A worker that joined before the first evaluation started
			// widens the chart to show its idle time.
			widen(w.Started)
		}
		widen(w.Heartbeat)
	}
	if start.IsZero() {
		start = in.Generated
	}
	if end.Before(start) {
		end = start
	}
	return start, end
}

// slotRows groups the evaluations by slot, adding the slots of known
// workers that never evaluated anything, sorted by worker and slot.
func slotRows(in Input, secs func(time.Time) float64, quarantined map[slotKey]time.Time) []slotRow {
	rows := map[slotKey]*slotRow{}
	row := func(k slotKey) *slotRow {
		r := rows[k]
		if r == nil {
			r = &slotRow{key: k, from: math.Inf(1), to: math.Inf(-1), quarantined: math.NaN()}
			rows[k] = r
		}
		return r
	}
	for k, t := range quarantined {
		row(k).quarantined = secs(t)
	}
	for _, e := range in.Results {
		res := e.Result
		if res.Worker == "" || res.Start.IsZero() || res.Stop.IsZero() {
			continue // a lost design: the controller wrote its result
		}
		r := row(slotKey{res.Worker, res.Slot})
		r.host, r.evaluated = res.Host, true
		s := span{start: secs(res.Start), stop: secs(res.Stop), status: res.Status}
		r.spans = append(r.spans, s)
		r.from, r.to = math.Min(r.from, s.start), math.Max(r.to, s.stop)
	}
	for _, w := range in.Workers {
		for i := range w.Slots {
			r := row(slotKey{w.ID, i})
			if r.host == "" {
				r.host = w.Host
			}
			if !w.Started.IsZero() {
				r.from = math.Min(r.from, secs(w.Started))
			}
			if !w.Heartbeat.IsZero() {
				r.to = math.Max(r.to, secs(w.Heartbeat))
			}
		}
	}
	out := make([]slotRow, 0, len(rows))
	for _, r := range rows {
		if math.IsInf(r.from, 0) || math.IsInf(r.to, 0) {
			r.from, r.to = 0, 0
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].key.worker != out[j].key.worker {
			return out[i].key.worker < out[j].key.worker
		}
		return out[i].key.slot < out[j].key.slot
	})
	return out
}

// occupancyBins is the number of time bins of the utilization chart.
const occupancyBins = 600

// occupancy returns the busy and live slots averaged over time bins, and
// the overall utilization: busy slot-time over live slot-time.
func occupancy(rows []slotRow, total float64) (busy, live []point, util float64) {
	if total <= 0 || len(rows) == 0 {
		return nil, nil, 0
	}
	width := total / occupancyBins
	busyT := make([]float64, occupancyBins)
	liveT := make([]float64, occupancyBins)
	add := func(acc []float64, from, to float64) {
		from, to = math.Max(from, 0), math.Min(to, total)
		for b := int(from / width); b < occupancyBins && float64(b)*width < to; b++ {
			lo, hi := math.Max(from, float64(b)*width), math.Min(to, float64(b+1)*width)
			if hi > lo {
				acc[b] += hi - lo
			}
		}
	}
	var busySum, liveSum float64
	for _, r := range rows {
		for _, s := range r.spans {
			add(busyT, s.start, s.stop)
			busySum += s.stop - s.start
		}
		add(liveT, r.from, r.to)
		liveSum += r.to - r.from
	}
	for b := range occupancyBins {
		x := (float64(b) + 0.5) * width
		busy = append(busy, point{x, busyT[b] / width})
		live = append(live, point{x, liveT[b] / width})
	}
	if liveSum > 0 {
		util = math.Min(busySum/liveSum, 1)
	}
	return busy, live, util
}

// topDesigns returns the n best of the counted ok results.
func topDesigns(ok []*schema.Result, n int) []Design {
	ok = append([]*schema.Result(nil), ok...)
	sort.SliceStable(ok, func(i, j int) bool { return ok[i].Fitness > ok[j].Fitness })
	var out []Design
	for i, r := range ok[:min(n, len(ok))] {
		out = append(out, Design{Rank: i + 1, ID: r.DesignID, Fitness: r.Fitness, Origin: r.Design.Origin,
			Genome: GenomeText(r.Design.Genome), Worker: r.Worker, Slot: r.Slot, GPU: r.GPU, Duration: r.Duration()})
	}
	return out
}

// GenomeText writes a genome as sorted key=value pairs.
func GenomeText(g map[string]any) string {
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += " "
		}
		v, err := json.Marshal(g[k])
		if err != nil {
			v = fmt.Appendf(nil, "%v", g[k])
		}
		s += k + "=" + string(v)
	}
	return s
}
