package bench

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// sp is a span whose result does not count as ok; okSp one that does.
func sp(start, stop float64) span { return span{start: start, stop: stop} }
func okSp(start, stop, fitness float64) span {
	return span{start: start, stop: stop, ok: true, fitness: fitness}
}

// threeSpans overlap: [0,2] and [1,4] from 1 to 2, [1,4] and [3,5] from 3
// to 4; 7 slot-seconds in all.
var threeSpans = []span{okSp(0, 2, 0.5), sp(1, 4), okSp(3, 5, 0.7)}

func TestSlotSecondsAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		spans []span
		t     float64
		want  float64
	}{
		{"at the start", threeSpans, 0, 0},
		{"one running", threeSpans, 1, 1},
		{"two running, one ended", threeSpans, 2.5, 2 + 1.5},
		{"mid-way through two", threeSpans, 3.5, 2 + 2.5 + 0.5},
		{"at the end", threeSpans, 5, 7},
		{"past the end", threeSpans, 10, 7},
		{"whole run", threeSpans, math.Inf(1), 7},
		{"nothing ran", nil, 3, 0},
		{"before a late start", []span{sp(2, 3)}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := slotSecondsAt(tc.spans, tc.t); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("slotSecondsAt(%v) = %v, want %v", tc.t, got, tc.want)
			}
		})
	}
}

func TestTimeAtSlotSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		spans     []span
		want      float64
		wantT     float64
		wantShort bool
	}{
		{"nothing wanted", threeSpans, 0, 0, false},
		{"in the first span alone", threeSpans, 1, 1, false},
		{"where one slot runs again", threeSpans, 3.5, 2.5, false},
		{"where two run", threeSpans, 5, 3.5, false},
		{"exactly all", threeSpans, 7, 5, false},
		{"more than the run spent", threeSpans, 8, 5, true},
		{"across an idle gap", []span{sp(0, 1), sp(3, 4)}, 1.5, 3.5, false},
		{"two slots at once", []span{sp(0, 2), sp(0, 2)}, 2, 1, false},
		{"an empty span", []span{sp(1, 1), sp(0, 2)}, 1.5, 1.5, false},
		{"no spans", nil, 1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, short := timeAtSlotSeconds(tc.spans, tc.want)
			if math.Abs(got-tc.wantT) > 1e-12 || short != tc.wantShort {
				t.Fatalf("timeAtSlotSeconds(%v) = %v, short %v; want %v, short %v", tc.want, got, short, tc.wantT, tc.wantShort)
			}
			// The two functions agree: by that time, that much was spent.
			if spent := slotSecondsAt(tc.spans, got); !short && math.Abs(spent-tc.want) > 1e-9 {
				t.Errorf("slotSecondsAt(%v) = %v, want %v", got, spent, tc.want)
			}
		})
	}
}

func TestFirstReachedAndBestUntil(t *testing.T) {
	t.Parallel()
	// In stream order, not in order of their ends; the stopped design's
	// last report (0.95) is no fitness of a finished design.
	spans := []span{okSp(0, 6, 0.9), okSp(1, 4, 0.9), sp(0, 1), okSp(2, 3, 0.6), okSp(0, 5, 0.8)}
	spans[2].fitness = 0.95
	for _, tc := range []struct {
		name   string
		target float64
		wantT  float64
		wantOK bool
	}{
		{"the earlier end of two equal", 0.9, 4, true},
		{"equal counts", 0.8, 4, true},
		{"low target: the first to end", 0.5, 3, true},
		{"only a stopped design was that good", 0.95, math.Inf(1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got, ok := firstReached(spans, tc.target); got != tc.wantT || ok != tc.wantOK {
				t.Errorf("firstReached(%v) = %v, %v; want %v, %v", tc.target, got, ok, tc.wantT, tc.wantOK)
			}
		})
	}
	for _, tc := range []struct {
		t      float64
		want   float64
		wantOK bool
	}{{2.9, 0, false}, {3, 0.6, true}, {4.5, 0.9, true}, {math.Inf(1), 0.9, true}} {
		if got, ok := bestUntil(spans, tc.t); got != tc.want || ok != tc.wantOK {
			t.Errorf("bestUntil(%v) = %v, %v; want %v, %v", tc.t, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	const fullBest, fullSlotS = 0.8, 10
	// By its third design's end (t = 3) the rule's run has spent
	// 1 + 0.5 + 2 = 3.5 slot-seconds: 35% of the full run's 10.
	base := []span{okSp(0, 1, 0.6), sp(0, 0.5), okSp(1, 3, 0.8), okSp(3, 9, 0.85)}
	base[1].fitness = 0.99 // a stopped design's last report: it reaches nothing
	for _, tc := range []struct {
		name  string
		spans []span
		want  FidelityRule
	}{
		{"reached, ended short", base, FidelityRule{Reached: true, ReachedSlotS: 3.5, ReachedShare: 0.35,
			BestAtEqual: 0.85, Delta: 0.85 - fullBest, DesignsAtEqual: 4, Short: true, Coverage: 0.95}},
		// With a fifth span of 10 s from t = 3, two slots run from 3 on:
		// 10 slot-seconds are spent at 3 + 6.5/2 = 6.25, before the
		// 0.85 ends at 9.
		{"reached, cut at equal slot-seconds", append(slices.Clone(base), okSp(3, 13, 0.9)), FidelityRule{Reached: true,
			ReachedSlotS: 3.5, ReachedShare: 0.35, BestAtEqual: 0.8, Delta: 0, DesignsAtEqual: 5, Coverage: 1.95}},
		{"never reached", []span{okSp(0, 4, 0.7), okSp(0, 8, 0.75)}, FidelityRule{
			BestAtEqual: 0.7, Delta: 0.7 - fullBest, DesignsAtEqual: 2, Coverage: 1.2}},
		{"no ok result by then", []span{sp(0, 20), okSp(0, 30, 0.9)}, FidelityRule{Reached: true, ReachedSlotS: 50,
			ReachedShare: 5, BestAtEqual: 0, Delta: -fullBest, DesignsAtEqual: 2, Coverage: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := compare(tc.spans, fullBest, fullSlotS)
			if math.Abs(got.Delta-tc.want.Delta) < 1e-12 {
				got.Delta = tc.want.Delta
			}
			if *got != tc.want {
				t.Errorf("compare =\n %+v\nwant\n %+v", *got, tc.want)
			}
		})
	}
}

func TestSpansOf(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	res := func(status schema.Status, fitness, start, stop float64) *schema.Result {
		return &schema.Result{Run: "r", Status: status, Fitness: fitness, Start: at(start), Stop: at(stop)}
	}
	lost := &schema.Result{Run: "r", Status: schema.StatusLost}
	results := []*schema.Result{
		res(schema.StatusOK, 0.5, 1, 3),
		res(schema.StatusStopped, 0.9, 0.5, 1),
		res(schema.StatusOK, 0.7, 2, 4),    // a duplicate: held a slot, counts for nothing
		nil,                                // malformed
		res(schema.StatusOK, 0.99, 0, 10),  // another run's
		lost,                               // no worker finished it
		res(schema.StatusError, 0, 4, 4.5), // a failed attempt retried elsewhere
	}
	verdicts := []runstate.Verdict{runstate.Counted, runstate.Counted, runstate.Duplicate, runstate.Malformed,
		runstate.Foreign, runstate.Counted, runstate.Retried}
	want := []span{okSp(0.5, 2.5, 0.5), {start: 0, stop: 0.5, fitness: 0.9}, {start: 1.5, stop: 3.5, fitness: 0.7},
		{start: 3.5, stop: 4}}
	if got := spansOf(results, verdicts); !reflect.DeepEqual(got, want) {
		t.Errorf("spansOf =\n %+v\nwant\n %+v", got, want)
	}
	if got := spansOf(nil, nil); got != nil {
		t.Errorf("spansOf(none) = %v", got)
	}
}

// seedWith is a seed whose median and asha runs both have the figures
// given: share < 0 for a run that never reached the full run's best.
func seedWith(seed int, share, delta, cpu float64) *FidelitySeed {
	fr := func(rule string) *FidelityRule {
		return &FidelityRule{FidelityRun: FidelityRun{Rule: rule, CPUShare: cpu}, Reached: share >= 0,
			ReachedShare: max(share, 0), BestAtEqual: 0.8 + delta, Delta: delta}
	}
	return &FidelitySeed{Seed: seed, Full: FidelityRun{Rule: ruleNone, Best: 0.8, CPUShare: 0.1},
		Rules: []*FidelityRule{fr(schema.RuleMedian), fr(schema.RuleASHA)}}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		seeds             []*FidelitySeed
		wantShare         *float64
		wantReached       int
		wantDelta         float64
		wantReach, wantEq bool
	}{
		{"both met", []*FidelitySeed{seedWith(1, 0.1, 0.01, 0.2), seedWith(2, 0.5, -0.02, 0.3), seedWith(3, 0.3, 0, 0.2)},
			ptr(0.3), 3, 0, true, true},
		{"a seed never reached counts as infinite", []*FidelitySeed{seedWith(1, 0.1, 0, 0.2), seedWith(2, -1, 0, 0.3),
			seedWith(3, 0.34, 0, 0.2)}, ptr(0.34), 2, 0, true, true},
		{"most never reached", []*FidelitySeed{seedWith(1, 0.1, 0.01, 0.2), seedWith(2, -1, 0.01, 0.3), seedWith(3, -1, 0.01, 0.2)},
			nil, 1, 0.01, false, true},
		{"slow to reach", []*FidelitySeed{seedWith(1, 0.36, 0.01, 0.2)}, ptr(0.36), 1, 0.01, false, true},
		{"worse at equal slot-seconds", []*FidelitySeed{seedWith(1, 0.2, -0.01, 0.2), seedWith(2, 0.2, -0.02, 0.3),
			seedWith(3, 0.2, 0.03, 0.2)}, ptr(0.2), 3, -0.01, true, false},
		{"even count: mean of the middle two", []*FidelitySeed{seedWith(1, 0.2, -0.01, 0.2), seedWith(2, 0.4, 0.03, 0.3)},
			ptr(0.3), 2, 0.01, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &Fidelity{Settings: FidelitySettings{Rules: fidelityRules}, Seeds: tc.seeds}
			f.summarize([]float64{3, 1, 2})
			if len(f.Medians) != 2 || f.Medians[1].Rule != schema.RuleASHA {
				t.Fatalf("medians %+v, want median's then asha's", f.Medians)
			}
			m := f.Medians[1]
			if !reflect.DeepEqual(m.ReachedShare, tc.wantShare) || m.Reached != tc.wantReached ||
				math.Abs(m.Delta-tc.wantDelta) > 1e-12 || m.FullBest != 0.8 {
				t.Errorf("asha medians %+v (share %v), want share %v, reached %d, delta %v", m, deref(m.ReachedShare),
					deref(tc.wantShare), tc.wantReached, tc.wantDelta)
			}
			if f.ReachMet != tc.wantReach || f.EqualMet != tc.wantEq {
				t.Errorf("verdicts reach %v, equal %v; want %v, %v", f.ReachMet, f.EqualMet, tc.wantReach, tc.wantEq)
			}
			wantCPU := 0.1 // the full runs'
			for _, s := range tc.seeds {
				wantCPU = max(wantCPU, s.Rules[0].CPUShare)
			}
			if f.Decisions == nil || *f.Decisions != (Quantiles{N: 3, P50: 2, P99: 3, Max: 3}) || f.CPUShareMax != wantCPU {
				t.Errorf("decisions %+v, CPU share max %v; want 3 of them, %v", f.Decisions, f.CPUShareMax, wantCPU)
			}
		})
	}
}

func ptr(f float64) *float64 { return &f }

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestRungAnswers(t *testing.T) {
	t.Parallel()
	log := strings.Join([]string{
		`{"answer_ms":0.401,"attempt":1,"design":"f-3","level":"debug","msg":"rung decision","rung":1,"step":1,"stop":false}`,
		`{"level":"debug","msg":"rung decision","rung":3}`,                        // no time: left out
		`{"answer_ms":9,"level":"debug","msg":"result"}`,                          // another line
		`time="2026-12-01T18:57:38Z" level=debug msg="rung decision" answer_ms=3`, // text format: not read
		`{"msg":"rung decision", "answer_ms":`,                                    // cut off
		``,
		`{"answer_ms":12.5,"msg":"rung decision","stop":true}`,
	}, "\n")
	if got, want := rungAnswers(log), []float64{0.401, 12.5}; !slices.Equal(got, want) {
		t.Errorf("rungAnswers = %v, want %v", got, want)
	}
}

// The worker logs the line rungAnswers reads, with the field it reads: a
// reworded line would leave the figure empty, so it fails here instead.
func TestRungDecisionText(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "worker", "reports.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`Debug("` + rungDecisionMsg + `")`, `"answer_ms":`} {
		if !strings.Contains(string(src), want) {
			t.Errorf("worker/reports.go has no %s: the fidelity workload's decision times read that line", want)
		}
	}
}

func TestQuantiles(t *testing.T) {
	t.Parallel()
	seq := func(n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[n-1-i] = float64(i + 1) // descending: quantiles sorts
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []float64
		want *Quantiles
	}{
		{"none", nil, nil},
		{"one", []float64{5}, &Quantiles{N: 1, P50: 5, P99: 5, Max: 5}},
		{"1..100", seq(100), &Quantiles{N: 100, P50: 50, P99: 99, Max: 100}},
		{"1..200", seq(200), &Quantiles{N: 200, P50: 100, P99: 198, Max: 200}},
		{"rounded to 4 digits", []float64{1.23456, 2.34567}, &Quantiles{N: 2, P50: 1.235, P99: 2.346, Max: 2.346}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := slices.Clone(tc.in)
			if got := quantiles(in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("quantiles = %+v, want %+v", got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("quantiles sorted its input: %v", in)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	inf := math.Inf(1)
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 2, 3}, 2.5}, {[]float64{0.1, inf, inf}, inf}, {[]float64{0.1, 0.2, inf}, 0.2}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(none) = %v, want NaN", got)
	}
}

// The three runs of a seed differ in their rule and budget alone.
func TestFidelityArgs(t *testing.T) {
	t.Parallel()
	for _, smoke := range []bool{false, true} {
		s := fidelitySettings(smoke, 0)
		if want := map[bool]int{false: 5, true: 1}[smoke]; s.Seeds != want {
			t.Errorf("smoke %v: %d seeds, want %d", smoke, s.Seeds, want)
		}
		full := s.args(2, ruleNone)
		if slices.Contains(full, "--early-stop") || slices.Contains(full, "--min-step") {
			t.Errorf("full run %v: early-stopping flags (evoq run refuses --min-step without a rule)", full)
		}
		for _, rule := range fidelityRules {
			args := s.args(2, rule)
			for _, f := range []string{"--run", "--seed", "--slots", "--workers", "--wait-slots", "--sim-mean", "--sim-steps", "--evaluator"} {
				if flagValue(args, f) != flagValue(full, f) || flagValue(args, f) == "" {
					t.Errorf("%s: %s %q, full run %q", rule, f, flagValue(args, f), flagValue(full, f))
				}
			}
			budget, _ := strconv.Atoi(flagValue(args, "--budget"))
			if budget != s.Budget*s.Factor[rule] || s.Factor[rule] < 2 {
				t.Errorf("%s: budget %d, want %d x %d", rule, budget, s.Budget, s.Factor[rule])
			}
			if flagValue(args, "--early-stop") != rule || flagValue(args, "--max-step") != flagValue(args, "--sim-steps") {
				t.Errorf("%s: %v", rule, args)
			}
		}
	}
	if s := fidelitySettings(true, 3); s.Seeds != 3 {
		t.Errorf("Seeds 3 gives %d seeds", s.Seeds)
	}
}

// The fidelity and stoplatency workloads run end to end in their smoke
// form, with the evoq binary built here and a real Python: every run's
// results are read back from its store, the asha run's rung decisions
// from its workers' log, the evaluator's times from its files.
func TestFidelitySmoke(t *testing.T) {
	t.Parallel()
	bin := smokeEvoq(t)
	python := PythonDefault
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Fatalf("no python3: the stoplatency evaluator runs with a real interpreter: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Evoq: bin, Workloads: []string{"fidelity", "stoplatency"}, Smoke: true, Python: python, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Fidelity == nil || rep.Rows[1].StopLatency == nil {
		t.Fatalf("rows %+v", rep.Rows)
	}
	checkFidelitySmoke(t, rep.Rows[0])
	checkStopLatencySmoke(t, rep.Rows[1])
}

func checkFidelitySmoke(t *testing.T, row *Row) {
	t.Helper()
	f := row.Fidelity
	s := fidelitySettings(true, 0)
	if row.Met != nil || len(f.Seeds) != 1 || len(f.Seeds[0].Rules) != len(fidelityRules) || len(f.Medians) != len(fidelityRules) {
		t.Fatalf("fidelity %+v (met %v)", f, row.Met)
	}
	fs := f.Seeds[0]
	if fs.Full.OK != s.Budget || fs.Full.Stopped != 0 || fs.Full.SlotS <= 0 || fs.Full.Best <= 0 ||
		fs.FullBestShare <= 0 || fs.FullBestShare > 1 {
		t.Errorf("full run %+v, best at %v of its slot-seconds", fs.Full, fs.FullBestShare)
	}
	for _, r := range fs.Rules {
		if r.OK+r.Stopped != s.budget(r.Rule) || r.Stopped == 0 || r.Coverage <= 0 || r.SlotS <= 0 || r.DesignsAtEqual == 0 {
			t.Errorf("%s run %+v: want its whole budget evaluated, some stopped", r.Rule, r)
		}
		if r.Reached && (r.ReachedShare <= 0 || r.Best < fs.Full.Best) {
			t.Errorf("%s run reached %v at %v", r.Rule, r.Best, r.ReachedShare)
		}
	}
	if f.Decisions == nil || f.Decisions.N != f.Asked || f.Asked < s.budget(schema.RuleASHA) {
		t.Errorf("decision times %+v for %d decisions: want one per decision, at least one per design", f.Decisions, f.Asked)
	}
}

func checkStopLatencySmoke(t *testing.T, row *Row) {
	t.Helper()
	s := row.StopLatency
	want := stopLatencySettings(true)
	if row.Note != "" || s.OK+s.Stopped != want.Budget || s.Stopped == 0 || !slices.Equal(s.Rungs, []int64{1, 3, 9}) {
		t.Fatalf("stoplatency %+v, note %q", s, row.Note)
	}
	if s.Rung == nil || s.Stop == nil || s.Other == nil || s.Stop.N != s.Stopped || s.Rung.N < want.Budget || s.Rung.P50 <= 0 {
		t.Errorf("answers at rungs %+v, stop answers %+v, elsewhere %+v; want a stop answer per stopped design, a rung answer per design at least",
			s.Rung, s.Stop, s.Other)
	}
}

// Config.FidelityArgs reach the early-stopping runs after their own flags,
// so that they override them, and never the full-training run.
func TestFidelityExtraArgs(t *testing.T) {
	t.Parallel()
	s := fidelitySettings(false, 0)
	s.Args = []string{"--eta", "2", "--rung-select", "reached"}
	if full := s.args(1, ruleNone); slices.Contains(full, "--rung-select") || flagValue(full, "--eta") != "" {
		t.Errorf("full run %v: the rules' flags", full)
	}
	for _, rule := range fidelityRules {
		args := s.args(1, rule)
		if !slices.Equal(args[len(args)-4:], s.Args) || slices.Index(args, "--eta") > slices.Index(args, "--rung-select") {
			t.Errorf("%s: %v; want the extra flags last", rule, args)
		}
	}
}
