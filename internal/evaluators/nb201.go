package evaluators

import (
	"context"
	"math/rand/v2"

	"github.com/evoq/evoq/nb201"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// NB201 looks the design's cell up in the NAS-Bench-201 table of
// ImageNet16-120 test accuracies (package nb201; its search space is
// nb201.Space) and returns the accuracy, in percent, as the fitness, with
// metric arch, the cell in the table's notation. An evaluation returns at
// once.
//
// With Noise above 0, the fitness is the accuracy plus normal noise of
// that standard deviation, drawn from the design's ID and attempt: two
// designs of the same cell score differently, as two trainings with other
// seeds would, while a replay of the run reproduces each score.
type NB201 struct {
	// Noise is the noise's standard deviation in accuracy points.
	// Defaults to 0, none.
	Noise float64
}

// Name implements worker.Evaluator.
func (NB201) Name() string { return schema.EvaluatorNB201 }

// Evaluate implements worker.Evaluator.
func (n NB201) Evaluate(_ context.Context, t worker.Task) worker.Outcome {
	arch, err := nb201.Arch(t.Design.Genome)
	if err != nil {
		return worker.Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
			Error: err.Error() + " (the nb201 evaluator needs the nb201 space, which evoq run gives it when --space is not set)"}
	}
	acc, err := nb201.Accuracy(arch)
	if err != nil {
		return worker.Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Error: err.Error()}
	}
	if n.Noise > 0 {
		r := rand.New(rand.NewPCG(hash64(t.Design.ID), uint64(t.Attempt)))
		acc += n.Noise * r.NormFloat64()
	}
	return worker.Outcome{Status: schema.StatusOK, Fitness: acc, Metrics: map[string]any{"arch": arch}}
}
