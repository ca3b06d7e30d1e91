package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/evoq/evoq/schema"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// CurvesMax is the most learning curves the chart draws. Past a few
// hundred thin lines a chart is a solid smear, and each more line costs
// the PNG bytes without showing anything new.
const CurvesMax = 300

// ReportEntry is one stored intermediate report, in stream order.
type ReportEntry struct {
	Seq    uint64
	Report *schema.Report
}

// CurveFigures are what the learning curves chart shows, in numbers.
type CurveFigures struct {
	// Designs are the designs with a curve: Completed trained to the
	// end (counted ok), Stopped were stopped early, Other failed or have
	// no counted result yet.
	Designs, Completed, Stopped, Other int
	// Drawn are the curves drawn, at most CurvesMax; Marks the × marks on
	// them, one per stopped design drawn.
	Drawn, Marks int
}

// figures sums up the curves.
func (cs curveSet) figures() CurveFigures {
	return CurveFigures{Designs: cs.total, Completed: cs.kinds[curveCompleted], Stopped: cs.kinds[curveStopped],
		Other: cs.kinds[curveOther], Drawn: len(cs.drawn), Marks: len(stoppedMarks(cs.drawn))}
}

// curveKind is how a drawn design ended, which sets its colour.
type curveKind uint8

const (
	// curveOther: the design has no counted result yet (still training),
	// or it failed, or its counted result came from an attempt that did
	// not report (a lost design, whose result the controller wrote).
	curveOther curveKind = iota
	curveStopped
	curveCompleted // counted ok: trained to the end
)

// curve is the reports of one attempt of one design, by step.
type curve struct {
	seq  uint64
	kind curveKind
	pts  []point // step → fitness, steps increasing
}

// reach is the last step the curve got to.
func (c curve) reach() float64 { return c.pts[len(c.pts)-1].x }

// attemptKey names one attempt of a design, as its reports and its
// result both do.
type attemptKey struct {
	seq            uint64
	retry, attempt int
}

// curveSet is what learningCurves leaves for the chart.
type curveSet struct {
	drawn    []curve // in drawing order: other, stopped, completed on top
	furthest int     // how many of drawn were kept for how far they trained
	total    int     // designs with a curve
	kinds    map[curveKind]int
}

// learningCurves picks each reporting design's curve: the attempt whose
// result counted (counted maps a design's seq to it, as runstate.Tally
// decided), else its last attempt to report. A design with a counted
// result has only that attempt drawn: the others were retried failures,
// and the curve of the attempt that counts is the one its status
// describes.
func learningCurves(run string, reports []ReportEntry, counted map[uint64]*schema.Result) curveSet {
	byAttempt := map[attemptKey][]point{}
	last := map[uint64]attemptKey{} // each design's latest reporting attempt, in stream order
	for _, e := range reports {
		r := e.Report
		if r.Run != run {
			continue // stored on the run's subject, written for another: not the run's curve
		}
		k := attemptKey{r.Seq, r.Retry, r.Attempt}
		byAttempt[k] = append(byAttempt[k], point{float64(r.Step), r.Fitness})
		last[r.Seq] = k
	}
	set := curveSet{kinds: map[curveKind]int{}}
	var all []curve
	for seq, k := range last {
		kind := curveOther
		if res := counted[seq]; res != nil {
			if ck := (attemptKey{seq, res.Design.Retry, res.Attempt}); byAttempt[ck] != nil {
				k, kind = ck, kindOf(res.Status)
			}
		}
		all = append(all, curve{seq: seq, kind: kind, pts: byStep(byAttempt[k])})
		set.kinds[kind]++
	}
	set.total = len(all)
	set.drawn, set.furthest = pickCurves(all, CurvesMax)
	return set
}

func kindOf(s schema.Status) curveKind {
	switch s {
	case schema.StatusOK:
		return curveCompleted
	case schema.StatusStopped:
		return curveStopped
	}
	return curveOther
}

// byStep sorts an attempt's reports by step, keeping the last stored of
// each step: a worker that stored a report again after the stream's
// duplicate window would otherwise draw a zigzag.
func byStep(pts []point) []point {
	slices.SortStableFunc(pts, func(a, b point) int { return cmp.Compare(a.x, b.x) })
	out := pts[:0]
	for _, p := range pts {
		if n := len(out); n > 0 && out[n-1].x == p.x {
			out[n-1] = p
			continue
		}
		out = append(out, p)
	}
	return out
}

// pickCurves chooses at most n curves, the same ones every time for the
// same reports: half of n for the designs that trained furthest (the
// completed first, then the furthest stopped or still training), the
// rest an even sample, by design number, of the others, so that the
// crowd stopped at the first rungs still shows its shape. It returns them
// in drawing order and how many were kept for how far they trained.
func pickCurves(all []curve, n int) ([]curve, int) {
	slices.SortFunc(all, func(a, b curve) int { return cmp.Compare(a.seq, b.seq) })
	if len(all) <= n {
		return inDrawingOrder(all), 0
	}
	byReach := slices.Clone(all)
	slices.SortStableFunc(byReach, func(a, b curve) int {
		if ca, cb := a.kind == curveCompleted, b.kind == curveCompleted; ca != cb {
			if ca {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.reach(), a.reach())
	})
	keep := n / 2
	picked := slices.Clone(byReach[:keep])
	rest := byReach[keep:]
	slices.SortFunc(rest, func(a, b curve) int { return cmp.Compare(a.seq, b.seq) })
	k := n - keep
	for i := range k {
		picked = append(picked, rest[i*len(rest)/k])
	}
	return inDrawingOrder(picked), keep
}

// inDrawingOrder puts the completed curves last, so that they are drawn
// over the crowd of stopped ones, keeping design order within a kind.
func inDrawingOrder(cs []curve) []curve {
	slices.SortStableFunc(cs, func(a, b curve) int {
		if a.kind != b.kind {
			return cmp.Compare(a.kind, b.kind)
		}
		return cmp.Compare(a.seq, b.seq)
	})
	return cs
}

// earlyStopRungsShown is how many rungs DescribeEarlyStop lists of a rule
// whose rungs have no bound.
const earlyStopRungsShown = 6

// DescribeEarlyStop writes a run's early-stopping rule for people: the
// rule, eta and the rungs. nil is "none".
func DescribeEarlyStop(e *schema.EarlyStop) string {
	if e == nil {
		return "none"
	}
	rungs := e.Rungs(math.MaxInt64)
	more := e.MaxStep == 0 && len(rungs) > earlyStopRungsShown
	if more {
		rungs = rungs[:earlyStopRungsShown]
	}
	steps := make([]string, len(rungs))
	for i, r := range rungs {
		steps[i] = fmt.Sprint(r)
	}
	s := fmt.Sprintf("%s, eta %d, rungs at steps %s", e.Rule, e.Eta, strings.Join(steps, ", "))
	if more {
		s += ", …"
	}
	if e.MaxStep > 0 {
		s += fmt.Sprintf("; full training at step %d", e.MaxStep)
	}
	if e.MaxStepGene != "" {
		s += fmt.Sprintf("; each design's own end in its gene %s", e.MaxStepGene)
	}
	if e.Brackets > 1 {
		firsts := make([]string, e.Brackets)
		for b := range firsts {
			firsts[b] = "none"
			if r := e.BracketRungs(b, math.MaxInt64); len(r) > 0 {
				firsts[b] = fmt.Sprint(r[0])
			}
		}
		s += fmt.Sprintf("; %d brackets (a design's is its sequence number modulo %d), first rungs %s", e.Brackets, e.Brackets, strings.Join(firsts, ", "))
	}
	return s
}

// curveLines draws curves as thin polylines in one style: one plotter for
// hundreds of lines instead of a plotter.Line each.
type curveLines struct {
	curves []curve
	style  draw.LineStyle
}

func (l curveLines) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, ymin, xmax, ymax = math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, c := range l.curves {
		for _, p := range c.pts {
			xmin, xmax = math.Min(xmin, p.x), math.Max(xmax, p.x)
			ymin, ymax = math.Min(ymin, p.y), math.Max(ymax, p.y)
		}
	}
	return xmin, xmax, ymin, ymax
}

func (l curveLines) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	for _, cv := range l.curves {
		line := make([]vg.Point, len(cv.pts))
		for i, pt := range cv.pts {
			line[i] = vg.Point{X: tx(pt.x), Y: ty(pt.y)}
		}
		if len(line) == 1 {
			// One report: a dot, which a polyline of one point is not.
			line = append(line, vg.Point{X: line[0].X + vg.Points(0.5), Y: line[0].Y})
		}
		c.StrokeLines(l.style, c.ClipLinesXY(line)...)
	}
}

// rungLines marks the rungs of the run's early-stopping rule: a dashed
// vertical line each, labelled at the top where the label has room.
type rungLines struct {
	rungs []int64
	label draw.TextStyle
}

// DataRange spans the rungs only along x: the lines run the plot's
// height, whatever the fitness range.
func (r rungLines) DataRange() (xmin, xmax, ymin, ymax float64) {
	return float64(r.rungs[0]), float64(r.rungs[len(r.rungs)-1]), math.Inf(1), math.Inf(-1)
}

func (r rungLines) Plot(c draw.Canvas, p *plot.Plot) {
	tx, _ := p.Transforms(&c)
	style := draw.LineStyle{Color: rungColor, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
	free := c.Min.X         // labels left of here would overlap the previous one
	slack := vg.Points(0.5) // the last rung may be the axis' end, give or take rounding
	for _, rung := range r.rungs {
		x := tx(float64(rung))
		if x < c.Min.X-slack || x > c.Max.X+slack {
			continue
		}
		c.StrokeLine2(style, x, c.Min.Y, x, c.Max.Y)
		text := fmt.Sprintf("rung %d", rung)
		w := r.label.Width(text)
		at, label := x+vg.Points(2), r.label
		if at+w > c.Max.X { // no room right of the line: write it on the left
			at, label.XAlign = x-vg.Points(2), draw.XRight
		}
		if left := at + w*vg.Length(label.XAlign); left >= free {
			c.FillText(label, vg.Point{X: at, Y: c.Max.Y - vg.Points(2)}, text)
			free = left + w + vg.Points(4)
		}
	}
}

// Colours of the learning curves.
var (
	completedCurveColor = color.NRGBA{0x2c, 0xa0, 0x2c, 0xff} // as ok
	otherCurveColor     = color.NRGBA{0x99, 0x99, 0x99, 0xff}
	rungColor           = color.RGBA{0x55, 0x55, 0x55, 0xff}
)

// curveAlpha makes lines fainter the more there are, so that where many
// cross reads darker than where one runs.
func curveAlpha(n int) uint8 {
	a := 0.8
	if n > 20 {
		a = math.Max(0.15, 0.8*math.Sqrt(20/float64(n)))
	}
	return uint8(math.Round(255 * a))
}

// logStepsFrom is the ratio of the last step to the first rung from which
// the step axis is logarithmic: the rungs of a rule grow by eta each, and
// on a linear axis the early ones, where most designs stop, crowd into
// its first tenth.
const logStepsFrom = 20

func (a *Analysis) curvesChart() (Chart, error) {
	cs := a.curves
	p := newPlot("Learning curves: fitness reported by step\ngreen: trained to the end · brown ×: stopped early · grey: failed or still training",
		"step", "reported fitness")
	lines := map[curveKind][]curve{}
	var minStep, maxStep float64 = math.Inf(1), 0
	for _, c := range cs.drawn {
		lines[c.kind] = append(lines[c.kind], c)
		minStep, maxStep = math.Min(minStep, c.pts[0].x), math.Max(maxStep, c.reach())
	}
	alpha := curveAlpha(len(cs.drawn))
	for _, k := range []curveKind{curveOther, curveStopped, curveCompleted} {
		if len(lines[k]) == 0 {
			continue
		}
		col := kindColor(k)
		col.A = alpha
		p.Add(curveLines{curves: lines[k], style: draw.LineStyle{Color: col, Width: vg.Points(0.7)}})
	}
	if marks := stoppedMarks(cs.drawn); len(marks) > 0 {
		s, err := plotter.NewScatter(xys(marks, 1))
		if err != nil {
			return Chart{}, err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = statusColor(schema.StatusStopped), vg.Points(2.2), boldCross{}
		p.Add(s)
	}
	logX := false
	if e := a.EarlyStop; e != nil {
		if rungs := e.Rungs(int64(maxStep)); len(rungs) > 0 {
			label := p.X.Tick.Label
			label.Font.Size, label.Color, label.XAlign, label.YAlign = vg.Points(7.5), rungColor, draw.XLeft, draw.YTop
			p.Add(rungLines{rungs: rungs, label: label})
			logX = minStep >= 1 && maxStep >= logStepsFrom*float64(rungs[0])
		}
	}
	if logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
		p.X.Label.Text = "step (logarithmic)"
	}
	return render(p, "curves", a.curvesCaption(logX), 10*vg.Inch, 4.5*vg.Inch)
}

// stoppedMarks are where the × marks go: the last report of each stopped
// design drawn, the fitness its result records.
func stoppedMarks(drawn []curve) []point {
	var out []point
	for _, c := range drawn {
		if c.kind == curveStopped {
			out = append(out, c.pts[len(c.pts)-1])
		}
	}
	return out
}

// boldCross is draw.CrossGlyph with strokes thick enough to read over
// hundreds of lines of the same colour.
type boldCross struct{}

func (boldCross) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	ls := draw.LineStyle{Color: sty.Color, Width: vg.Points(1.2)}
	r := sty.Radius
	c.StrokeLine2(ls, pt.X-r, pt.Y-r, pt.X+r, pt.Y+r)
	c.StrokeLine2(ls, pt.X-r, pt.Y+r, pt.X+r, pt.Y-r)
}

// kindColor is the colour of a kind of curve, opaque.
func kindColor(k curveKind) color.NRGBA {
	switch k {
	case curveCompleted:
		return completedCurveColor
	case curveStopped:
		c := statusColor(schema.StatusStopped)
		return color.NRGBA{c.R, c.G, c.B, 0xff}
	}
	return otherCurveColor
}

func (a *Analysis) curvesCaption(logX bool) string {
	f := a.Curves
	s := fmt.Sprintf("The intermediate reports of %d designs (%d stored reports): %d trained to the end, %d stopped early by the run's rule, "+
		"%d failed or still training. Each line is one design's attempt whose result counted (the design's last reporting attempt while it has none); "+
		"its retried attempts are not drawn.",
		f.Designs, a.Reports, f.Completed, f.Stopped, f.Other)
	if f.Drawn < f.Designs {
		s += fmt.Sprintf(" %d of the %d curves are drawn (%d stopped): the %d that trained furthest (the completed first) and an even sample of %d of the others by design number.",
			f.Drawn, f.Designs, f.Marks, a.curves.furthest, f.Drawn-a.curves.furthest)
	} else {
		s += fmt.Sprintf(" All %d curves are drawn.", f.Designs)
	}
	if a.EarlyStop != nil {
		s += " Dashed: the rungs of the early-stopping rule (" + DescribeEarlyStop(a.EarlyStop) + ")."
	}
	if logX {
		s += " The step axis is logarithmic, as the rungs are."
	}
	return s
}

// logTicks labels a logarithmic axis at 1, 2 and 5 times the powers of
// ten, which plot.LogTicks leaves bare between its powers of ten.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for p := math.Pow(10, math.Floor(math.Log10(lo))); p <= hi; p *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * p; v >= lo && v <= hi {
				out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
	}
	return out
}
