package evaluators

import (
	"context"
	"fmt"
	"strings"

	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/evoq/evoq/worker"
)

// ZDT evaluates one of the ZDT test problems of Zitzler, Deb and Thiele
// (2000), zdt1 or zdt2: 30 variables x1..x30 in [0, 1] (ZDTSpace), two
// objectives to minimize, reported as metrics f1 and f2, with fitness
// -(f1 + f2) so that the result reads as a single-objective one too. Their
// Pareto fronts are known (pareto.TrueHypervolume), so a search's front
// can be measured against the truth. An evaluation returns at once.
type ZDT struct {
	// Problem is zdt1 or zdt2.
	Problem string
}

// ZDT problems' objectives and reference point: the run's defaults when
// the evaluator is one of them.
const (
	ZDTObjectives = "f1:min,f2:min"
	ZDTRef        = 1.1
)

// IsZDT reports whether name is a ZDT problem.
func IsZDT(name string) bool { return name == "zdt1" || name == "zdt2" }

// Name implements worker.Evaluator.
func (z ZDT) Name() string { return z.Problem }

// Evaluate implements worker.Evaluator.
func (z ZDT) Evaluate(_ context.Context, t worker.Task) worker.Outcome {
	x := make([]float64, pareto.ZDTVars)
	for i := range x {
		v, ok := toFloat(t.Design.Genome[zdtVar(i)])
		if !ok || v < 0 || v > 1 {
			return worker.Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
				Error: fmt.Sprintf("%s: genome variable %s is %v, want a number in [0, 1] (the zdt space has x1..x%d)", z.Problem, zdtVar(i), t.Design.Genome[zdtVar(i)], pareto.ZDTVars)}
		}
		x[i] = v
	}
	var f [2]float64
	switch z.Problem {
	case "zdt1":
		f = pareto.ZDT1(x)
	case "zdt2":
		f = pareto.ZDT2(x)
	default:
		return worker.Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Error: fmt.Sprintf("no ZDT problem %q", z.Problem)}
	}
	return worker.Outcome{Status: schema.StatusOK, Fitness: -(f[0] + f[1]), Metrics: map[string]any{"f1": f[0], "f2": f[1]}}
}

func zdtVar(i int) string { return fmt.Sprintf("x%d", i+1) }

// ZDTSpace is the search space of problem (zdt1 or zdt2): x1..x30, each
// a float in [0, 1].
func ZDTSpace(problem string) (*space.Space, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nparams:\n", problem)
	for i := range pareto.ZDTVars {
		fmt.Fprintf(&b, "  %s: {type: float, min: 0, max: 1}\n", zdtVar(i))
	}
	return space.Parse([]byte(b.String()))
}
