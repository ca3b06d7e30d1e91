package report

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/evoq/evoq/schema"
)

// asha is the rule of the curve runs: rungs 1, 3, 9 and 27, full
// training at 81.
var asha = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 81, Eta: 3}

// rep is a report of design seq's attempt (retry, attempt) of run "r".
func rep(seq uint64, retry, attempt int, step int64, fit float64) *schema.Report {
	return &schema.Report{V: schema.Version, Run: "r", DesignID: schema.DesignID("r", seq), Seq: seq, Retry: retry,
		Attempt: attempt, Step: step, Fitness: fit, Worker: "w1", Time: at(float64(step))}
}

// curveRun is a run of n designs under asha: design seq has a quality
// q, reports a noisy curve rising towards q at every step, and goes on past a rung
// when q is in the top third of what reaches it, so that about 2/3 stop
// at rung 1, 2/9 at rung 3 and so on, and 1 in 81 trains to step 81.
// Every 50th design fails at step 2 (error), and the last 10 are still
// training (no result).
func curveRun(n int) (in Input, stopped, completed int) {
	rng := rand.New(rand.NewPCG(1, 2))
	in = Input{RunID: "r", Run: &schema.Run{Run: "r", Phase: schema.PhaseRunning, Budget: n, EarlyStop: asha}, Generated: at(100)}
	var stream uint64
	for seq := uint64(1); seq <= uint64(n); seq++ {
		q := rng.Float64()
		reach := int64(81)
		for i, r := range asha.Rungs(81) {
			if q < 1-math.Pow(1.0/3, float64(i+1)) {
				reach = r
				break
			}
		}
		status := schema.StatusStopped
		switch {
		case seq%50 == 0:
			reach, status = 2, schema.StatusError
		case reach == 81:
			status = schema.StatusOK
		}
		fit, tau := 0.0, 2+20*rng.Float64()
		for step := int64(1); step <= reach; step++ {
			fit = 0.2*q + 0.7*q*(1-math.Exp(-float64(step)/tau)) + 0.01*rng.NormFloat64()
			stream++
			in.Reports = append(in.Reports, ReportEntry{Seq: stream, Report: rep(seq, 0, 1, step, fit)})
		}
		if seq > uint64(n-10) {
			continue // still training
		}
		e := result(seq, "w1", 0, float64(seq), float64(seq)+1, status, fit)
		e.Result.Attempt = 1
		in.Results = append(in.Results, e)
		switch status {
		case schema.StatusStopped:
			stopped++
		case schema.StatusOK:
			completed++
		}
	}
	return in, stopped, completed
}

// Each design is drawn with the attempt whose result counted, in its
// kind; a design without a counted result, or whose counted result no
// reporting attempt produced, with its last attempt, as other; another
// run's report is no curve.
func TestLearningCurvesPickTheCountedAttempt(t *testing.T) {
	t.Parallel()
	foreign := rep(5, 0, 1, 1, 9)
	foreign.Run, foreign.DesignID = "other", schema.DesignID("other", 5)
	reports := []*schema.Report{
		rep(1, 0, 1, 1, 0.1), rep(1, 0, 1, 2, 0.2), // design 1's first attempt: failed, retried
		rep(1, 1, 1, 1, 0.3), rep(1, 1, 1, 3, 0.5), rep(1, 1, 1, 2, 0.4), // its retry, out of step order
		rep(2, 0, 1, 1, 0.6), rep(2, 0, 1, 1, 0.65), // stored twice: the last counts
		rep(3, 0, 1, 1, 0.7), rep(3, 0, 2, 1, 0.8), // redelivered: attempt 2 is the last
		rep(4, 0, 1, 1, 0.9), // lost: the controller's result has attempt 3
		foreign,
	}
	var in []ReportEntry
	for i, r := range reports {
		in = append(in, ReportEntry{Seq: uint64(i + 1), Report: r})
	}
	res := func(seq uint64, retry, attempt int, st schema.Status) *schema.Result {
		r := result(seq, "w1", 0, 0, 1, st, 0).Result
		r.Design.Retry, r.Attempt = retry, attempt
		return r
	}
	counted := map[uint64]*schema.Result{
		1: res(1, 1, 1, schema.StatusOK),
		2: res(2, 0, 1, schema.StatusStopped),
		4: res(4, 0, 3, schema.StatusLost),
	}
	cs := learningCurves("r", in, counted)
	type got struct {
		seq  uint64
		kind curveKind
		pts  []point
	}
	var have []got
	for _, c := range cs.drawn {
		have = append(have, got{c.seq, c.kind, c.pts})
	}
	want := []got{
		{3, curveOther, []point{{1, 0.8}}},
		{4, curveOther, []point{{1, 0.9}}},
		{2, curveStopped, []point{{1, 0.65}}},
		{1, curveCompleted, []point{{1, 0.3}, {2, 0.4}, {3, 0.5}}},
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Errorf("curves in drawing order\n got %v\nwant %v", have, want)
	}
	if cs.total != 4 || cs.kinds[curveOther] != 2 || cs.kinds[curveStopped] != 1 || cs.kinds[curveCompleted] != 1 {
		t.Errorf("total %d, kinds %v; want 4: 2 other, 1 stopped, 1 completed", cs.total, cs.kinds)
	}
}

// Past CurvesMax the chart draws the designs that trained furthest and an
// even sample of the others, the same ones whatever order the reports
// came in.
func TestPickCurvesCapsDeterministically(t *testing.T) {
	t.Parallel()
	var all []curve
	for seq := uint64(1); seq <= 2000; seq++ {
		c := curve{seq: seq, kind: curveStopped, pts: []point{{1, 0}}}
		switch {
		case seq%100 == 0:
			c.kind, c.pts = curveCompleted, []point{{1, 0}, {81, 1}}
		case seq%10 == 0:
			c.pts = []point{{1, 0}, {9, 1}}
		}
		all = append(all, c)
	}
	drawn, furthest := pickCurves(slices.Clone(all), CurvesMax)
	shuffled := slices.Clone(all)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	again, _ := pickCurves(shuffled, CurvesMax)
	seqs := func(cs []curve) []uint64 {
		var out []uint64
		for _, c := range cs {
			out = append(out, c.seq)
		}
		return out
	}
	if !slices.Equal(seqs(drawn), seqs(again)) {
		t.Error("a different order of the same curves picks different ones")
	}
	if len(drawn) != CurvesMax || furthest != CurvesMax/2 {
		t.Fatalf("%d drawn, %d for how far they trained; want %d, %d", len(drawn), furthest, CurvesMax, CurvesMax/2)
	}
	n := map[float64]int{}
	for _, c := range drawn {
		n[c.reach()]++
	}
	// The furthest half is the 20 completed and 130 of the 180 stopped at
	// rung 9; the sample of the other 1850 is mostly of those stopped at
	// rung 1, as they are.
	if n[81] != 20 || n[9] < 130 || n[1] < 140 {
		t.Errorf("drawn by reach %v, want 20 at 81, at least 130 at 9 and 140 at 1", n)
	}
	if last := drawn[len(drawn)-1]; last.kind != curveCompleted {
		t.Errorf("last drawn is %v, want a completed curve on top", last.kind)
	}
	if few, _ := pickCurves(all[:10], CurvesMax); len(few) != 10 {
		t.Errorf("%d of 10 curves drawn, want all", len(few))
	}
}

// The curves chart of a run with thousands of reporting designs: drawn
// after the best-fitness charts, capped at CurvesMax with the caption
// saying so, an × for each stopped design drawn, the rungs on a
// logarithmic step axis, and a PNG that stays small.
func TestCurvesChart(t *testing.T) {
	t.Parallel()
	in, stopped, completed := curveRun(2000)
	a := Analyze(in)
	if a.Counts[schema.StatusStopped] != stopped || a.Counts[schema.StatusOK] != completed || a.Reports != len(in.Reports) {
		t.Fatalf("counts %v, %d reports; want %d stopped, %d ok, %d reports", a.Counts, a.Reports, stopped, completed, len(in.Reports))
	}
	charts, err := a.Charts()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range charts {
		names = append(names, c.Name)
	}
	if want := []string{"best-evaluations", "best-time", "curves", "gantt", "utilization", "status"}; !slices.Equal(names, want) {
		t.Fatalf("charts %v, want %v", names, want)
	}
	c := charts[2]
	img, err := png.Decode(bytes.NewReader(c.PNG))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != c.Width || c.Width < 900 {
		t.Errorf("curves chart %v", img.Bounds())
	}
	if len(c.PNG) > 400<<10 {
		t.Errorf("curves chart %d KiB, want at most 400", len(c.PNG)>>10)
	}
	for _, s := range []string{"The intermediate reports of 2000 designs", fmt.Sprintf("%d stopped early", stopped),
		fmt.Sprintf("%d trained to the end", completed), "the 150 that trained furthest",
		"rungs at steps 1, 3, 9, 27; full training at step 81", "logarithmic"} {
		if !strings.Contains(c.Caption, s) {
			t.Errorf("caption lacks %q:\n%s", s, c.Caption)
		}
	}
	marks := stoppedMarks(a.curves.drawn)
	var drawnStopped int
	for _, cv := range a.curves.drawn {
		if cv.kind == curveStopped {
			last := cv.pts[len(cv.pts)-1]
			if !slices.Contains(marks, last) {
				t.Errorf("stopped design %d has no × at its last report %v", cv.seq, last)
			}
			drawnStopped++
		}
	}
	if len(marks) != drawnStopped || drawnStopped < 100 {
		t.Errorf("%d × marks for %d stopped designs drawn; want one each, and over 100 drawn", len(marks), drawnStopped)
	}
	if want := fmt.Sprintf("300 of the 2000 curves are drawn (%d stopped)", drawnStopped); !strings.Contains(c.Caption, want) {
		t.Errorf("caption lacks %q:\n%s", want, c.Caption)
	}
	if f := a.Curves; f != (CurveFigures{Designs: 2000, Completed: completed, Stopped: stopped, Other: 2000 - completed - stopped,
		Drawn: 300, Marks: drawnStopped}) {
		t.Errorf("curve figures %+v", f)
	}
	if n := stoppedPixels(c); n < 10*drawnStopped/2 {
		t.Errorf("%d pixels in the stopped colour for %d × marks: the marks are not drawn", n, drawnStopped)
	}
}

// stoppedPixels counts the chart's pixels in the stopped colour at full
// strength: the × marks; the semi-transparent lines of the same colour
// come out lighter.
func stoppedPixels(c Chart) int {
	img, err := png.Decode(bytes.NewReader(c.PNG))
	if err != nil {
		return 0
	}
	want := statusColor(schema.StatusStopped)
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r>>8, want.R) && near(g>>8, want.G) && near(bl>>8, want.B) {
				n++
			}
		}
	}
	return n
}

func near(v uint32, want uint8) bool { return math.Abs(float64(v)-float64(want)) <= 12 }

// A run without reports draws no curves chart, and says nothing of them.
func TestNoReportsNoCurves(t *testing.T) {
	t.Parallel()
	in, _, _ := curveRun(30)
	in.Reports = nil
	a := Analyze(in)
	charts, err := a.Charts()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range charts {
		if c.Name == "curves" {
			t.Error("a curves chart without reports")
		}
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, a, charts, t0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "intermediate reports") || !strings.Contains(page.String(), "early stopping") {
		t.Errorf("page without reports: want the rule, no reports row")
	}
}

func TestDescribeEarlyStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		e    *schema.EarlyStop
		want string
	}{
		{"none", nil, "none"},
		{"bounded", asha, "asha, eta 3, rungs at steps 1, 3, 9, 27; full training at step 81"},
		{"unbounded", &schema.EarlyStop{Rule: schema.RuleMedian, MinStep: 5, Eta: 2}, "median, eta 2, rungs at steps 5, 10, 20, 40, 80, 160, …"},
		{"one rung", &schema.EarlyStop{Rule: schema.RuleMedian, MinStep: 5, MaxStep: 6, Eta: 2}, "median, eta 2, rungs at steps 5; full training at step 6"},
		{"brackets", &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 3, MaxStep: 30, Eta: 3, Brackets: 4},
			"asha, eta 3, rungs at steps 3, 9, 27; full training at step 30; 4 brackets (a design's is its sequence number modulo 4), first rungs 3, 9, 27, none"},
	} {
		if got := DescribeEarlyStop(tc.e); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
