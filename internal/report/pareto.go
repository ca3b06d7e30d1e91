package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// HVSamples is about the most points the hypervolume chart samples: its
// line is 10 inches wide, and past a few hundred points more only cost
// hypervolume computations, which grow with the front and the objectives.
const HVSamples = 300

// paretoDesign is one counted ok design measured under the run's
// objectives.
type paretoDesign struct {
	id     string
	eval   int // its evaluation number: its place among the counted results
	origin schema.Origin
	point  pareto.Point // oriented to minimize, with its violation
	values []float64    // the objectives in their own units
}

// paretoSet is what the front and hypervolume charts draw.
type paretoSet struct {
	obj     runstate.Objectives
	designs []paretoDesign // every counted ok design measured, in stream order
	front   []paretoDesign // the final pool's front, oldest first
	// ref is the hypervolume's reference point in the objectives' own
	// units, nil while it is not known.
	ref []float64
	// trueHV is the true front's hypervolume at ref, for a built-in
	// problem whose front is known; NaN otherwise.
	trueHV  float64
	hv      []point // evaluations → the front's hypervolume
	hvEvery int     // evaluations between two samples of hv
	// refGiven is whether the run was given its reference point, rather
	// than deriving it from its first init measured designs.
	refGiven bool
	init     int
	// evaluations is the number of counted results, the x range of the
	// charts against evaluations.
	evaluations int
}

// analyzePareto replays a run of several objectives through a fold like
// its controller's and keeps the front, the designs' objectives and the
// hypervolume's course; a run of one fitness is left as it was. results
// are all the stored results, in stream order: the fold's tally judges
// them as the controller's did, so the pool it ranks is the run's.
// evaluations is the number of counted results, which sets the sampling.
func (a *Analysis) analyzePareto(in Input, results []Entry, evaluations int) {
	if in.Run == nil {
		return
	}
	obj, err := runstate.ObjectivesOf(in.Run)
	if err != nil {
		a.ObjectivesError = err.Error()
		return
	}
	if !obj.Pareto() {
		return
	}
	init, size := in.Run.Init, in.Run.Pool
	if init <= 0 || size <= 0 {
		init, size = runstate.InitDefault, runstate.PoolDefault
	}
	tally := runstate.NewTally(in.RunID, in.Run.Budget, runstate.RulesOf(in.Run))
	fold := runstate.NewFoldFor(tally, init, size, runstate.Replace(in.Run.Replace), obj, in.Run.HVRef)
	ps := &paretoSet{obj: obj, trueHV: math.NaN(), evaluations: evaluations,
		hvEvery: max(1, (evaluations+HVSamples-1)/HVSamples), refGiven: len(in.Run.HVRef) > 0, init: init}
	for _, e := range results {
		if fold.Apply(e.Result, nil) != runstate.Counted {
			continue
		}
		n := fold.Terminal()
		if r := e.Result; r.Status == schema.StatusOK {
			if p, err := obj.Measure(r.Fitness, r.Metrics); err == nil {
				ps.designs = append(ps.designs, paretoDesign{id: r.DesignID, eval: n, origin: r.Design.Origin, point: p, values: obj.Values(p)})
			}
		}
		// Sampled only every hvEvery evaluations, and at the last: the
		// fold computes the hypervolume when asked, and asked at every
		// result a front of hundreds of points in several objectives
		// would take longer than the rest of the report.
		if n%ps.hvEvery == 0 || n == evaluations {
			if hv, _, ok := fold.Hypervolume(); ok {
				ps.hv = append(ps.hv, point{float64(n), hv})
			}
		}
	}
	ps.front = frontDesigns(fold, ps.designs)
	if _, ref, ok := fold.Hypervolume(); ok {
		ps.ref = ref
		ps.trueHV = pareto.TrueHypervolumeAt(in.Run.Space, obj.List(), ref)
	}
	a.pareto = ps
	a.Pareto = runstate.ParetoOf(fold, in.Run.Space)
}

// frontDesigns are the fold's front as the designs measured: the same
// points, with their evaluation numbers and origins.
func frontDesigns(f *runstate.Fold, designs []paretoDesign) []paretoDesign {
	byID := make(map[string]int, len(designs))
	for i, d := range designs {
		byID[d.id] = i
	}
	var out []paretoDesign
	for _, m := range f.Pool().Front() {
		d := paretoDesign{id: m.Design.ID, origin: m.Design.Origin, point: m.Point, values: f.Objectives().Values(m.Point)}
		if i, ok := byID[m.Design.ID]; ok {
			d.eval = designs[i].eval
		}
		out = append(out, d)
	}
	return out
}

// axisName is an objective as an axis names it: "f1 (min)".
func axisName(o pareto.Objective) string {
	if o.Maximize {
		return o.Name + " (max)"
	}
	return o.Name + " (min)"
}

// vector writes a point in the objectives' own units: (1.1, 1.1).
func vector(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.4g", x)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// FrontFacts are the front's figures in a few words, as the page's facts
// table has them: "front 71 designs (digest …); hypervolume 0.789804 from
// the reference point (1.1, 1.1), 0.9009 of the true front's". It is ""
// for a run of one fitness.
func (a *Analysis) FrontFacts() string {
	if a.Pareto == nil {
		return ""
	}
	_, front, hv := frontRows(a.Pareto)
	return "front " + front + "; hypervolume " + hv
}
