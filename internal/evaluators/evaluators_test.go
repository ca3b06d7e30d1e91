package evaluators

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/mlp"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// newDesign makes a valid design of run.
func newDesign(t testing.TB, run string, seq uint64, genome map[string]any) *schema.Design {
	t.Helper()
	d := &schema.Design{Run: run, ID: schema.DesignID(run, seq), Seq: seq, Genome: genome,
		Origin: schema.OriginRandom, Created: time.Now()}
	if err := d.Validate(); err != nil {
		t.Fatalf("test design: %v", err)
	}
	return d
}

// simDesigns makes n designs of run with a numeric genome each.
func simDesigns(t *testing.T, run string, n int) []*schema.Design {
	t.Helper()
	ds := make([]*schema.Design, n)
	for i := range ds {
		ds[i] = newDesign(t, run, uint64(i+1), map[string]any{"a": float64(i) / 10, "b": int64(i % 7)})
	}
	return ds
}

func TestSimDeterministic(t *testing.T) {
	t.Parallel()
	sim := Sim{Mean: time.Millisecond, Fail: 0.5}
	ds := simDesigns(t, "simdet", 40)
	attemptsDiffer := false
	for _, d := range ds {
		first := sim.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 1})
		again := sim.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 1, Slot: 3, Worker: "other"})
		if first.Status != again.Status || first.Fitness != again.Fitness {
			t.Fatalf("%s: %+v then %+v", d.ID, first, again)
		}
		if first.Status == schema.StatusOK && first.Fitness != GenomeScore(d.Genome) {
			t.Errorf("%s: fitness %v, want GenomeScore %v", d.ID, first.Fitness, GenomeScore(d.Genome))
		}
		retry := sim.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 2})
		attemptsDiffer = attemptsDiffer || retry.Status != first.Status
	}
	if !attemptsDiffer {
		t.Error("the attempt does not change any draw: a retried design always fails the same way")
	}
}

func TestSimInfeasibleShare(t *testing.T) {
	t.Parallel()
	// A cancelled context makes every feasible design return at once, as an
	// error; infeasible ones are decided before any waiting.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ds := simDesigns(t, "simfail", 2000)
	for _, tc := range []struct {
		name string
		fail float64
	}{{"never", 0}, {"30 percent", 0.3}, {"70 percent", 0.7}, {"always", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := Sim{Mean: time.Hour, Fail: tc.fail}
			infeasible := 0
			for _, d := range ds {
				switch out := sim.Evaluate(ctx, worker.Task{Design: d, Attempt: 1}); out.Status {
				case schema.StatusInfeasible:
					infeasible++
					if out.Fitness != schema.InfeasibleFitness {
						t.Fatalf("infeasible with fitness %v", out.Fitness)
					}
				case schema.StatusError:
				default:
					t.Fatalf("%s: got %+v with a cancelled context", d.ID, out)
				}
			}
			share := float64(infeasible) / float64(len(ds))
			if math.Abs(share-tc.fail) > 0.03 {
				t.Errorf("infeasible share %.3f, want %.2f ± 0.03", share, tc.fail)
			}
		})
	}
}

func TestSimMeanDuration(t *testing.T) {
	t.Parallel()
	// The drawn times, not the wall clock: these machines are shared, and
	// a timer only ever fires late. Evaluate is checked to wait at least
	// its draw, which no load can break.
	const mean = 40 * time.Millisecond
	sim := Sim{Mean: mean}
	ds := simDesigns(t, "simmean", 300)
	var total time.Duration
	for _, d := range ds {
		took, infeasible := sim.Draw(worker.Task{Design: d, Attempt: 1})
		if infeasible {
			t.Fatalf("%s drawn infeasible with Fail 0", d.ID)
		}
		total += took
	}
	got := total / time.Duration(len(ds))
	t.Logf("mean drawn evaluation time %v over %d designs", got, len(ds))
	if got < mean*4/5 || got > mean*6/5 {
		t.Errorf("mean drawn evaluation time %v, want %v ± 20%%", got, mean)
	}
	task := worker.Task{Design: ds[0], Attempt: 1}
	want, _ := sim.Draw(task)
	start := time.Now()
	if out := sim.Evaluate(context.Background(), task); out.Status != schema.StatusOK {
		t.Fatalf("%s: %+v", ds[0].ID, out)
	}
	if took := time.Since(start); took < want {
		t.Errorf("Evaluate took %v, less than its draw %v", took, want)
	}
}

func TestSimHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d := newDesign(t, "simctx", 1, map[string]any{"a": 1.0})
	start := time.Now()
	out := Sim{Mean: time.Hour}.Evaluate(ctx, worker.Task{Design: d, Attempt: 1})
	if out.Status != schema.StatusTimeout {
		t.Errorf("got %+v, want a timeout", out)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("returned %v after its deadline", took)
	}
}

func TestGenomeScore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		g    map[string]any
	}{
		{"nil", nil},
		{"empty", map[string]any{}},
		{"one float", map[string]any{"lr": 0.01}},
		{"every numeric kind", map[string]any{"a": int64(-3), "b": uint64(7), "c": 2.5, "d": 4}},
		{"non-numeric only", map[string]any{"act": "relu", "layers": []any{map[string]any{"units": 8}}}},
		{"mixed", map[string]any{"act": "tanh", "width": int64(64), "lr": 0.3}},
		{"huge values", map[string]any{"x": 1e300, "y": -1e300, "z": float64(math.MaxInt64)}},
		{"many keys", manyKeys(200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := GenomeScore(tc.g)
			if s < 0 || s >= 1 || math.IsNaN(s) {
				t.Fatalf("score %v outside [0, 1)", s)
			}
			for range 20 { // map iteration order varies between calls
				if again := GenomeScore(tc.g); again != s {
					t.Fatalf("score %v then %v", s, again)
				}
			}
		})
	}
}

func manyKeys(n int) map[string]any {
	g := make(map[string]any, n)
	for i := range n {
		g[string(rune('A'+i%26))+strings.Repeat("k", i/26)] = float64(i)
	}
	return g
}

func TestGenomeScoreSmooth(t *testing.T) {
	t.Parallel()
	base := map[string]any{"lr": 0.5, "width": 10.0}
	near := map[string]any{"lr": 0.5 + 1e-6, "width": 10.0}
	far := map[string]any{"lr": 0.5, "width": 13.0}
	d := math.Abs(GenomeScore(base) - GenomeScore(near))
	if d > 1e-5 {
		t.Errorf("a 1e-6 change moved the score by %v", d)
	}
	if GenomeScore(base) == GenomeScore(far) {
		t.Error("different genomes score the same")
	}
	if GenomeScore(map[string]any{"w": int64(3)}) != GenomeScore(map[string]any{"w": 3.0}) {
		t.Error("an integer and the equal float score differently")
	}
}

func TestGenomeScoreNonFinite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    float64
	}{{"NaN", math.NaN()}, {"+Inf", math.Inf(1)}, {"-Inf", math.Inf(-1)}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if s := GenomeScore(map[string]any{"x": tc.v, "y": 1.0}); s < 0 || s >= 1 || math.IsNaN(s) {
				t.Errorf("score %v outside [0, 1)", s)
			}
		})
	}
}

func TestNoop(t *testing.T) {
	t.Parallel()
	out := Noop{}.Evaluate(context.Background(), worker.Task{Design: newDesign(t, "noop", 1, map[string]any{})})
	if out.Status != schema.StatusOK || out.Fitness != 0 || out.Error != "" {
		t.Errorf("got %+v", out)
	}
	if (Noop{}).Name() != "noop" || (Sim{}).Name() != "sim" || (MLP{}).Name() != "mlp" {
		t.Error("evaluator names changed; configs refer to them")
	}
}

// mlpGenome is an MLP genome whose hidden layers all share one activation.
func mlpGenome(units []int, epochs int) map[string]any {
	layers := make([]any, len(units))
	for i, u := range units {
		layers[i] = map[string]any{"units": int64(u), "activation": "tanh"}
	}
	return map[string]any{"layers": layers, "lr": 0.05, "epochs": int64(epochs), "momentum": 0.5, "batch": int64(16)}
}

func TestMLP(t *testing.T) {
	t.Parallel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	missingLR := mlpGenome([]int{8}, 5)
	delete(missingLR, "lr")
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		genome map[string]any
		status schema.Status
		errHas string
		params int64 // for ok outcomes
	}{
		{"ok", context.Background(), mlpGenome([]int{8, 8}, 10), schema.StatusOK, "", 3*8 + 9*8 + 9*2},
		{"over MaxParams", context.Background(), mlpGenome([]int{64, 64, 64}, 1_000_000), schema.StatusInfeasible, "8642 parameters", 0},
		{"huge layers", context.Background(), mlpGenome([]int{mlp.MaxParams, mlp.MaxParams}, 1_000_000), schema.StatusInfeasible, "exceed the limit", 0},
		{"bad genome", context.Background(), missingLR, schema.StatusError, `"lr"`, 0},
		{"deadline passed", expired, mlpGenome([]int{8}, 50), schema.StatusTimeout, "timed out", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDesign(t, "mlprun", 1, tc.genome)
			out := MLP{}.Evaluate(tc.ctx, worker.Task{Design: d, Attempt: 1})
			if out.Status != tc.status || !strings.Contains(out.Error, tc.errHas) {
				t.Fatalf("got %s %q, want %s containing %q", out.Status, out.Error, tc.status, tc.errHas)
			}
			if tc.status != schema.StatusOK {
				if out.Fitness != schema.InfeasibleFitness {
					t.Errorf("fitness %v, want InfeasibleFitness", out.Fitness)
				}
				return
			}
			if out.Fitness <= 0 || out.Fitness > 1 {
				t.Errorf("fitness %v outside (0, 1]", out.Fitness)
			}
			if out.Metrics["params"] != tc.params || out.Metrics["epochs"] != int64(10) {
				t.Errorf("metrics %v, want params %d and epochs 10", out.Metrics, tc.params)
			}
			if acc, ok := out.Metrics["train_accuracy"].(float64); !ok || acc <= 0 || acc > 1 {
				t.Errorf("train_accuracy %v", out.Metrics["train_accuracy"])
			}
			want, err := mlp.Evaluate(context.Background(), tc.genome)
			if err != nil || want.Accuracy != out.Fitness {
				t.Errorf("fitness %v, want the model's validation accuracy %v (%v)", out.Fitness, want.Accuracy, err)
			}
		})
	}
}

// Sigma narrows the spread of Sim's times and keeps their mean.
func TestSimSigma(t *testing.T) {
	t.Parallel()
	mean := 90 * time.Second
	spread := func(sigma float64) (avg, longest time.Duration) {
		s := Sim{Mean: mean, Sigma: sigma}
		var sum time.Duration
		const n = 20000
		for i := range n {
			d, _ := s.Draw(worker.Task{Design: &schema.Design{ID: fmt.Sprintf("r-%d", i+1)}, Attempt: 1})
			sum += d
			longest = max(longest, d)
		}
		return sum / n, longest
	}
	narrow, narrowMax := spread(0.2)
	wide, wideMax := spread(0) // SimSigma
	for _, m := range []time.Duration{narrow, wide} {
		if m < mean*95/100 || m > mean*105/100 {
			t.Errorf("mean %v, want %v within 5%%", m, mean)
		}
	}
	if narrowMax > 3*mean || wideMax < 5*mean {
		t.Errorf("longest of 20,000: %v at sigma 0.2, %v at %v; want under 3x and over 5x the mean", narrowMax, wideMax, SimSigma)
	}
}
