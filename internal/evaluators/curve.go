package evaluators

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// SimStepsDefault is the number of steps of a full training of Sim with
// Curve on. 27 is 3³, so successive halving with eta 3 from step 1 has
// rungs at steps 1, 3 and 9 and a full training at 27.
const SimStepsDefault = 27

// The shape of SimCurve. They are set to look like validation-accuracy
// curves of small networks trained for a fixed number of epochs, not for
// any stopping rule to do well on.
const (
	// simTauMin and simTauMax bound a design's time constant, as a
	// fraction of the full training: the fastest designs are 90% of the
	// way to their final value after 9% of training, the slowest only after
	// 64%, as a too-small learning rate or heavy regularisation would have
	// them.
	simTauMin = 1.0 / 25
	simTauMax = 1.0 / 3
	// simNoise is the standard deviation of the step-to-step jitter at the
	// start of training, in fitness; it fades to nothing at the end.
	simNoise = 0.02
	// simCurveStream keeps the curve's draws apart from any other draw
	// seeded with the genome's hash.
	simCurveStream = 0x5157_c0de
)

// SimCurve is the learning curve of genome under Sim with Curve on: its
// fitness after each of the steps 1..steps of a full training of steps
// steps, or nil for steps below 1. It depends on the genome alone, not on
// the design ID or attempt, so a run with early stopping meets the same
// curves as a run without, and a test can compute them without sleeping.
//
// With x = s/steps the share of training done after step s, the value is
//
//	final · (1 − exp(−x/τ)) / (1 − exp(−1/τ)) + noise(s), clamped to [0, 1)
//
// final is GenomeScore(genome), so nearby genomes end alike; the curve
// reaches it exactly at the last step, where the noise is zero. τ, the
// design's speed, is drawn log-uniformly from [1/25, 1/3] by a hash of the
// genome, independent of final: a slow starter with a high final value
// trails fast mediocre designs at the first rungs and passes them later,
// and that is what lets early stopping be wrong on this workload. noise(s)
// is Gaussian with standard deviation 0.02·(1 − x), drawn afresh for each
// (genome, step): the epoch-to-epoch jitter of a validation score, fading
// as training converges.
func SimCurve(genome map[string]any, steps int) []float64 {
	if steps < 1 {
		return nil
	}
	r := rand.New(rand.NewPCG(genomeHash(genome), simCurveStream))
	tau := simTauMin * math.Pow(simTauMax/simTauMin, r.Float64())
	final := GenomeScore(genome)
	curve := make([]float64, steps)
	for i := range curve {
		x := float64(i+1) / float64(steps)
		rise := -math.Expm1(-x/tau) / -math.Expm1(-1/tau)
		noise := simNoise * (1 - x) * r.NormFloat64()
		curve[i] = min(max(final*rise+noise, 0), math.Nextafter(1, 0))
	}
	// 1 − x rounds to a hair above zero for some step counts; the last
	// value is the final one by definition, not by rounding.
	curve[steps-1] = final
	return curve
}

// evaluateCurve spends d over the steps of s's curve, reporting after
// each, and ends stopped at the first report whose answer is stop. With
// Progress on it starts after the step its task's saved progress holds,
// and saves each step it reaches.
func (s Sim) evaluateCurve(ctx context.Context, t worker.Task, d time.Duration) worker.Outcome {
	n := s.Steps
	if n == 0 {
		n = SimStepsDefault
	}
	if n < 0 {
		return worker.Failed(ctx, fmt.Errorf("sim: Steps is %d, want 1 or more (0 for %d)", n, SimStepsDefault))
	}
	from, unusable := s.resumeStep(t, n)
	var last worker.Progress
	curve := SimCurve(t.Design.Genome, n)
	for i := from; i < n; i++ {
		if !sleepCtx(ctx, stepTime(d, i, n)) {
			return worker.Failed(ctx, ctx.Err())
		}
		// The last step is marked so: the rule records it and judges
		// nothing, as it does for every design that reached its end.
		last = worker.Progress{Step: int64(i + 1), Fitness: curve[i], Metrics: curveMetrics(curve[i]), Last: i == n-1}
		if stop, reason := t.Report(ctx, last); stop {
			return withUnusable(worker.Stopped(last, reason), unusable)
		}
		if i < n-1 {
			s.saveStep(t, int64(i+1))
		}
	}
	return withUnusable(worker.Outcome{Status: schema.StatusOK, Fitness: last.Fitness, Metrics: curveMetrics(last.Fitness)}, unusable)
}

// curveMetrics is what a report of Sim's curve carries besides fitness: a
// loss that falls as fitness rises, for dashboards that plot one. Each
// report gets its own map, as a Reporter may keep it.
func curveMetrics(fitness float64) map[string]any {
	return map[string]any{"loss": 1 - fitness}
}

// stepTime is the time of step i (from 0) of n in a training of d: the
// steps' times add up to d exactly, whatever n divides into it.
func stepTime(d time.Duration, i, n int) time.Duration {
	return d*time.Duration(i+1)/time.Duration(n) - d*time.Duration(i)/time.Duration(n)
}

// sleepCtx waits d, or until ctx is done, and says whether d passed. A ctx
// done already wins even over a zero d, so that cancellation between two
// steps is never raced by the next step's timer.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// genomeHash hashes g's canonical form: keys in order, and every number
// by its float64 value, so that int64(3), 3 and 3.0 hash alike, as
// GenomeScore scores them alike, however the genome was decoded.
func genomeHash(g map[string]any) uint64 {
	h := fnv.New64a()
	writeCanonical(h, g)
	return h.Sum64()
}

func writeCanonical(w io.Writer, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		io.WriteString(w, "{")
		for _, k := range keys {
			io.WriteString(w, strconv.Quote(k)+":")
			writeCanonical(w, x[k])
			io.WriteString(w, ",")
		}
		io.WriteString(w, "}")
	case []any:
		io.WriteString(w, "[")
		for _, e := range x {
			writeCanonical(w, e)
			io.WriteString(w, ",")
		}
		io.WriteString(w, "]")
	case string:
		io.WriteString(w, strconv.Quote(x))
	default:
		if f, ok := toFloat(v); ok {
			io.WriteString(w, strconv.FormatFloat(f, 'g', -1, 64))
			return
		}
		fmt.Fprintf(w, "%T(%v)", v, v)
	}
}
