package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"

	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ParallelMax is the most designs off the front that the parallel
// coordinates chart draws. As with the learning curves, past a thousand
// faint lines the chart is a smear that more lines do not change, and
// each costs the PNG bytes.
const ParallelMax = 1000

// Colours of the front charts.
var (
	frontColor = bestColor                           // the front is the best so far of a run of several objectives
	frontShade = color.NRGBA{0xd6, 0x27, 0x28, 0x1c} // the region the front dominates: its hypervolume
	refColor   = color.RGBA{0x20, 0x20, 0x20, 0xff}
)

// frontChart draws the designs' objectives with the front highlighted:
// a scatter of the two objectives, each design's objective against its
// evaluation for one, and parallel coordinates from three.
//
// Parallel coordinates rather than pairwise scatters from three
// objectives on: d objectives need d(d-1)/2 scatters, which shrink as d
// grows, and in each the front is the projection of a set that is
// non-dominated in all d, so members that look dominated there are not.
// One line per design shows all its objectives at once on one chart of
// any d, and a trade-off between two neighbouring axes shows as the front's
// lines crossing between them.
func (a *Analysis) frontChart() (Chart, error) {
	switch len(a.pareto.obj.List()) {
	case 1:
		return a.frontByEvalChart()
	case 2:
		return a.frontScatterChart()
	}
	return a.parallelChart()
}

// addDesigns adds the ok designs off the front as dots by origin, and
// those that violate a constraint as orange ×, at xy.
func addDesigns(p *plot.Plot, designs []paretoDesign, xy func(paretoDesign) plotter.XY) error {
	byOrigin := map[schema.Origin]plotter.XYs{}
	var infeasible plotter.XYs
	for _, d := range designs {
		if !d.point.Feasible() {
			infeasible = append(infeasible, xy(d))
			continue
		}
		byOrigin[d.origin] = append(byOrigin[d.origin], xy(d))
	}
	for _, o := range []schema.Origin{schema.OriginRandom, schema.OriginSeed, schema.OriginMutant} {
		if len(byOrigin[o]) == 0 {
			continue
		}
		s, err := plotter.NewScatter(byOrigin[o])
		if err != nil {
			return err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = originColors[o], vg.Points(1.6), draw.CircleGlyph{}
		p.Add(s)
	}
	if len(infeasible) > 0 {
		s, err := plotter.NewScatter(infeasible)
		if err != nil {
			return err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = statusColor(schema.StatusInfeasible), vg.Points(2.2), boldCross{}
		p.Add(s)
	}
	return nil
}

// addFront adds the front's members as red dots, larger than the others.
func addFront(p *plot.Plot, front []paretoDesign, xy func(paretoDesign) plotter.XY) error {
	if len(front) == 0 {
		return nil
	}
	pts := make(plotter.XYs, len(front))
	for i, d := range front {
		pts[i] = xy(d)
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = frontColor, vg.Points(3), draw.CircleGlyph{}
	p.Add(s)
	return nil
}

// addRef marks the reference point with a black + and its label, on the
// side of it where the plot has more room.
func addRef(p *plot.Plot, at plotter.XY, label string) error {
	s, err := plotter.NewScatter(plotter.XYs{at})
	if err != nil {
		return err
	}
	s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = refColor, vg.Points(6), boldPlus{}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{at}, Labels: []string{label}})
	if err != nil {
		return err
	}
	p.Add(s, l)
	xmin, xmax, ymin, ymax := p.X.Min, p.X.Max, p.Y.Min, p.Y.Max // as the plotters added so far span them
	st := &l.TextStyle[0]
	st.Font.Size, st.Color = vg.Points(9), refColor
	dx, dy := vg.Points(6), vg.Points(5)
	if at.X > (xmin+xmax)/2 {
		st.XAlign, dx = draw.XRight, -dx
	}
	if at.Y > (ymin+ymax)/2 {
		st.YAlign, dy = draw.YTop, -dy
	}
	l.Offset = vg.Point{X: dx, Y: dy}
	return nil
}

// widenTo moves an end of the axis a little past v when v is at it, so
// that the reference point, often the corner of the data, is drawn inside
// the frame rather than on it.
func widenTo(ax *plot.Axis, v float64) {
	pad := 0.04 * (ax.Max - ax.Min)
	if pad <= 0 {
		pad = 0.04 * math.Max(math.Abs(v), 1)
	}
	if v > ax.Max-pad {
		ax.Max = v + pad
	}
	if v < ax.Min+pad {
		ax.Min = v - pad
	}
}

// boldPlus is a + with strokes thick enough to read over a crowd of dots.
type boldPlus struct{}

func (boldPlus) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	ls := draw.LineStyle{Color: sty.Color, Width: vg.Points(1.6)}
	r := sty.Radius
	c.StrokeLine2(ls, pt.X-r, pt.Y, pt.X+r, pt.Y)
	c.StrokeLine2(ls, pt.X, pt.Y-r, pt.X, pt.Y+r)
}

func (a *Analysis) frontScatterChart() (Chart, error) {
	ps := a.pareto
	objs := ps.obj.List()
	title := fmt.Sprintf("Pareto front: %s against %s\nred: the final pool's front and its staircase", objs[1].Name, objs[0].Name)
	if ps.ref != nil {
		title += ", shaded: the hypervolume it dominates · black +: the reference point"
	}
	title += "\ndots: ok designs, grey random, blue mutant, olive seeded · orange ×: a constraint violated"
	p := newPlot(title, axisName(objs[0]), axisName(objs[1]))
	xy := func(d paretoDesign) plotter.XY { return plotter.XY{X: d.values[0], Y: d.values[1]} }
	if len(ps.designs) == 0 {
		noData(p, "no ok design measured yet")
		return render(p, "front", a.frontCaption(), 10*vg.Inch, 6*vg.Inch)
	}
	if err := addDesigns(p, ps.designs, xy); err != nil {
		return Chart{}, err
	}
	stairs := staircase(ps.front, ps.obj, ps.ref)
	if ps.ref != nil && len(stairs) > 0 {
		shade, err := plotter.NewPolygon(append(slices.Clone(stairs), plotter.XY{X: ps.ref[0], Y: ps.ref[1]}))
		if err != nil {
			return Chart{}, err
		}
		shade.Color, shade.LineStyle.Width = frontShade, 0
		p.Add(shade)
	}
	if ps.ref != nil && len(stairs) > 0 {
		// The shade's edges along the reference point are no part of the
		// front: the line joins the front's points alone.
		stairs = stairs[1 : len(stairs)-1]
	}
	if len(stairs) > 1 {
		l, err := plotter.NewLine(stairs)
		if err != nil {
			return Chart{}, err
		}
		l.Color, l.Width = frontColor, vg.Points(1.5)
		p.Add(l)
	}
	if err := addFront(p, ps.front, xy); err != nil {
		return Chart{}, err
	}
	if ps.ref != nil {
		at := plotter.XY{X: ps.ref[0], Y: ps.ref[1]}
		widenTo(&p.X, at.X)
		widenTo(&p.Y, at.Y)
		if err := addRef(p, at, "reference point "+vector(ps.ref)); err != nil {
			return Chart{}, err
		}
	}
	return render(p, "front", a.frontCaption(), 10*vg.Inch, 6*vg.Inch)
}

// staircase is the edge of the region the front dominates, as
// pareto.Hypervolume2D sums it, in the objectives' own units: the front's
// points in increasing first objective (oriented to minimize) that each
// lower the second, joined by steps. With the reference point known it
// leaves out the points not below it, which add no volume, and runs from
// the reference point's second objective down to the first step and
// across from the last to its first objective, so that with the
// reference point it closes the hypervolume's region.
func staircase(front []paretoDesign, o runstate.Objectives, ref []float64) plotter.XYs {
	var oref []float64
	if ref != nil {
		oref = o.Oriented(ref)
	}
	var pts [][]float64
	for _, d := range front {
		if len(d.point.Obj) == 2 && d.point.Feasible() && (oref == nil || d.point.Obj[0] < oref[0] && d.point.Obj[1] < oref[1]) {
			pts = append(pts, d.point.Obj)
		}
	}
	slices.SortFunc(pts, func(a, b []float64) int {
		if c := cmp.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return cmp.Compare(a[1], b[1])
	})
	var steps [][]float64
	for _, p := range pts {
		if len(steps) == 0 || p[1] < steps[len(steps)-1][1] {
			steps = append(steps, p)
		}
	}
	if len(steps) == 0 {
		return nil
	}
	var out plotter.XYs
	add := func(x, y float64) {
		v := o.Values(pareto.Point{Obj: []float64{x, y}})
		out = append(out, plotter.XY{X: v[0], Y: v[1]})
	}
	if oref != nil {
		add(steps[0][0], oref[1])
	}
	for i, s := range steps {
		if i > 0 {
			add(s[0], steps[i-1][1])
		}
		add(s[0], s[1])
	}
	if oref != nil {
		add(oref[0], steps[len(steps)-1][1])
	}
	return out
}

// frontByEvalChart is the front of one objective under constraints: each
// ok design's objective against its evaluation, the front (its best
// feasible designs) in red, and the reference point as a dashed line.
func (a *Analysis) frontByEvalChart() (Chart, error) {
	ps := a.pareto
	o := ps.obj.List()[0]
	title := fmt.Sprintf("Objective %s against evaluations\n", o.Name) +
		"red: the final pool's front · dashed: the reference point · dots: ok designs, grey random, blue mutant, olive seeded · orange ×: a constraint violated"
	p := newPlot(title, "evaluations (designs with a terminal result)", axisName(o))
	xy := func(d paretoDesign) plotter.XY { return plotter.XY{X: float64(d.eval), Y: d.values[0]} }
	if len(ps.designs) == 0 {
		noData(p, "no ok design measured yet")
		return render(p, "front", a.frontCaption(), 10*vg.Inch, 4*vg.Inch)
	}
	if err := addDesigns(p, ps.designs, xy); err != nil {
		return Chart{}, err
	}
	if err := addFront(p, ps.front, xy); err != nil {
		return Chart{}, err
	}
	if ps.ref != nil {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: ps.ref[0]}, {X: float64(ps.evaluations), Y: ps.ref[0]}})
		if err != nil {
			return Chart{}, err
		}
		l.Color, l.Width, l.Dashes = refColor, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
	}
	p.X.Min = 0
	return render(p, "front", a.frontCaption(), 10*vg.Inch, 4*vg.Inch)
}

// parallelLines draws designs as polylines across the axes, one plotter
// for a thousand lines as curveLines is.
type parallelLines struct {
	lines [][]float64 // per design, its normalized value on each axis
	style draw.LineStyle
}

func (l parallelLines) DataRange() (xmin, xmax, ymin, ymax float64) {
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, v := range l.lines {
		for _, y := range v {
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
	}
	return 0, float64(len(l.lines[0]) - 1), ymin, ymax
}

func (l parallelLines) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	for _, v := range l.lines {
		line := make([]vg.Point, len(v))
		for i, y := range v {
			line[i] = vg.Point{X: tx(float64(i)), Y: ty(y)}
		}
		c.StrokeLines(l.style, c.ClipLinesXY(line)...)
	}
}

// parallelAxes draws the objectives' axes, darker than the grid.
type parallelAxes struct{ n int }

func (a parallelAxes) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, float64(a.n - 1), math.Inf(1), math.Inf(-1)
}

func (a parallelAxes) Plot(c draw.Canvas, p *plot.Plot) {
	tx, _ := p.Transforms(&c)
	style := draw.LineStyle{Color: rungColor, Width: vg.Points(1)}
	for i := range a.n {
		x := tx(float64(i))
		c.StrokeLine2(style, x, c.Min.Y, x, c.Max.Y)
	}
}

// normalizer scales each objective, oriented to minimize, from the best
// value the designs have (0) to the worst (1): objectives of any units
// share one chart, better is always down, and the front lies low.
type normalizer struct{ lo, hi []float64 }

func newNormalizer(designs []paretoDesign, d int) normalizer {
	n := normalizer{lo: make([]float64, d), hi: make([]float64, d)}
	for m := range d {
		n.lo[m], n.hi[m] = math.Inf(1), math.Inf(-1)
		for _, x := range designs {
			n.lo[m], n.hi[m] = math.Min(n.lo[m], x.point.Obj[m]), math.Max(n.hi[m], x.point.Obj[m])
		}
	}
	return n
}

// scale is an oriented point's place on each axis; an objective in which
// every design has the same value sits in the middle.
func (n normalizer) scale(obj []float64) []float64 {
	out := make([]float64, len(obj))
	for m, v := range obj {
		if span := n.hi[m] - n.lo[m]; span > 0 {
			out[m] = (v - n.lo[m]) / span
		} else {
			out[m] = 0.5
		}
	}
	return out
}

func (a *Analysis) parallelChart() (Chart, error) {
	ps := a.pareto
	objs := ps.obj.List()
	title := "Pareto front: parallel coordinates of the objectives, each from the best value seen (0) to the worst (1)\n" +
		"red: the final pool's front · dashed black: the reference point\n" +
		"lines: ok designs, grey random, blue mutant, olive seeded · orange: a constraint violated"
	p := newPlot(title, "", "normalized objective (0 best seen, 1 worst)")
	if len(ps.designs) == 0 {
		noData(p, "no ok design measured yet")
		return render(p, "front", a.frontCaption(), 10*vg.Inch, 5*vg.Inch)
	}
	norm := newNormalizer(ps.designs, len(objs))
	onFront := map[string]bool{}
	for _, d := range ps.front {
		onFront[d.id] = true
	}
	var others []paretoDesign
	for _, d := range ps.designs {
		if !onFront[d.id] {
			others = append(others, d)
		}
	}
	others = evenSample(others, ParallelMax)
	byOrigin := map[schema.Origin][][]float64{}
	var infeasible [][]float64
	for _, d := range others {
		if !d.point.Feasible() {
			infeasible = append(infeasible, norm.scale(d.point.Obj))
			continue
		}
		byOrigin[d.origin] = append(byOrigin[d.origin], norm.scale(d.point.Obj))
	}
	p.Add(parallelAxes{n: len(objs)})
	alpha := curveAlpha(len(others))
	add := func(lines [][]float64, c color.RGBA, a uint8, width vg.Length) {
		if len(lines) > 0 {
			p.Add(parallelLines{lines: lines, style: draw.LineStyle{Color: color.NRGBA{c.R, c.G, c.B, a}, Width: width}})
		}
	}
	for _, o := range []schema.Origin{schema.OriginRandom, schema.OriginSeed, schema.OriginMutant} {
		add(byOrigin[o], originColors[o], alpha, vg.Points(0.7))
	}
	add(infeasible, statusColor(schema.StatusInfeasible), alpha, vg.Points(0.7))
	var front [][]float64
	for _, d := range ps.front {
		front = append(front, norm.scale(d.point.Obj))
	}
	add(front, frontColor, max(curveAlpha(len(front)), 0xcc), vg.Points(1.3))
	if ps.ref != nil {
		ref := norm.scale(ps.obj.Oriented(ps.ref))
		p.Add(parallelLines{lines: [][]float64{ref}, style: draw.LineStyle{Color: refColor, Width: vg.Points(1.5),
			Dashes: []vg.Length{vg.Points(5), vg.Points(3)}}})
	}
	var ticks []plot.Tick
	for m, o := range objs {
		best := ps.obj.Values(pareto.Point{Obj: slices.Repeat([]float64{norm.lo[m]}, len(objs))})[m]
		worst := ps.obj.Values(pareto.Point{Obj: slices.Repeat([]float64{norm.hi[m]}, len(objs))})[m]
		ticks = append(ticks, plot.Tick{Value: float64(m), Label: fmt.Sprintf("%s\nbest %.4g\nworst %.4g", axisName(o), best, worst)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	// The first and last axes' labels are centred on them: the padding
	// leaves room for their halves beyond.
	p.X.Min, p.X.Max, p.X.Padding = 0, float64(len(objs)-1), vg.Inch/2
	return render(p, "front", a.frontCaption(), 10*vg.Inch, 5*vg.Inch)
}

// evenSample is at most n of ds, evenly spread in their order, the same
// ones every time.
func evenSample(ds []paretoDesign, n int) []paretoDesign {
	if len(ds) <= n {
		return ds
	}
	out := make([]paretoDesign, n)
	for i := range n {
		out[i] = ds[i*len(ds)/n]
	}
	return out
}

// frontCaption says what the front chart shows, in numbers.
func (a *Analysis) frontCaption() string {
	ps := a.pareto
	infeasible := 0
	for _, d := range ps.designs {
		if !d.point.Feasible() {
			infeasible++
		}
	}
	s := fmt.Sprintf("The objectives (%s) of the %d counted ok designs", objectivesText(a.Pareto), len(ps.designs))
	if infeasible > 0 {
		s += fmt.Sprintf(", %d of which violate a constraint", infeasible)
	}
	s += fmt.Sprintf("; the final pool's front has %d designs.", len(ps.front))
	if a.Pareto != nil && a.Pareto.Unmeasured > 0 {
		s += fmt.Sprintf(" %d ok results lack an objective or a constrained value and are not drawn.", a.Pareto.Unmeasured)
	}
	if len(ps.obj.List()) > 2 {
		if n := len(ps.designs) - len(ps.front); n > ParallelMax {
			s += fmt.Sprintf(" %d of the %d designs off the front are drawn, an even sample by evaluation.", ParallelMax, n)
		}
	}
	if ps.ref != nil {
		s += " Reference point " + vector(ps.ref) + "."
	} else {
		s += " The reference point is not known yet: it comes from the initial designs."
	}
	if len(ps.obj.List()) == 2 {
		s += " The front is the pool's, which is bounded: a design that was once on the front but left the pool is drawn as a dot."
	}
	return s
}

// hypervolumeChart draws the front's hypervolume against evaluations, as
// a replay of the results rebuilds it.
func (a *Analysis) hypervolumeChart() (Chart, error) {
	ps := a.pareto
	title := "Hypervolume of the pool's front against evaluations"
	if !math.IsNaN(ps.trueHV) {
		title += "\nred: the pool's front · dashed: the true front's"
	}
	p := newPlot(title, "evaluations (designs with a terminal result)", "hypervolume")
	if len(ps.hv) == 0 {
		noData(p, "reference point not known yet")
		return render(p, "hypervolume", a.hypervolumeCaption(), 10*vg.Inch, 4*vg.Inch)
	}
	l, err := plotter.NewLine(xys(ps.hv, 1))
	if err != nil {
		return Chart{}, err
	}
	l.Color, l.Width = frontColor, vg.Points(2)
	p.Add(l)
	if !math.IsNaN(ps.trueHV) {
		t, err := plotter.NewLine(plotter.XYs{{X: 0, Y: ps.trueHV}, {X: float64(ps.evaluations), Y: ps.trueHV}})
		if err != nil {
			return Chart{}, err
		}
		t.Color, t.Width, t.Dashes = refColor, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(t)
	}
	p.X.Min, p.Y.Min = 0, 0
	// Headroom above the higher line, so that the true front's dashed line
	// does not run along the frame.
	p.Y.Max = 1.05 * p.Y.Max
	return render(p, "hypervolume", a.hypervolumeCaption(), 10*vg.Inch, 4*vg.Inch)
}

func (a *Analysis) hypervolumeCaption() string {
	ps := a.pareto
	if len(ps.hv) == 0 {
		return "The hypervolume needs its reference point, which comes from the initial designs: not all of them have a result yet."
	}
	last := ps.hv[len(ps.hv)-1]
	s := fmt.Sprintf("The hypervolume of the pool's front from the reference point %s, replaying the %d counted results in stream order, "+
		"sampled every %d evaluations and at the last. Final hypervolume %.6g", vector(ps.ref), ps.evaluations, ps.hvEvery, last.y)
	if !math.IsNaN(ps.trueHV) {
		s += fmt.Sprintf(", %.4g of the true front's %.6g (dashed)", last.y/ps.trueHV, ps.trueHV)
	}
	s += "."
	if first := ps.hv[0].x; !ps.refGiven && first > float64(ps.hvEvery) {
		s += fmt.Sprintf(" The reference point was derived from the first %d measured designs (--init), so the line starts at evaluation %d.", ps.init, int(first))
	}
	s += " The pool is bounded, so the line can fall: once the whole pool is on the front, a new member of it pushes out the most crowded one, " +
		"and the volume that only that one dominated goes with it."
	return s
}
