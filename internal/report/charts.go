package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"

	"github.com/evoq/evoq/schema"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart is one drawn chart.
type Chart struct {
	Name    string // file name stem: best-evals, gantt, ...
	Title   string
	Caption string
	PNG     []byte
	Width   int // pixels
	Height  int
}

// chartDPI is the resolution of the PNGs.
const chartDPI = 96

// Colours of the statuses and origins; the HTML legend uses the same.
var (
	statusColors = map[schema.Status]color.RGBA{
		schema.StatusOK:         {0x2c, 0xa0, 0x2c, 0xff},
		schema.StatusInfeasible: {0xff, 0x7f, 0x0e, 0xff},
		schema.StatusError:      {0xd6, 0x27, 0x28, 0xff},
		schema.StatusTimeout:    {0x94, 0x67, 0xbd, 0xff},
		schema.StatusLost:       {0x7f, 0x7f, 0x7f, 0xff},
		schema.StatusStopped:    {0x8c, 0x56, 0x4b, 0xff},
	}
	statusOrder = []schema.Status{schema.StatusOK, schema.StatusInfeasible, schema.StatusError, schema.StatusTimeout,
		schema.StatusLost, schema.StatusStopped}
	originColors = map[schema.Origin]color.RGBA{
		schema.OriginRandom: {0x99, 0x99, 0x99, 0xff},
		schema.OriginMutant: {0x1f, 0x77, 0xb4, 0xff},
		schema.OriginSeed:   {0xbc, 0xbd, 0x22, 0xff},
	}
	idleColor = color.RGBA{0xe4, 0xe4, 0xe4, 0xff} // a live slot with nothing to do
	bestColor = color.RGBA{0xd6, 0x27, 0x28, 0xff}
)

// quarantineColor marks a quarantined slot: it takes no more designs.
var quarantineColor = color.RGBA{0x20, 0x20, 0x20, 0xff}

// statusColor returns the colour of a status, grey for an unknown one.
func statusColor(s schema.Status) color.RGBA {
	if c, ok := statusColors[s]; ok {
		return c
	}
	return color.RGBA{0x44, 0x44, 0x44, 0xff}
}

// timeUnit picks seconds, minutes or hours for a span in seconds.
func timeUnit(span float64) (name string, div float64) {
	switch {
	case span > 3*3600:
		return "hours", 3600
	case span > 180:
		return "minutes", 60
	default:
		return "seconds", 1
	}
}

// Charts draws every chart of the analysis; the learning curves only
// when some design reported, the front and its hypervolume only for a run
// of several objectives, and then first: the search ranks by them, and
// the best fitness is a by-product.
func (a *Analysis) Charts() ([]Chart, error) {
	var charts []Chart
	var draws []func() (Chart, error)
	if a.pareto != nil {
		draws = append(draws, a.frontChart, a.hypervolumeChart)
	}
	draws = append(draws, a.bestByEvalChart, a.bestByTimeChart)
	if len(a.curves.drawn) > 0 {
		draws = append(draws, a.curvesChart)
	}
	draws = append(draws, a.ganttChart, a.utilizationChart, a.statusChart)
	for _, draw := range draws {
		c, err := draw()
		if err != nil {
			return nil, err
		}
		charts = append(charts, c)
	}
	return charts, nil
}

// newPlot returns a plot with the house look.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Add(plotter.NewGrid())
	return p
}

// render draws p into a PNG of w×h inches.
func render(p *plot.Plot, name, caption string, w, h vg.Length) (Chart, error) {
	c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return Chart{}, fmt.Errorf("chart %s: %w", name, err)
	}
	b := c.Image().Bounds()
	return Chart{Name: name, Title: p.Title.Text, Caption: caption, PNG: buf.Bytes(), Width: b.Dx(), Height: b.Dy()}, nil
}

// xys turns points into a plotter's data.
func xys(pts []point, xdiv float64) plotter.XYs {
	out := make(plotter.XYs, len(pts))
	for i, p := range pts {
		out[i] = plotter.XY{X: p.x / xdiv, Y: p.y}
	}
	return out
}

// noData marks an empty chart, so that it is still drawn and says why.
func noData(p *plot.Plot, why string) {
	p.Title.Text += " (" + why + ")"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
}

func (a *Analysis) bestByEvalChart() (Chart, error) {
	p := newPlot("Best fitness against evaluations\nred: best so far · dots: ok designs, grey random, blue mutant, olive seeded",
		"evaluations (designs with a terminal result)", "fitness")
	for _, o := range []schema.Origin{schema.OriginRandom, schema.OriginSeed, schema.OriginMutant} {
		pts := a.fitByEval[o]
		if len(pts) == 0 {
			continue
		}
		s, err := plotter.NewScatter(xys(pts, 1))
		if err != nil {
			return Chart{}, err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = originColors[o], vg.Points(1.6), draw.CircleGlyph{}
		p.Add(s)
	}
	if len(a.bestByEval) == 0 {
		noData(p, "no ok result yet")
	} else {
		l, err := plotter.NewLine(xys(a.bestByEval, 1))
		if err != nil {
			return Chart{}, err
		}
		l.Color, l.Width, l.StepStyle = bestColor, vg.Points(2), plotter.PostStep
		p.Add(l)
		p.X.Min = 0
	}
	caption := fmt.Sprintf("%d evaluations; each dot is one ok design by origin, the line the best so far.", a.Evaluations)
	if a.Init > 0 {
		caption += fmt.Sprintf(" The first %d results come from random designs (--init), then mutants of the pool.", a.Init)
	}
	return render(p, "best-evaluations", caption, 10*vg.Inch, 4*vg.Inch)
}

func (a *Analysis) bestByTimeChart() (Chart, error) {
	unit, div := timeUnit(a.spanSeconds)
	p := newPlot("Best fitness against time", unit+" since the first evaluation started", "best fitness")
	if len(a.bestByTime) == 0 {
		noData(p, "no ok result yet")
	} else {
		l, err := plotter.NewLine(xys(a.bestByTime, div))
		if err != nil {
			return Chart{}, err
		}
		l.Color, l.Width, l.StepStyle = bestColor, vg.Points(2), plotter.PostStep
		p.Add(l)
		p.X.Min = 0
	}
	caption := fmt.Sprintf("Best ok fitness by the time its evaluation finished, over %s.", seconds(a.spanSeconds))
	return render(p, "best-time", caption, 10*vg.Inch, 4*vg.Inch)
}

// gantt draws the evaluations of each slot as bars on its row, over a grey
// bar for the slot's known lifetime: grey with no colour is an idle slot.
type gantt struct {
	rows []slotRow
	div  float64
	end  float64
}

func (g gantt) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, math.Max(g.end/g.div, 1e-9), -0.5, float64(len(g.rows)) - 0.5
}

func (g gantt) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	h := 0.42
	if len(g.rows) > 60 {
		h = 0.5 // rows touch: a dense picture
	}
	bar := func(row int, from, to float64, col color.Color) {
		x0, x1 := tx(from/g.div), tx(to/g.div)
		if x1-x0 < 0.6 {
			x1 = x0 + 0.6 // a very short evaluation stays visible
		}
		y0, y1 := ty(float64(row)-h), ty(float64(row)+h)
		c.FillPolygon(col, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
	}
	for i, r := range g.rows {
		if r.to > r.from {
			bar(i, r.from, r.to, idleColor)
		}
	}
	for i, r := range g.rows {
		for _, s := range r.spans {
			bar(i, s.start, s.stop, statusColor(s.status))
		}
	}
	// A quarantined slot: a black bar from its quarantine to the end of
	// the chart, thinner than an evaluation so that the design it was
	// still running shows through.
	for i, r := range g.rows {
		if !math.IsNaN(r.quarantined) {
			x0, x1 := tx(r.quarantined/g.div), tx(g.end/g.div)
			y0, y1 := ty(float64(i)-h/3), ty(float64(i)+h/3)
			c.FillPolygon(quarantineColor, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		}
	}
}

// ganttLabelRows is the most rows labelled one by one.
const ganttLabelRows = 48

// ganttMaxRows is the most slots drawn a row each. Beyond it (a chart of
// 100,000 slots would give each less than a pixel) the chart aggregates:
// consecutive slots in the order of the rows, by worker, share a row of
// ganttMaxRows, and its time is cut into ganttBins bins; each cell is
// shaded by the share of its slots' live time in it that was busy, from
// grey (all idle) to green (all busy), white where none of them lived.
const (
	ganttMaxRows = 300
	ganttBins    = 400
)

// ganttHeat is the aggregated Gantt chart: busy[i][j] is row group i's
// busy share in time bin j, NaN where none of its slots lived.
type ganttHeat struct {
	busy   [][]float64
	binS   float64
	div    float64
	groups int
}

func (g ganttHeat) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, math.Max(float64(len(g.busy[0]))*g.binS/g.div, 1e-9), -0.5, float64(g.groups) - 0.5
}

func (g ganttHeat) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	for i, bins := range g.busy {
		y0, y1 := ty(float64(i)-0.5), ty(float64(i)+0.5)
		for j, share := range bins {
			if math.IsNaN(share) {
				continue
			}
			x0, x1 := tx(float64(j)*g.binS/g.div), tx(float64(j+1)*g.binS/g.div)
			c.FillPolygon(blend(idleColor, statusColors[schema.StatusOK], share),
				c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		}
	}
}

// blend is a at share 0, b at share 1.
func blend(a, b color.RGBA, share float64) color.RGBA {
	share = math.Max(0, math.Min(1, share))
	mix := func(x, y uint8) uint8 { return uint8(math.Round(float64(x) + (float64(y)-float64(x))*share)) }
	return color.RGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), 0xff}
}

// heat aggregates rows into groups of per consecutive rows and bins bins
// over span seconds.
func heat(rows []slotRow, per, bins int, span float64) ganttHeat {
	groups := (len(rows) + per - 1) / per
	binS := math.Max(span, 1e-9) / float64(bins)
	g := ganttHeat{busy: make([][]float64, groups), binS: binS, groups: groups}
	// overlap adds, to acc, the seconds of from..to in each bin.
	overlap := func(acc []float64, from, to float64) {
		if to <= from {
			return
		}
		first, last := int(from/binS), min(int(to/binS), bins-1)
		for j := max(first, 0); j <= last; j++ {
			lo, hi := math.Max(from, float64(j)*binS), math.Min(to, float64(j+1)*binS)
			if hi > lo {
				acc[j] += hi - lo
			}
		}
	}
	for i := range groups {
		live, busy := make([]float64, bins), make([]float64, bins)
		for _, r := range rows[i*per : min((i+1)*per, len(rows))] {
			overlap(live, r.from, r.to)
			for _, sp := range r.spans {
				overlap(busy, sp.start, sp.stop)
			}
		}
		g.busy[i] = make([]float64, bins)
		for j := range bins {
			g.busy[i][j] = math.NaN()
			if live[j] > 0 {
				g.busy[i][j] = math.Min(busy[j]/live[j], 1)
			}
		}
	}
	return g
}

func (a *Analysis) ganttChart() (Chart, error) {
	unit, div := timeUnit(a.spanSeconds)
	title := "Evaluations per slot, coloured by status\ngreen ok · orange infeasible · red error · purple timeout · brown stopped · grey: live and idle · black: quarantined"
	p := newPlot(title, unit+" since the first evaluation started", "")
	n := len(a.rows)
	if n == 0 {
		noData(p, "no slot known")
		return render(p, "gantt", "No worker slot is known: no result was stored and no heartbeat is kept.", 10*vg.Inch, 4*vg.Inch)
	}
	if n > ganttMaxRows {
		return a.ganttHeatChart(p, div)
	}
	p.Add(gantt{rows: a.rows, div: div, end: a.spanSeconds})
	var ticks []plot.Tick
	if n <= ganttLabelRows {
		for i, r := range a.rows {
			label := fmt.Sprintf("%s/%d", r.key.worker, r.key.slot)
			if !math.IsNaN(r.quarantined) {
				label += " quarantined"
			}
			ticks = append(ticks, plot.Tick{Value: float64(i), Label: label})
		}
		p.Y.Tick.Label.Font.Size = vg.Points(7)
	} else {
		step := int(math.Ceil(float64(n) / 20))
		for i := 0; i < n; i += step {
			ticks = append(ticks, plot.Tick{Value: float64(i), Label: fmt.Sprint(i)})
		}
		p.Y.Label.Text = fmt.Sprintf("slot (%d slots, by worker)", n)
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = -0.5, float64(n)-0.5
	p.X.Min = 0
	height := vg.Length(math.Min(math.Max(1.5+0.16*float64(n), 4), 18)) * vg.Inch
	caption := fmt.Sprintf("%d slots on %d workers, %d of them evaluated at least one design", n, a.Workers, a.SlotsUsed)
	if never := n - a.SlotsUsed; never > 0 {
		caption += fmt.Sprintf("; %d slots never got a design", never)
	}
	if a.Quarantined > 0 {
		caption += fmt.Sprintf("; %d slots quarantined after failing their designs in a row while other slots succeeded (black, from the failure that quarantined them)", a.Quarantined)
	}
	caption += ". Colour: ok green, infeasible orange, error red, timeout purple, stopped early brown. Grey: the slot was alive and had nothing to do."
	return render(p, "gantt", caption, 10*vg.Inch, height)
}

// ganttHeatChart is the Gantt chart of more than ganttMaxRows slots.
func (a *Analysis) ganttHeatChart(p *plot.Plot, div float64) (Chart, error) {
	n := len(a.rows)
	per := (n + ganttMaxRows - 1) / ganttMaxRows
	h := heat(a.rows, per, ganttBins, a.spanSeconds)
	h.div = div
	p.Title.Text = "Busy share of the slots, " + fmt.Sprint(per) + " slots a row\ngrey: live and idle · green: busy · white: no slot of the row alive"
	p.Add(h)
	var ticks []plot.Tick
	step := int(math.Ceil(float64(h.groups) / 20))
	for i := 0; i < h.groups; i += step {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: fmt.Sprint(i * per)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Label.Text = fmt.Sprintf("slot (%d slots, by worker; a row is %d slots)", n, per)
	p.Y.Min, p.Y.Max = -0.5, float64(h.groups)-0.5
	p.X.Min = 0
	caption := fmt.Sprintf("%d slots on %d workers, %d of them evaluated at least one design", n, a.Workers, a.SlotsUsed)
	if never := n - a.SlotsUsed; never > 0 {
		caption += fmt.Sprintf("; %d slots never got a design", never)
	}
	if a.Quarantined > 0 {
		caption += fmt.Sprintf("; %d slots quarantined", a.Quarantined)
	}
	caption += fmt.Sprintf(". Too many slots for a row each: each row aggregates %d consecutive slots (ordered by worker), "+
		"and each cell is %s of it, shaded by the share of those slots' live time that was busy, grey for all idle to green "+
		"for all busy. Statuses are in the status chart.", per, seconds(h.binS))
	return render(p, "gantt", caption, 10*vg.Inch, 12*vg.Inch)
}

func (a *Analysis) utilizationChart() (Chart, error) {
	unit, div := timeUnit(a.spanSeconds)
	p := newPlot("Utilization over time\ngreen: busy slots · dashed: live slots", unit+" since the first evaluation started", "slots")
	if len(a.busy) == 0 {
		noData(p, "no evaluation yet")
		return render(p, "utilization", "No evaluation has started.", 10*vg.Inch, 4*vg.Inch)
	}
	live, err := plotter.NewLine(xys(a.live, div))
	if err != nil {
		return Chart{}, err
	}
	live.Color, live.Width, live.Dashes = color.RGBA{0x55, 0x55, 0x55, 0xff}, vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(3)}
	busy, err := plotter.NewLine(xys(a.busy, div))
	if err != nil {
		return Chart{}, err
	}
	busy.Color, busy.Width = statusColors[schema.StatusOK], vg.Points(2)
	busy.FillColor = color.NRGBA{0x2c, 0xa0, 0x2c, 0x50}
	p.Add(busy, live)
	p.X.Min, p.Y.Min = 0, 0
	caption := fmt.Sprintf("Busy and live slots averaged over %s bins. Overall utilization %.1f%%: busy slot-time over live slot-time "+
		"(a slot is live from its worker's start, or its first evaluation, to its last heartbeat or evaluation).",
		seconds(a.spanSeconds/occupancyBins), 100*a.Utilization)
	return render(p, "utilization", caption, 10*vg.Inch, 4*vg.Inch)
}

func (a *Analysis) statusChart() (Chart, error) {
	p := newPlot("Status breakdown", "", "designs")
	var names []string
	for i, s := range a.statuses() {
		bc, err := plotter.NewBarChart(plotter.Values{float64(a.Counts[s])}, vg.Points(40))
		if err != nil {
			return Chart{}, err
		}
		bc.XMin, bc.Color, bc.LineStyle.Width = float64(i), statusColor(s), 0
		p.Add(bc)
		names = append(names, fmt.Sprintf("%s (%d)", s, a.Counts[s]))
	}
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, math.Max(1, 1.1*float64(maxCount(a.Counts)))
	p.Y.Tick.Marker = integerTicks{}
	caption := fmt.Sprintf("Terminal status of the %d designs evaluated (the counted result of each; %d duplicate and %d foreign results not counted).",
		a.Evaluations, a.Duplicates, a.Foreign)
	return render(p, "status", caption, 7*vg.Inch, 3.5*vg.Inch)
}

// statuses lists the known statuses, then any other one seen.
func (a *Analysis) statuses() []schema.Status {
	out := append([]schema.Status(nil), statusOrder...)
	var other []schema.Status
	for s := range a.Counts {
		if _, ok := statusColors[s]; !ok {
			other = append(other, s)
		}
	}
	slices.Sort(other)
	return append(out, other...)
}

// seconds writes a duration in seconds for people.
func seconds(s float64) string {
	return fmt.Sprint(roundDuration(s))
}

func maxCount(m map[schema.Status]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}

// integerTicks are the default ticks without fractional labels.
type integerTicks struct{}

func (integerTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Label != "" {
			if t.Value != math.Trunc(t.Value) {
				continue
			}
			t.Label = fmt.Sprint(int64(t.Value))
		}
		out = append(out, t)
	}
	return out
}
