package mlp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var (
	survey     = flag.Bool("survey", false, "sample random designs of the default space and report accuracy and time")
	surveySize = flag.Int("survey.n", 40, "number of random designs sampled by -survey")
	surveySeed = flag.Uint64("survey.seed", 1, "seed of the -survey sampler")
)

// randomGenome draws a genome uniformly from the default space (space.yaml),
// with log-uniform draws where the space says log: true.
func randomGenome(rng *rand.Rand) map[string]any {
	layers := make([]any, 1+rng.IntN(4))
	acts := []string{"relu", "tanh", "sigmoid"}
	for i := range layers {
		layers[i] = map[string]any{
			"units":      int64(2 + rng.IntN(63)),
			"activation": acts[rng.IntN(len(acts))],
		}
	}
	return map[string]any{
		"layers":   layers,
		"lr":       logUniform(rng, 0.001, 0.5),
		"epochs":   int64(20 + rng.IntN(181)),
		"momentum": 0.95 * rng.Float64(),
		"batch":    []int64{8, 16, 32}[rng.IntN(3)],
		"l2":       logUniform(rng, 1e-6, 1e-2),
	}
}

// logUniform draws from [lo, hi] uniformly on a log scale.
func logUniform(rng *rand.Rand, lo, hi float64) float64 {
	return lo * math.Exp(rng.Float64()*math.Log(hi/lo))
}

// TestSurvey reports the accuracy and time distribution of random designs.
// It runs only with -survey.
func TestSurvey(t *testing.T) {
	if !*survey {
		t.Skip("run with -survey")
	}
	rng := rand.New(rand.NewPCG(*surveySeed, 7))
	var accs, secs, best []float64
	infeasible := 0
	for i := range *surveySize {
		if i%20 == 0 {
			best = append(best, 0)
		}
		g := randomGenome(rng)
		start := time.Now()
		res, err := Evaluate(context.Background(), g)
		el := time.Since(start).Seconds()
		if errors.Is(err, ErrInfeasible) {
			infeasible++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		accs, secs = append(accs, res.Accuracy), append(secs, el)
		best[len(best)-1] = max(best[len(best)-1], res.Accuracy)
		t.Logf("acc %.3f train %.3f params %4d epochs %3d time %.3fs %s", res.Accuracy, res.TrainAccuracy, res.Params, res.Epochs, el, describe(g))
	}
	t.Logf("infeasible %d/%d", infeasible, *surveySize)
	t.Logf("accuracy %s", summary(accs))
	t.Logf("seconds  %s", summary(secs))
	t.Logf("best of each 20 draws: %.3f", best)
	for _, g := range []map[string]any{goodGenome(), genome([]int{32, 32}, "tanh", 0.05, 200, 0.9, 16)} {
		start := time.Now()
		res, err := Evaluate(context.Background(), g)
		t.Logf("hand-picked %s: %+v %v in %.3fs", describe(g), res, err, time.Since(start).Seconds())
	}
}

// describe renders a genome compactly.
func describe(g map[string]any) string {
	s := ""
	for _, l := range g["layers"].([]any) {
		m := l.(map[string]any)
		s += fmt.Sprintf("%v%s ", m["units"], m["activation"].(string)[:1])
	}
	return fmt.Sprintf("[%s] lr %.4f ep %v mom %.2f b %v l2 %v", s, g["lr"], g["epochs"], g["momentum"], g["batch"], g["l2"])
}

// summary gives min, quartiles, max and mean of xs.
func summary(xs []float64) string {
	if len(xs) == 0 {
		return "none"
	}
	s := slices.Sorted(slices.Values(xs))
	q := func(p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }
	mean := 0.0
	for _, x := range s {
		mean += x
	}
	return fmt.Sprintf("min %.3f q1 %.3f median %.3f q3 %.3f max %.3f mean %.3f (n=%d)",
		s[0], q(0.25), q(0.5), q(0.75), s[len(s)-1], mean/float64(len(s)), len(s))
}
