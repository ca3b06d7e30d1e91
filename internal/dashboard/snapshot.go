package dashboard

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// View is one snapshot of the run as the page shows it. Charts are SVG
// drawn here, once per snapshot, whatever the number of pages.
type View struct {
	Run         string            `json:"run"`
	Phase       string            `json:"phase"`
	At          time.Time         `json:"at"`
	Evaluations int               `json:"evaluations"`
	Budget      int               `json:"budget"`
	Results     uint64            `json:"results"`
	Rate        float64           `json:"rate"`        // counted evaluations per second, last minute
	ETA         string            `json:"eta"`         // time left at that rate; empty when unknown
	Best        *float64          `json:"best"`        // best fitness so far
	BestID      string            `json:"best_id"`     //
	ByStatus    map[string]int    `json:"by_status"`   //
	Controller  string            `json:"controller"`  // who holds the run, or that none does
	Warnings    []string          `json:"warnings"`    // the run's warnings, quarantines and idle slots first
	Slots       SlotStrip         `json:"slots"`       //
	Hosts       []HostRow         `json:"hosts"`       //
	Pool        []PoolRow         `json:"pool"`        // fittest first
	Front       []PoolRow         `json:"front"`       // the first front, for several objectives
	Hypervolume *float64          `json:"hypervolume"` //
	Charts      map[string]string `json:"charts"`      // name → SVG
}

// SlotStrip is the slots' state as a heat strip: one cell per slot, or,
// beyond MaxCells slots, one cell per group of consecutive slots (ordered
// by worker), as the report's Gantt chart aggregates.
type SlotStrip struct {
	Total       int    `json:"total"`
	Busy        int    `json:"busy"`
	Idle        int    `json:"idle"`
	Quarantined int    `json:"quarantined"`
	PerCell     int    `json:"per_cell"` // slots per cell
	Cells       string `json:"cells"`    // one character a cell (see stripCells)
}

// HostRow is one host's workers and slots.
type HostRow struct {
	Host        string `json:"host"`
	Workers     int    `json:"workers"`
	Live        int    `json:"live"`
	Slots       int    `json:"slots"`
	Busy        int    `json:"busy"`
	Quarantined int    `json:"quarantined"`
	Done        int64  `json:"done"`
	State       string `json:"state"`
}

// PoolRow is one design in the pool table; its ID opens its page.
type PoolRow struct {
	ID      string   `json:"id"`
	Seq     uint64   `json:"seq"`
	Fitness *float64 `json:"fitness"`
	Origin  string   `json:"origin"`
	Genome  string   `json:"genome"`
}

// MaxCells is the most cells the slot strip draws one slot each.
const MaxCells = 400

// slotState is one slot's state in the strip.
type slotState uint8

const (
	slotIdle slotState = iota
	slotBusy
	slotQuarantined
	slotGone // its worker's heartbeat went quiet
)

// Snapshot returns the run's view at now.
func (m *Model) Snapshot(now time.Time) View {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.fold
	v := View{Run: m.run, At: now.UTC(), Evaluations: f.Terminal(), Budget: f.Tally().Budget(), Results: m.results,
		ByStatus: map[string]int{}, Charts: map[string]string{}}
	if m.rec != nil {
		v.Phase = string(m.rec.Phase)
		v.Budget = m.rec.Budget
	}
	for _, s := range []schema.Status{schema.StatusOK, schema.StatusInfeasible, schema.StatusError, schema.StatusTimeout, schema.StatusLost, schema.StatusStopped} {
		if n := f.Count(s); n > 0 {
			v.ByStatus[string(s)] = n
		}
	}
	if b := f.Best(); b != nil {
		v.Best, v.BestID = finite(b.Fitness), b.Design.ID
	}
	v.Rate = m.rate(now, v.Evaluations)
	if left := v.Budget - v.Evaluations; v.Rate > 0 && left > 0 && v.Phase != string(schema.PhaseDone) {
		v.ETA = (time.Duration(float64(left)/v.Rate) * time.Second).Round(time.Second).String()
	}
	v.Controller = m.controllerText()
	quarantined := runstate.QuarantinedOf(f.Tally())
	v.Warnings = m.warnings(quarantined, m.idleWarnings(now))
	v.Slots = m.strip(quarantined)
	v.Hosts = m.hosts(quarantined)
	v.Pool = poolRowsOf(f.Pool().Members())
	if f.Objectives().Pareto() {
		v.Front = poolRowsOf(f.Pool().Front())
		if hv, _, ok := f.Hypervolume(); ok {
			v.Hypervolume = finite(hv)
			v.Charts["hypervolume"] = lineChart("hypervolume against evaluations", "evaluations", "hypervolume", [][]point{m.hv}, nil)
		}
		v.Charts["front"] = frontChart(f.Pool().Front(), f.Objectives())
	}
	v.Charts["best-evaluations"] = lineChart("best fitness against evaluations", "evaluations", "fitness", [][]point{stepped(m.bestE, float64(v.Evaluations))}, nil)
	v.Charts["best-time"] = lineChart("best fitness against time", "seconds since the first evaluation", "fitness",
		[][]point{stepped(m.bestT, m.last.Sub(m.t0).Seconds())}, nil)
	if len(m.order) > 0 {
		v.Charts["curves"] = m.curvesChart()
	}
	return v
}

// stepped draws a best-so-far series as steps, carried on to x end.
func stepped(ps []point, end float64) []point {
	var out []point
	for i, p := range ps {
		if i > 0 {
			out = append(out, point{p.X, ps[i-1].Y})
		}
		out = append(out, p)
	}
	if len(ps) > 0 && end > ps[len(ps)-1].X {
		out = append(out, point{end, ps[len(ps)-1].Y})
	}
	return out
}

func (m *Model) controllerText() string {
	switch {
	case m.lease == nil:
		return ""
	case !m.lease.read:
		return "the broker did not answer (is it down?): the figures are as last read"
	case m.lease.holder == "":
		return "no controller holds the run"
	case m.lease.live:
		return fmt.Sprintf("controller %s on %s", m.lease.holder, m.lease.host)
	default:
		return fmt.Sprintf("the controller (%s on %s) is gone: its lease is no longer renewed", m.lease.holder, m.lease.host)
	}
}

// warnings are a controller that is gone, the quarantined slots, the
// idle ones, the run's recorded warnings and its workers', in that order.
func (m *Model) warnings(q []schema.QuarantinedSlot, idle []string) []string {
	var out []string
	if m.lease != nil && (!m.lease.read || m.lease.holder != "" && !m.lease.live && (m.rec == nil || m.rec.Phase != schema.PhaseDone)) {
		out = append(out, m.controllerText())
	}
	for _, s := range q {
		out = append(out, fmt.Sprintf("slot %d of worker %s (host %s) quarantined after %d failures: %s", s.Slot, s.Worker, s.Host, s.Failures, clip(s.LastError, 160)))
	}
	out = append(out, idle...)
	if m.rec != nil {
		out = append(out, m.rec.Warnings...)
	}
	for _, id := range m.workerIDs() {
		w := m.workers[id]
		for _, x := range w.p.Warnings {
			if msg := fmt.Sprintf("worker %s (host %s): %s", w.p.Worker, w.p.Host, x); !slices.Contains(out, msg) {
				out = append(out, msg)
			}
		}
	}
	return out
}

func (m *Model) workerIDs() []string {
	ids := make([]string, 0, len(m.workers))
	for id := range m.workers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// slots lists every slot's state, ordered by worker. A worker's heartbeat
// says how many of its slots are busy, not which: its busy slots are
// drawn first among the ones not quarantined.
func (m *Model) slots(q []schema.QuarantinedSlot) []slotState {
	held := map[runstate.SlotKey]bool{}
	for _, s := range q {
		held[runstate.SlotKey{Worker: s.Worker, Slot: s.Slot}] = true
	}
	var out []slotState
	// A worker whose every slot was quarantined leaves, and its heartbeat
	// with it; its slots stay on the strip, as the fold keeps them.
	for _, s := range q {
		if m.workers[s.Worker] == nil {
			out = append(out, slotQuarantined)
		}
	}
	for _, id := range m.workerIDs() {
		w := m.workers[id]
		busy := w.p.Busy
		for i := range w.p.Slots {
			switch {
			case held[runstate.SlotKey{Worker: id, Slot: i}] || slices.Contains(w.p.Quarantined, i):
				out = append(out, slotQuarantined)
			case !w.live:
				out = append(out, slotGone)
			case busy > 0:
				out = append(out, slotBusy)
				busy--
			default:
				out = append(out, slotIdle)
			}
		}
	}
	return out
}

func (m *Model) strip(q []schema.QuarantinedSlot) SlotStrip {
	states := m.slots(q)
	s := SlotStrip{Total: len(states), PerCell: max(1, (len(states)+MaxCells-1)/MaxCells)}
	for _, st := range states {
		switch st {
		case slotBusy:
			s.Busy++
		case slotIdle:
			s.Idle++
		case slotQuarantined:
			s.Quarantined++
		}
	}
	s.Cells = stripCells(states, s.PerCell)
	return s
}

func (m *Model) hosts(q []schema.QuarantinedSlot) []HostRow {
	byHost := map[string]*HostRow{}
	for _, id := range m.workerIDs() {
		w := m.workers[id]
		h := byHost[w.p.Host]
		if h == nil {
			h = &HostRow{Host: w.p.Host}
			byHost[w.p.Host] = h
		}
		h.Workers++
		h.Slots += w.p.Slots
		h.Done += w.p.Done
		if w.live {
			h.Live++
			h.Busy += w.p.Busy
		}
	}
	for _, s := range q {
		h := byHost[s.Host]
		if h == nil {
			h = &HostRow{Host: s.Host}
			byHost[s.Host] = h
		}
		h.Quarantined++
		if m.workers[s.Worker] == nil {
			h.Slots++
		}
	}
	var out []HostRow
	for _, h := range byHost {
		switch {
		case h.Live == 0:
			h.State = "gone"
		case h.Quarantined > 0:
			h.State = "quarantined slots"
		case h.Busy == 0:
			h.State = "idle"
		default:
			h.State = "busy"
		}
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// curvesChart draws the most recent designs' learning curves, stopped
// ones dashed, with a dot where a rung decided.
func (m *Model) curvesChart() string {
	seqs := m.order[max(0, len(m.order)-maxCurves):]
	var lines [][]point
	var marks []point
	var dashed []bool
	for _, s := range seqs {
		c := m.curves[s]
		lines = append(lines, c.points)
		marks = append(marks, c.rungs...)
		dashed = append(dashed, c.stopped)
	}
	return curvesSVG(lines, dashed, marks)
}

// Design is what the page that opens a design shows.
type Design struct {
	ID       string         `json:"id"`
	Seq      uint64         `json:"seq"`
	Origin   string         `json:"origin"`
	Parents  []string       `json:"parents"`
	Genome   map[string]any `json:"genome"`
	Attempts []Attempt      `json:"attempts"`
	// Curve is its intermediate reports: step, fitness.
	Curve   [][2]float64 `json:"curve"`
	Stopped bool         `json:"stopped"`
}

// Design returns design seq's genome, attempts and curve; false when the
// model has no result of it.
func (m *Model) Design(seq uint64) (Design, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.designs[seq]
	if d == nil || len(d.attempts) == 0 {
		return Design{}, false
	}
	first := d.attempts[0].Design
	out := Design{ID: first.ID, Seq: seq, Origin: string(first.Origin), Parents: first.Parents, Genome: first.Genome}
	for _, r := range d.attempts {
		out.Attempts = append(out.Attempts, attemptOf(r))
	}
	if c := m.curves[seq]; c != nil {
		for _, p := range c.points {
			out.Curve = append(out.Curve, [2]float64{p.X, p.Y})
		}
		out.Stopped = c.stopped
	}
	return out, true
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// Attempt is one stored result of a design. LogTail is the tail of the
// evaluator's output the worker kept with a failure.
type Attempt struct {
	Attempt int            `json:"attempt"`
	Status  string         `json:"status"`
	Fitness *float64       `json:"fitness"`
	Metrics map[string]any `json:"metrics"`
	Worker  string         `json:"worker"`
	Host    string         `json:"host"`
	Slot    int            `json:"slot"`
	GPU     string         `json:"gpu,omitempty"`
	Start   time.Time      `json:"start"`
	Seconds float64        `json:"seconds"`
	Exit    *int           `json:"exit,omitempty"`
	Signal  string         `json:"signal,omitempty"`
	LogTail string         `json:"log_tail,omitempty"`
}

func attemptOf(r *schema.Result) Attempt {
	a := Attempt{Attempt: r.Attempt, Status: string(r.Status), Worker: r.Worker, Host: r.Host, Slot: r.Slot, GPU: r.GPU,
		Start: r.Start, Seconds: r.Duration().Seconds(), Exit: r.Exit, Signal: r.Signal, LogTail: r.Error, Metrics: map[string]any{}}
	if r.Status == schema.StatusOK {
		a.Fitness = finite(r.Fitness)
	}
	for k, v := range r.Metrics {
		// JSON has no NaN or infinity: such a metric is shown as text.
		if x, ok := v.(float64); ok && finite(x) == nil {
			v = fmt.Sprint(x)
		}
		a.Metrics[k] = v
	}
	return a
}
