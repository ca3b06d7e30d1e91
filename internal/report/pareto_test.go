package report

import (
	"bytes"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"gonum.org/v1/plot/plotter"
)

// measured is a counted ok result of run "r" with metrics.
func measured(seq uint64, origin schema.Origin, fitness float64, metrics map[string]any) Entry {
	e := result(seq, "w1", int(seq%4), float64(seq), float64(seq)+1, schema.StatusOK, fitness)
	e.Result.Design.Origin, e.Result.Metrics = origin, metrics
	return e
}

// zdtRun is a run of n designs of zdt1 as the evaluator reports them
// (metrics f1 and f2): the first init random, then mutants whose g falls
// towards 1 as the run goes on, so that the front moves towards the true
// one; with a duplicate and a foreign result, which must not count, and
// under a constraint f1 >= 0.05 that some designs violate.
func zdtRun(n, init, pool int) Input {
	rng := rand.New(rand.NewPCG(5, 6))
	run := &schema.Run{Run: "r", Phase: schema.PhaseDone, Budget: n, Init: init, Pool: pool, Replace: "worst", Space: "zdt1",
		Objectives: []string{"f1:min", "f2:min"}, Constraints: []string{"f1>=0.05"}}
	in := Input{RunID: "r", Run: run, Generated: at(float64(n) + 2)}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		x := make([]float64, pareto.ZDTVars)
		origin, scale := schema.OriginRandom, 1.0
		if seq > uint64(init) {
			origin, scale = schema.OriginMutant, 0.3*(1-float64(seq)/float64(n))
		}
		for i := range x {
			x[i] = scale * rng.Float64()
		}
		x[0] = rng.Float64()
		f := pareto.ZDT1(x)
		in.Results = append(in.Results, measured(seq, origin, -(f[0]+f[1]), map[string]any{"f1": f[0], "f2": f[1]}))
		if seq == 7 {
			dup := measured(seq, origin, 0, map[string]any{"f1": 0.0, "f2": 0.0}) // would dominate everything
			in.Results = append(in.Results, dup)
		}
	}
	foreign := measured(3, schema.OriginRandom, 0, map[string]any{"f1": 0.0, "f2": 0.0})
	foreign.Result.Run, foreign.Result.Design.Run = "other", "other"
	foreign.Result.DesignID = schema.DesignID("other", 3)
	foreign.Result.Design.ID = foreign.Result.DesignID
	in.Results = append(in.Results, foreign)
	return in
}

// replayFold folds in's results as a controller of its run does.
func replayFold(t *testing.T, in Input) *runstate.Fold {
	t.Helper()
	obj, err := runstate.ObjectivesOf(in.Run)
	if err != nil {
		t.Fatal(err)
	}
	f := runstate.NewFoldFor(runstate.NewTally(in.RunID, in.Run.Budget, runstate.RulesOf(in.Run)),
		in.Run.Init, in.Run.Pool, runstate.Replace(in.Run.Replace), obj, in.Run.HVRef)
	for _, e := range in.Results {
		f.Apply(e.Result, nil)
	}
	return f
}

// chartsByName draws a's charts and checks that each PNG decodes to the
// size it records.
func chartsByName(t *testing.T, a *Analysis) ([]string, map[string]Chart) {
	t.Helper()
	charts, err := a.Charts()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]Chart{}
	for _, c := range charts {
		img, err := png.Decode(bytes.NewReader(c.PNG))
		if err != nil {
			t.Fatalf("chart %s: %v", c.Name, err)
		}
		if img.Bounds().Dx() != c.Width || img.Bounds().Dy() != c.Height {
			t.Errorf("chart %s: %v, recorded %d×%d", c.Name, img.Bounds(), c.Width, c.Height)
		}
		names = append(names, c.Name)
		byName[c.Name] = c
	}
	return names, byName
}

// pixels counts the chart's pixels within a few levels of c.
func pixels(ch Chart, c color.RGBA) int {
	img, err := png.Decode(bytes.NewReader(ch.PNG))
	if err != nil {
		return 0
	}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r>>8, c.R) && near(g>>8, c.G) && near(bl>>8, c.B) {
				n++
			}
		}
	}
	return n
}

// reddish counts the chart's pixels of the front's red, at the strength
// of its semi-transparent lines: neither the blue, grey or olive of the
// other designs nor the orange of infeasible ones.
func reddish(ch Chart) int {
	img, err := png.Decode(bytes.NewReader(ch.PNG))
	if err != nil {
		return 0
	}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 > 180 && g>>8 < 110 && bl>>8 < 120 {
				n++
			}
		}
	}
	return n
}

func frontIDs(ds []paretoDesign) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.id)
	}
	return out
}

func memberIDs(ms []runstate.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Design.ID)
	}
	return out
}

// A report of a two-objective run draws the front and the hypervolume
// first: the front it highlights is the fold's, the infeasible designs
// are marked, the hypervolume is sampled evenly and ends at the fold's,
// and the page's facts and the captions have the figures.
func TestFrontChartsTwoObjectives(t *testing.T) {
	t.Parallel()
	in := zdtRun(900, 60, 40)
	a := Analyze(in)
	fold := replayFold(t, in)
	if a.Evaluations != 900 || a.pareto == nil || a.Pareto == nil {
		t.Fatalf("evaluations %d, pareto %v; want 900 and a front", a.Evaluations, a.Pareto)
	}
	if got, want := frontIDs(a.pareto.front), memberIDs(fold.Pool().Front()); !slices.Equal(got, want) || len(got) < 5 {
		t.Errorf("front drawn %v,\nthe fold's %v; want the same, of at least 5", got, want)
	}
	if a.Pareto.FrontDigest != fold.Pool().FrontDigest() || len(a.Pareto.Front) != len(a.pareto.front) {
		t.Errorf("summary front %d designs, digest %s; the fold's %s", len(a.Pareto.Front), a.Pareto.FrontDigest, fold.Pool().FrontDigest())
	}
	hv, ref, ok := fold.Hypervolume()
	if !ok {
		t.Fatal("the fold has no hypervolume")
	}
	series := a.pareto.hv
	if last := series[len(series)-1]; last.x != 900 || last.y != hv {
		t.Errorf("last hypervolume point %v, want (900, %v)", last, hv)
	}
	if every := a.pareto.hvEvery; every != 3 || len(series) > HVSamples+1 || len(series) < HVSamples-30 {
		t.Errorf("%d points every %d evaluations; want about %d, every 3", len(series), every, HVSamples)
	}
	for _, p := range series[:len(series)-1] {
		if int(p.x)%a.pareto.hvEvery != 0 {
			t.Errorf("hypervolume sampled at evaluation %v, not a multiple of %d", p.x, a.pareto.hvEvery)
		}
	}
	if !slices.Equal(a.Pareto.HVRef, ref) || a.Pareto.HypervolumeRatio == nil {
		t.Errorf("reference point %v (fold %v), ratio %v; want a ratio to the true front", a.Pareto.HVRef, ref, a.Pareto.HypervolumeRatio)
	}
	infeasible := 0
	for _, d := range a.pareto.designs {
		if f1 := d.values[0]; (f1 < 0.05) != !d.point.Feasible() {
			t.Errorf("design %s: f1 %v, feasible %v", d.id, f1, d.point.Feasible())
		} else if f1 < 0.05 {
			infeasible++
		}
	}
	if len(a.pareto.designs) != 900 || infeasible < 10 {
		t.Fatalf("%d designs measured, %d infeasible; want 900, at least 10", len(a.pareto.designs), infeasible)
	}

	names, charts := chartsByName(t, a)
	if want := []string{"front", "hypervolume", "best-evaluations", "best-time", "gantt", "utilization", "status"}; !slices.Equal(names, want) {
		t.Fatalf("charts %v, want %v", names, want)
	}
	front, hvc := charts["front"], charts["hypervolume"]
	if front.Width != 10*chartDPI || front.Height != 6*chartDPI || hvc.Width != 10*chartDPI || hvc.Height != 4*chartDPI {
		t.Errorf("front %d×%d, hypervolume %d×%d; want 960×576 and 960×384", front.Width, front.Height, hvc.Width, hvc.Height)
	}
	// The front's red dots (3 points of radius, about 28 pixels each) and
	// the infeasible designs' orange crosses are drawn.
	if n := pixels(front, frontColor); n < 10*len(a.pareto.front) {
		t.Errorf("%d pixels in the front's red for %d front members", n, len(a.pareto.front))
	}
	if n := pixels(front, statusColor(schema.StatusInfeasible)); n < 5*infeasible {
		t.Errorf("%d pixels in the infeasible orange for %d infeasible designs", n, infeasible)
	}
	for _, s := range []string{fmt.Sprintf("of the 900 counted ok designs, %d of which violate a constraint", infeasible),
		fmt.Sprintf("front has %d designs", len(a.pareto.front)), "Reference point " + vector(ref)} {
		if !strings.Contains(front.Caption, s) {
			t.Errorf("front caption lacks %q:\n%s", s, front.Caption)
		}
	}
	trueHV := pareto.TrueHypervolumeAt("zdt1", fold.Objectives().List(), ref)
	for _, s := range []string{fmt.Sprintf("Final hypervolume %.6g", hv), fmt.Sprintf("%.4g of the true front's %.6g", hv/trueHV, trueHV),
		"sampled every 3 evaluations", "from the reference point " + vector(ref),
		"derived from the first 60 measured designs (--init), so the line starts at evaluation 60"} {
		if !strings.Contains(hvc.Caption, s) {
			t.Errorf("hypervolume caption lacks %q:\n%s", s, hvc.Caption)
		}
	}

	var page bytes.Buffer
	if err := WriteHTML(&page, a, []Chart{front, hvc}, t0); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, s := range []string{`<figure id="front">`, `<figure id="hypervolume">`, "<td>objectives</td><td class=\"num\">f1:min, f2:min subject to f1&gt;=0.05</td>",
		fmt.Sprintf("%d designs (digest %s)", len(a.Pareto.Front), a.Pareto.FrontDigest),
		fmt.Sprintf("%.6g from the reference point %s, %.4g of the true front&#39;s", hv, vector(ref), *a.Pareto.HypervolumeRatio)} {
		if !strings.Contains(html, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	if f := a.FrontFacts(); !strings.HasPrefix(f, fmt.Sprintf("front %d designs", len(a.Pareto.Front))) || !strings.Contains(f, "of the true front's") {
		t.Errorf("front facts %q", f)
	}
}

// The staircase closes, with the reference point, the region whose area
// is the hypervolume; a maximized objective is drawn in its own units,
// and a front member beyond the reference point is left out of it.
func TestStaircaseEnclosesTheHypervolume(t *testing.T) {
	t.Parallel()
	o := runstate.Objectives{Objs: []pareto.Objective{{Name: "f1"}, {Name: "acc", Maximize: true}}}
	var front []paretoDesign
	var pts []pareto.Point
	for _, v := range [][2]float64{{0.5, 0.6}, {0.2, 0.3}, {0.8, 0.9}, {1.2, 0.95}} { // f1, acc
		p := pareto.Point{Obj: []float64{v[0], -v[1]}}
		front = append(front, paretoDesign{point: p, values: o.Values(p)})
		pts = append(pts, p)
	}
	ref := []float64{1, 0} // f1 below 1, acc above 0
	got := staircase(front, o, ref)
	want := plotter.XYs{{X: 0.2, Y: 0}, {X: 0.2, Y: 0.3}, {X: 0.5, Y: 0.3}, {X: 0.5, Y: 0.6}, {X: 0.8, Y: 0.6}, {X: 0.8, Y: 0.9}, {X: 1, Y: 0.9}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("staircase\n got %v\nwant %v", got, want)
	}
	ring := append(got, plotter.XY{X: ref[0], Y: ref[1]})
	var area float64 // the shoelace formula
	for i := range ring {
		j := (i + 1) % len(ring)
		area += ring[i].X*ring[j].Y - ring[j].X*ring[i].Y
	}
	if hv := pareto.Hypervolume(pts, o.Oriented(ref)); math.Abs(math.Abs(area)/2-hv) > 1e-12 {
		t.Errorf("area inside the staircase %v, hypervolume %v", math.Abs(area)/2, hv)
	}
	// Without a reference point the staircase joins every member, from
	// the first to the last.
	open := staircase(front, o, nil)
	want = plotter.XYs{{X: 0.2, Y: 0.3}, {X: 0.5, Y: 0.3}, {X: 0.5, Y: 0.6}, {X: 0.8, Y: 0.6}, {X: 0.8, Y: 0.9}, {X: 1.2, Y: 0.9}, {X: 1.2, Y: 0.95}}
	if fmt.Sprint(open) != fmt.Sprint(want) {
		t.Errorf("staircase without a reference point\n got %v\nwant %v", open, want)
	}
}

// sphereRun is a run of three objectives, f1:min, f2:min and acc:max, of
// n designs on spheres whose radius shrinks as the run goes on, with the
// reference point given; enough designs that the parallel coordinates
// chart samples those off the front.
func sphereRun(n int) Input {
	rng := rand.New(rand.NewPCG(7, 8))
	run := &schema.Run{Run: "r", Phase: schema.PhaseDone, Budget: n, Init: 50, Pool: 30, Replace: "worst",
		Objectives: []string{"f1:min", "f2:min", "acc:max"}, HVRef: []float64{2, 2, -1}}
	in := Input{RunID: "r", Run: run, Generated: at(float64(n) + 2)}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		r := 1 + 0.8*(1-float64(seq)/float64(n))*rng.Float64()
		u, v := rng.Float64()*math.Pi/2, rng.Float64()*math.Pi/2
		f1, f2, f3 := r*math.Sin(u)*math.Cos(v), r*math.Sin(u)*math.Sin(v), r*math.Cos(u)
		origin := schema.OriginMutant
		if seq <= 50 {
			origin = schema.OriginRandom
		}
		in.Results = append(in.Results, measured(seq, origin, 0, map[string]any{"f1": f1, "f2": f2, "acc": -f3}))
	}
	return in
}

// A three-objective run draws parallel coordinates of its designs with
// the front in red, and the hypervolume ending at the fold's.
func TestFrontChartsThreeObjectives(t *testing.T) {
	t.Parallel()
	in := sphereRun(1500)
	a := Analyze(in)
	fold := replayFold(t, in)
	if got, want := frontIDs(a.pareto.front), memberIDs(fold.Pool().Front()); !slices.Equal(got, want) || len(got) < 5 {
		t.Errorf("front drawn %v,\nthe fold's %v; want the same, of at least 5", got, want)
	}
	hv, _, ok := fold.Hypervolume()
	if last := a.pareto.hv[len(a.pareto.hv)-1]; !ok || last.x != 1500 || last.y != hv || hv <= 0 {
		t.Errorf("last hypervolume point %v, the fold's %v (%v)", last, hv, ok)
	}
	names, charts := chartsByName(t, a)
	if len(names) < 2 || names[0] != "front" || names[1] != "hypervolume" {
		t.Fatalf("charts %v, want the front and the hypervolume first", names)
	}
	c := charts["front"]
	if !strings.Contains(c.Title, "parallel coordinates") || c.Width != 10*chartDPI || c.Height != 5*chartDPI {
		t.Errorf("front chart %q, %d×%d; want parallel coordinates, 960×480", c.Title, c.Width, c.Height)
	}
	if n := reddish(c); n < 5000 {
		t.Errorf("%d pixels in the front's red: the front's lines are not drawn", n)
	}
	off := 1500 - len(a.pareto.front)
	if want := fmt.Sprintf("%d of the %d designs off the front are drawn", ParallelMax, off); !strings.Contains(c.Caption, want) {
		t.Errorf("caption lacks %q:\n%s", want, c.Caption)
	}
	if len(c.PNG) > 600<<10 {
		t.Errorf("parallel coordinates %d KiB, want at most 600", len(c.PNG)>>10)
	}
	if !strings.Contains(charts["hypervolume"].Caption, "(2, 2, -1)") || strings.Contains(charts["hypervolume"].Caption, "true front") {
		t.Errorf("hypervolume caption %q: want the reference point, no true front", charts["hypervolume"].Caption)
	}
}

// One objective under a constraint is ranked by domination too: its
// front chart is the objective against evaluations.
func TestFrontChartOneConstrainedObjective(t *testing.T) {
	t.Parallel()
	in := Input{RunID: "r", Generated: at(100), Run: &schema.Run{Run: "r", Phase: schema.PhaseDone, Budget: 40, Init: 10, Pool: 5,
		Replace: "worst", Constraints: []string{"params<=50"}}}
	for seq := uint64(1); seq <= 40; seq++ {
		in.Results = append(in.Results, measured(seq, schema.OriginRandom, float64(seq%13)/13, map[string]any{"params": float64(seq * 3 % 97)}))
	}
	a := Analyze(in)
	_, charts := chartsByName(t, a)
	c, ok := charts["front"]
	if !ok || !strings.Contains(c.Title, "Objective fitness against evaluations") || len(a.pareto.front) == 0 {
		t.Fatalf("front chart %q, front %v", c.Title, frontIDs(a.pareto.front))
	}
	for _, d := range a.pareto.front {
		if !d.point.Feasible() {
			t.Errorf("front member %s infeasible", d.id)
		}
	}
}

// Until the initial designs are in, a derived reference point is not
// known: the hypervolume chart says so, and so does the page.
func TestHypervolumeNotKnownYet(t *testing.T) {
	t.Parallel()
	in := zdtRun(30, 60, 40)
	in.Run.Phase = schema.PhaseRunning
	a := Analyze(in)
	if len(a.pareto.hv) != 0 || a.pareto.ref != nil || a.Pareto.Hypervolume != nil {
		t.Fatalf("hypervolume %v, reference %v before the initial designs are in", a.pareto.hv, a.pareto.ref)
	}
	_, charts := chartsByName(t, a)
	if c := charts["hypervolume"]; !strings.Contains(c.Title, "reference point not known yet") {
		t.Errorf("hypervolume chart %q", c.Title)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, a, nil, t0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "not known yet: its reference point comes from the initial designs") {
		t.Error("page does not say the hypervolume is not known yet")
	}
}

// A run of one fitness, as every run before objectives existed, has
// neither chart and no front in its facts.
func TestOneFitnessNoFront(t *testing.T) {
	t.Parallel()
	a := Analyze(sample())
	if a.pareto != nil || a.Pareto != nil || a.FrontFacts() != "" {
		t.Fatalf("a front for a run of one fitness: %+v", a.Pareto)
	}
	names, _ := chartsByName(t, a)
	if want := []string{"best-evaluations", "best-time", "gantt", "utilization", "status"}; !slices.Equal(names, want) {
		t.Errorf("charts %v, want %v", names, want)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, a, nil, t0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "hypervolume") || strings.Contains(page.String(), "objectives") {
		t.Error("page of a run of one fitness speaks of a front")
	}
}

// Objectives that do not read leave the report as for one fitness, and
// the page says why.
func TestUnreadableObjectives(t *testing.T) {
	t.Parallel()
	in := sample()
	in.Run.Objectives = []string{"f1:sideways"}
	a := Analyze(in)
	if a.pareto != nil || !strings.Contains(a.ObjectivesError, "sideways") {
		t.Fatalf("pareto %v, error %q", a.pareto, a.ObjectivesError)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, a, nil, t0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "not read, drawn as for one fitness") {
		t.Error("page does not say the objectives did not read")
	}
}
