package worker

import (
	"context"
	"errors"

	"github.com/evoq/evoq/schema"
)

// Task is one evaluation handed to an Evaluator.
type Task struct {
	Design  *schema.Design
	Worker  string
	Slot    int
	Attempt int
	// GPU is the slot's GPU (a CUDA_VISIBLE_DEVICES value), "" for none.
	GPU string
}

// Outcome is what an evaluation produced. Status is one of ok, infeasible,
// error or timeout; lost is recorded by the controller, never by a worker.
type Outcome struct {
	Status  schema.Status
	Fitness float64
	Metrics map[string]any
	Error   string
	// HandBack asks for the design to be redelivered rather than given a
	// result: the evaluator failed, not the design (a persistent evaluator
	// process died). The redelivery limit still applies.
	HandBack bool
	// Exit and Signal say how the evaluator's process ended, when one
	// ended with this evaluation: its exit code, or the name of the
	// signal that killed it. See schema.Result.
	Exit   *int
	Signal string
}

// Evaluator evaluates one design. It must return when ctx is done.
type Evaluator interface {
	Evaluate(ctx context.Context, t Task) Outcome
	// Name is how the evaluator is named in logs and configs.
	Name() string
}

// Failed is the outcome of an evaluator that failed with err; a cancelled
// or expired ctx makes it a timeout.
func Failed(ctx context.Context, err error) Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return Outcome{Status: schema.StatusTimeout, Fitness: schema.InfeasibleFitness, Error: "evaluation timed out"}
	}
	return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Error: err.Error()}
}

// Infeasible is the outcome of a design that cannot be evaluated.
func Infeasible(reason string) Outcome {
	return Outcome{Status: schema.StatusInfeasible, Fitness: schema.InfeasibleFitness, Error: reason}
}
