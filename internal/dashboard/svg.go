package dashboard

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/evoq/evoq/runstate"
)

// The charts are SVG written here rather than drawn by a JavaScript chart
// library: the page must work on a login node with no internet (no CDN),
// a vendored library would be the largest and least reviewed part of the
// binary's page, and drawing once on the server means a snapshot is
// encoded once for every open page. The page's script only swaps the SVG
// in.

const (
	chartW, chartH = 520, 240
	padL, padR     = 62, 14
	padT, padB     = 26, 36
	maxPoints      = 600 // points per series drawn; longer ones are thinned
)

// Colours, as the report's (the slot strip's are the page's, in app.js).
var (
	colLine = "#1f77b4"
	colStop = "#d62728"
)

// scale maps data ranges to the plot area.
type scale struct{ x0, x1, y0, y1 float64 }

func scaleOf(series [][]point) scale {
	s := scale{math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)}
	for _, ps := range series {
		for _, p := range ps {
			if math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
				continue
			}
			s.x0, s.x1 = math.Min(s.x0, p.X), math.Max(s.x1, p.X)
			s.y0, s.y1 = math.Min(s.y0, p.Y), math.Max(s.y1, p.Y)
		}
	}
	if math.IsInf(s.x0, 1) {
		return scale{0, 1, 0, 1}
	}
	if s.x1 == s.x0 {
		s.x1 = s.x0 + 1
	}
	if s.y1 == s.y0 {
		s.y0, s.y1 = s.y0-0.5, s.y1+0.5
	}
	return s
}

func (s scale) px(x float64) float64 { return padL + (x-s.x0)/(s.x1-s.x0)*(chartW-padL-padR) }
func (s scale) py(y float64) float64 { return chartH - padB - (y-s.y0)/(s.y1-s.y0)*(chartH-padT-padB) }

// thin keeps at most maxPoints of ps, evenly, with the last.
func thin(ps []point) []point {
	if len(ps) <= maxPoints {
		return ps
	}
	out := make([]point, 0, maxPoints+1)
	step := float64(len(ps)) / maxPoints
	for i := 0.0; int(i) < len(ps); i += step {
		out = append(out, ps[int(i)])
	}
	return append(out, ps[len(ps)-1])
}

// frame writes the chart's title, axes and tick labels.
func frame(b *strings.Builder, title, xlabel, ylabel string, s scale) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" class="chart" role="img"><title>%s</title>`, chartW, chartH, html.EscapeString(title))
	fmt.Fprintf(b, `<text x="%d" y="16" class="t">%s</text>`, padL, html.EscapeString(title))
	fmt.Fprintf(b, `<path d="M%d %d V%d H%d" class="ax"/>`, padL, padT, chartH-padB, chartW-padR)
	for i := 0; i <= 4; i++ {
		x := s.x0 + float64(i)/4*(s.x1-s.x0)
		y := s.y0 + float64(i)/4*(s.y1-s.y0)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" class="tx">%s</text>`, s.px(x), chartH-padB+14, num(x))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" class="ty">%s</text>`, padL-4, s.py(y)+4, num(y))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" class="tx">%s</text>`, (chartW+padL)/2, chartH-4, html.EscapeString(xlabel))
	fmt.Fprintf(b, `<text x="12" y="%d" class="tl" transform="rotate(-90 12 %d)">%s</text>`, chartH/2, chartH/2, html.EscapeString(ylabel))
}

func num(x float64) string {
	if x != 0 && (math.Abs(x) >= 1e5 || math.Abs(x) < 1e-3) {
		return fmt.Sprintf("%.2g", x)
	}
	return fmt.Sprintf("%.4g", x)
}

func polyline(b *strings.Builder, s scale, ps []point, colour string, dashed bool) {
	if len(ps) == 0 {
		return
	}
	b.WriteString(`<polyline fill="none" stroke="` + colour + `" stroke-width="1.5"`)
	if dashed {
		b.WriteString(` stroke-dasharray="4 3" opacity="0.7"`)
	}
	b.WriteString(` points="`)
	for _, p := range thin(ps) {
		if !math.IsNaN(p.Y) && !math.IsInf(p.Y, 0) {
			fmt.Fprintf(b, "%.1f,%.1f ", s.px(p.X), s.py(p.Y))
		}
	}
	b.WriteString(`"/>`)
}

// lineChart draws series as lines; an empty chart says so.
func lineChart(title, xlabel, ylabel string, series [][]point, _ []bool) string {
	var b strings.Builder
	s := scaleOf(series)
	frame(&b, title, xlabel, ylabel, s)
	empty := true
	for _, ps := range series {
		polyline(&b, s, ps, colLine, false)
		empty = empty && len(ps) == 0
	}
	if empty {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="tx">no evaluation counted yet</text>`, chartW/2, chartH/2)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// curvesSVG draws learning curves: a stopped design's dashed in red, a
// dot where a rung decided.
func curvesSVG(lines [][]point, dashed []bool, marks []point) string {
	var b strings.Builder
	s := scaleOf(append(lines, marks))
	frame(&b, fmt.Sprintf("learning curves (the %d most recent designs; dashed: stopped)", len(lines)), "step", "fitness", s)
	for i, ps := range lines {
		c := colLine
		if dashed[i] {
			c = colStop
		}
		polyline(&b, s, ps, c, dashed[i])
	}
	for _, p := range marks {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="#555"/>`, s.px(p.X), s.py(p.Y))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// frontChart draws the first front on the first two objectives.
func frontChart(front []runstate.Member, o runstate.Objectives) string {
	var ps []point
	for _, m := range front {
		if vs := o.Values(m.Point); len(vs) >= 2 {
			ps = append(ps, point{vs[0], vs[1]})
		}
	}
	var b strings.Builder
	s := scaleOf([][]point{ps})
	names := o.Names()
	xl, yl := "objective 1", "objective 2"
	if len(names) >= 2 {
		xl, yl = names[0], names[1]
	}
	frame(&b, fmt.Sprintf("the pool's first front (%d designs)", len(ps)), xl, yl, s)
	for _, p := range ps {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`, s.px(p.X), s.py(p.Y), colLine)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// stripCells writes the slots' states, per slots to a cell, as one
// character a cell, which the page draws as a strip of squares: at
// 10,000 slots an SVG of 400 cells would be most of each snapshot, sent
// to every page every second. A cell is q when one of its slots is
// quarantined, g when every slot's worker is gone, b when all are busy, i
// when none is, and 1 to 9 when that many tenths of them (rounded, at
// least one) are busy.
func stripCells(states []slotState, per int) string {
	cells := (len(states) + per - 1) / per
	var b strings.Builder
	b.Grow(cells)
	for c := range cells {
		group := states[c*per : min(len(states), (c+1)*per)]
		busy, q, gone := 0, 0, 0
		for _, st := range group {
			switch st {
			case slotBusy:
				busy++
			case slotQuarantined:
				q++
			case slotGone:
				gone++
			}
		}
		switch {
		case q > 0:
			b.WriteByte('q')
		case gone == len(group):
			b.WriteByte('g')
		case busy == len(group):
			b.WriteByte('b')
		case busy == 0:
			b.WriteByte('i')
		default:
			tenths := min(9, max(1, int(math.Round(10*float64(busy)/float64(len(group))))))
			b.WriteByte(byte('0' + tenths))
		}
	}
	return b.String()
}
