package evaluators

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/evoq/evoq/worker"
)

// curveSpace is a small search space of the kind evoq runs: the genomes
// it samples are how the curves are measured, not hand-picked ones.
const curveSpace = `
name: curves
params:
  lr: {type: float, min: 0.0001, max: 0.1, log: true}
  width: {type: int, min: 16, max: 512}
  depth: {type: int, min: 1, max: 8}
  dropout: {type: float, min: 0, max: 0.5}
  activation: {type: choice, values: [relu, tanh]}
`

// curveGenomes samples n genomes from curveSpace with a fixed seed.
func curveGenomes(t *testing.T, n int) []map[string]any {
	t.Helper()
	s, err := space.Parse([]byte(curveSpace))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 11))
	gs := make([]map[string]any, n)
	for i := range gs {
		gs[i] = s.Random(r)
	}
	return gs
}

// recorder is a worker.Reporter that keeps every report, says stop at
// step stopAt, cancels at step cancelAt, and at step blockAt waits until
// the evaluation's ctx is done before it answers go on.
type recorder struct {
	stopAt, cancelAt, blockAt int64
	cancel                    context.CancelFunc
	got                       []worker.Progress
}

func (r *recorder) Report(ctx context.Context, p worker.Progress) (bool, string) {
	r.got = append(r.got, p)
	switch p.Step {
	case r.cancelAt:
		r.cancel()
	case r.blockAt:
		<-ctx.Done()
	}
	return p.Step == r.stopAt, "below the rung's cut"
}

func (r *recorder) steps() []int64 {
	s := make([]int64, len(r.got))
	for i, p := range r.got {
		s[i] = p.Step
	}
	return s
}

func stepsUpTo(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = int64(i + 1)
	}
	return s
}

func TestSimCurveDeterministic(t *testing.T) {
	t.Parallel()
	gs := curveGenomes(t, 200)
	for _, g := range gs {
		want := SimCurve(g, 27)
		for range 5 { // map iteration order varies between calls
			if got := SimCurve(g, 27); !slices.Equal(got, want) {
				t.Fatalf("%v: curve %v then %v", g, want, got)
			}
		}
	}
	// A genome decoded from JSON has float64 where the space has int64;
	// GenomeScore treats them alike, and so must the curve's speed and noise.
	asFloats := map[string]any{}
	for k, v := range gs[0] {
		if x, ok := v.(int64); ok {
			v = float64(x)
		}
		asFloats[k] = v
	}
	if !slices.Equal(SimCurve(gs[0], 27), SimCurve(asFloats, 27)) {
		t.Errorf("%v: an int64 and the equal float64 give different curves", gs[0])
	}
	if slices.Equal(SimCurve(gs[0], 27), SimCurve(gs[1], 27)) {
		t.Error("two genomes share one curve")
	}
}

func TestSimCurveIgnoresDesign(t *testing.T) {
	t.Parallel()
	// Different runs, design IDs and attempts, one genome: the reports must
	// be the same, or full and early-stopped runs would not be comparable.
	g := map[string]any{"lr": 0.01, "width": int64(64)}
	sim := Sim{Mean: time.Millisecond, Curve: true, Steps: 9}
	var first []worker.Progress
	for i, task := range []worker.Task{
		{Design: newDesign(t, "curveid", 1, g), Attempt: 1},
		{Design: newDesign(t, "curveid", 2, g), Attempt: 1},
		{Design: newDesign(t, "othercurve", 40, g), Attempt: 3, Slot: 2, Worker: "w9"},
	} {
		rec := &recorder{}
		task.Reports = rec
		if out := sim.Evaluate(context.Background(), task); out.Status != schema.StatusOK {
			t.Fatalf("%s: %+v", task.Design.ID, out)
		}
		if i == 0 {
			first = rec.got
			continue
		}
		if !slices.EqualFunc(rec.got, first, func(a, b worker.Progress) bool {
			return a.Step == b.Step && a.Fitness == b.Fitness
		}) {
			t.Errorf("%s attempt %d reported %v, design 1 %v", task.Design.ID, task.Attempt, rec.got, first)
		}
	}
}

func TestSimCurveEndsAtFinal(t *testing.T) {
	t.Parallel()
	gs := append(curveGenomes(t, 300), nil, map[string]any{}, map[string]any{"act": "relu"})
	for _, steps := range []int{1, 2, 3, 27, 100} {
		for _, g := range gs {
			c := SimCurve(g, steps)
			if len(c) != steps {
				t.Fatalf("%d steps gave %d values", steps, len(c))
			}
			if last := c[steps-1]; last != GenomeScore(g) {
				t.Fatalf("%v over %d steps ends at %v, want GenomeScore %v", g, steps, last, GenomeScore(g))
			}
			for s, v := range c {
				if v < 0 || v >= 1 || math.IsNaN(v) {
					t.Fatalf("%v: step %d value %v outside [0, 1)", g, s+1, v)
				}
			}
		}
	}
	for _, steps := range []int{0, -1} {
		if c := SimCurve(gs[0], steps); c != nil {
			t.Errorf("%d steps gave %v, want nil", steps, c)
		}
	}
}

func TestSimCurveRises(t *testing.T) {
	t.Parallel()
	const steps = 27
	gs := curveGenomes(t, 500)
	rose := 0
	mean := make([]float64, steps)
	for _, g := range gs {
		c := SimCurve(g, steps)
		if c[steps-1] >= c[0] {
			rose++
		}
		for s, v := range c {
			mean[s] += v / float64(len(gs))
		}
	}
	share := float64(rose) / float64(len(gs))
	t.Logf("%.3f of %d curves end at or above their first value; mean at steps 1, 3, 9, 27: %.3f %.3f %.3f %.3f",
		share, len(gs), mean[0], mean[2], mean[8], mean[26])
	if share < 0.95 {
		t.Errorf("only %.3f of curves end at or above their first value, want 0.95 or more", share)
	}
	rungs := []int{1, 3, 9, 27}
	for i := 1; i < len(rungs); i++ {
		if a, b := rungs[i-1], rungs[i]; mean[b-1] <= mean[a-1] {
			t.Errorf("mean curve falls from step %d (%.3f) to %d (%.3f)", a, mean[a-1], b, mean[b-1])
		}
	}
}

// discordance is the share of pairs of designs whose order by a differs
// from their order by b.
func discordance(a, b []float64) float64 {
	crossed, pairs := 0, 0
	for i := range a {
		for j := i + 1; j < len(a); j++ {
			pairs++
			if (a[i]-a[j])*(b[i]-b[j]) < 0 {
				crossed++
			}
		}
	}
	return float64(crossed) / float64(pairs)
}

func TestSimCurvesCross(t *testing.T) {
	t.Parallel()
	// The workload is only honest if early stopping can be wrong on it:
	// early ranks must differ from final ones in a real share of pairs,
	// and less so the longer designs have trained. The band is wide on
	// purpose: it rules out curves that never cross (0) and early values
	// that say nothing (near 0.5), not a figure tuned to a stopping rule.
	const steps = 27
	gs := curveGenomes(t, 500)
	at := map[int][]float64{1: nil, 3: nil, 9: nil, steps: nil}
	for _, g := range gs {
		c := SimCurve(g, steps)
		for s := range at {
			at[s] = append(at[s], c[s-1])
		}
	}
	d1, d3, d9 := discordance(at[1], at[steps]), discordance(at[3], at[steps]), discordance(at[9], at[steps])
	late := lateBloomers(at[1], at[steps])
	t.Logf("pairs ordered differently than at step %d: %.3f at step 1, %.3f at 3, %.3f at 9; "+
		"%.2f of the final top tenth were in the bottom half at step 1", steps, d1, d3, d9, late)
	for _, tc := range []struct {
		step   int
		got    float64
		lo, hi float64
	}{{1, d1, 0.05, 0.45}, {3, d3, 0.05, 0.45}} {
		if tc.got < tc.lo || tc.got > tc.hi {
			t.Errorf("step %d: %.3f of pairs cross before the end, want %.2f..%.2f", tc.step, tc.got, tc.lo, tc.hi)
		}
	}
	if !(d1 > d3 && d3 > d9 && d9 > 0) {
		t.Errorf("crossing does not shrink with training: %.3f, %.3f, %.3f at steps 1, 3, 9", d1, d3, d9)
	}
	if late == 0 {
		t.Error("no design of the final top tenth was a slow starter: early stopping could never be wrong")
	}
}

// lateBloomers is the share of the top tenth by final that were below
// the median by early.
func lateBloomers(early, final []float64) float64 {
	median := slices.Clone(early)
	slices.Sort(median)
	cut := slices.Clone(final)
	slices.Sort(cut)
	top, late := 0, 0
	for i := range final {
		if final[i] >= cut[len(cut)*9/10] {
			top++
			if early[i] < median[len(median)/2] {
				late++
			}
		}
	}
	return float64(late) / float64(top)
}

func TestSimCurveEvaluate(t *testing.T) {
	t.Parallel()
	g := map[string]any{"lr": 0.02, "width": int64(128), "depth": int64(3)}
	for _, tc := range []struct {
		name    string
		sim     Sim
		rec     recorder
		status  schema.Status
		reports int
	}{
		{"full training", Sim{Mean: 30 * time.Millisecond, Curve: true, Steps: 5}, recorder{}, schema.StatusOK, 5},
		{"default steps", Sim{Mean: 30 * time.Millisecond, Curve: true}, recorder{}, schema.StatusOK, SimStepsDefault},
		{"stopped at 3", Sim{Mean: 30 * time.Millisecond, Curve: true, Steps: 9}, recorder{stopAt: 3}, schema.StatusStopped, 3},
		{"stopped at the last step", Sim{Mean: 30 * time.Millisecond, Curve: true, Steps: 4}, recorder{stopAt: 4}, schema.StatusStopped, 4},
		{"cancelled after 2", Sim{Mean: 30 * time.Millisecond, Curve: true, Steps: 9}, recorder{cancelAt: 2}, schema.StatusError, 2},
		{"infeasible", Sim{Mean: 30 * time.Millisecond, Fail: 1, Curve: true}, recorder{}, schema.StatusInfeasible, 0},
		{"negative steps", Sim{Mean: 30 * time.Millisecond, Curve: true, Steps: -1}, recorder{}, schema.StatusError, 0},
		{"curve off", Sim{Mean: 30 * time.Millisecond, Steps: 9}, recorder{}, schema.StatusOK, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := tc.rec
			rec.cancel = cancel
			task := worker.Task{Design: newDesign(t, "curveeval", 1, g), Attempt: 1, Reports: &rec}
			out := tc.sim.Evaluate(ctx, task)
			if out.Status != tc.status {
				t.Fatalf("got %+v, want %s", out, tc.status)
			}
			if want := stepsUpTo(tc.reports); !slices.Equal(rec.steps(), want) {
				t.Fatalf("reported steps %v, want %v", rec.steps(), want)
			}
			checkCurveOutcome(t, tc.sim, g, rec.got, out)
		})
	}
}

// checkCurveOutcome checks the reports against SimCurve and the outcome
// against the last report.
func checkCurveOutcome(t *testing.T, sim Sim, g map[string]any, got []worker.Progress, out worker.Outcome) {
	t.Helper()
	steps := sim.Steps
	if steps == 0 {
		steps = SimStepsDefault
	}
	curve := SimCurve(g, steps)
	for _, p := range got {
		if p.Fitness != curve[p.Step-1] || p.Metrics["loss"] != 1-p.Fitness {
			t.Errorf("step %d reported %v %v, want fitness %v", p.Step, p.Fitness, p.Metrics, curve[p.Step-1])
		}
	}
	switch out.Status {
	case schema.StatusOK:
		if out.Fitness != GenomeScore(g) {
			t.Errorf("fitness %v, want GenomeScore %v", out.Fitness, GenomeScore(g))
		}
		if len(got) > 0 && out.Fitness != got[len(got)-1].Fitness {
			t.Errorf("fitness %v, but the last report said %v", out.Fitness, got[len(got)-1].Fitness)
		}
	case schema.StatusStopped:
		last := got[len(got)-1]
		if out.Fitness != last.Fitness || out.Metrics["stopped_at"] != last.Step || out.Error != "below the rung's cut" {
			t.Errorf("got %+v, want the fitness %v of step %d and the reason", out, last.Fitness, last.Step)
		}
	default:
		if out.Fitness != schema.InfeasibleFitness {
			t.Errorf("fitness %v, want InfeasibleFitness", out.Fitness)
		}
	}
}

func TestSimCurveDeadline(t *testing.T) {
	t.Parallel()
	// A deadline that passes while a step trains, and one that passes
	// while the run's rule makes up its mind, both end in a timeout, with
	// no report after it.
	g := map[string]any{"lr": 0.02}
	for _, tc := range []struct {
		name    string
		mean    time.Duration
		timeout time.Duration
		blockAt int64
		reports int
	}{
		{"during a step", time.Hour, 50 * time.Millisecond, 0, 0},
		// Mean 0 makes every step take no time; the timeout is long only
		// so that step 1 has reached its report well before it.
		{"during a report", 0, time.Second, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			rec := &recorder{blockAt: tc.blockAt}
			task := worker.Task{Design: newDesign(t, "curvedl", 1, g), Attempt: 1, Reports: rec}
			out := Sim{Mean: tc.mean, Curve: true, Steps: 9}.Evaluate(ctx, task)
			if out.Status != schema.StatusTimeout {
				t.Errorf("got %+v, want a timeout", out)
			}
			if want := stepsUpTo(tc.reports); !slices.Equal(rec.steps(), want) {
				t.Errorf("reported steps %v, want %v", rec.steps(), want)
			}
		})
	}
}
