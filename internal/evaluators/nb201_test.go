package evaluators

import (
	"context"
	"testing"

	"github.com/evoq/evoq/nb201"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// The nb201 evaluator returns the table's accuracy; with noise, two
// designs of the same cell score differently while one design's attempt
// scores the same every time; a genome of another space is an error that
// names the gene.
func TestNB201(t *testing.T) {
	t.Parallel()
	opt, arch := nb201.Optimum()
	g := map[string]any{}
	for i, e := range nb201.Edges {
		g[e] = []string{"nor_conv_1x1", "nor_conv_1x1", "nor_conv_3x3", "skip_connect", "nor_conv_3x3", "nor_conv_3x3"}[i]
	}
	task := func(id string, attempt int) worker.Task {
		return worker.Task{Design: &schema.Design{ID: id, Genome: g}, Attempt: attempt}
	}
	out := NB201{}.Evaluate(context.Background(), task("r-1", 1))
	if out.Status != schema.StatusOK || out.Fitness != opt || out.Metrics["arch"] != arch {
		t.Fatalf("no noise: %+v, want fitness %v and arch %s", out, opt, arch)
	}
	noisy := NB201{Noise: 0.5}
	a, b := noisy.Evaluate(context.Background(), task("r-1", 1)), noisy.Evaluate(context.Background(), task("r-2", 1))
	again := noisy.Evaluate(context.Background(), task("r-1", 1))
	if a.Fitness == b.Fitness || a.Fitness == opt || a.Fitness != again.Fitness {
		t.Fatalf("noise 0.5: designs r-1 %v (again %v) and r-2 %v of one cell of accuracy %v", a.Fitness, again.Fitness, b.Fitness, opt)
	}
	// The noise's spread is the one asked for: 2,000 draws' standard
	// deviation within 10% of 0.5.
	var sum, sq float64
	const n = 2000
	for i := range n {
		f := noisy.Evaluate(context.Background(), task(schema.DesignID("r", uint64(i+1)), 1)).Fitness - opt
		sum, sq = sum+f, sq+f*f
	}
	if sd := sq/n - (sum/n)*(sum/n); sd < 0.45*0.45 || sd > 0.55*0.55 {
		t.Errorf("noise variance %v, want about 0.25", sd)
	}
	bad := NB201{}.Evaluate(context.Background(), worker.Task{Design: &schema.Design{ID: "r-3", Genome: map[string]any{"x1": 0.5}}})
	if bad.Status != schema.StatusError || bad.Error == "" {
		t.Fatalf("a genome of another space: %+v", bad)
	}
}
