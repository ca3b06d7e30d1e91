package worker

import (
	"context"
	"errors"

	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// Task is one evaluation handed to an Evaluator.
type Task struct {
	Design  *schema.Design
	Worker  string
	Slot    int
	Attempt int
	// GPU is the slot's GPU (a CUDA_VISIBLE_DEVICES value), "" for none.
	GPU string
	// Reports takes the evaluation's intermediate reports; nil takes
	// none (Report then always goes on).
	Reports Reporter
	// CheckpointOut is the file the evaluator may write the design's
	// checkpoint to (EVOQ_CHECKPOINT_OUT), "" when the run stores none.
	// The worker stores what it holds when the evaluation ends, whatever
	// its status; the file need not exist.
	CheckpointOut string
	// ParentCheckpoint is a file holding the checkpoint the design
	// inherits (EVOQ_PARENT_CHECKPOINT), checked against
	// Design.Inherit; "" when it has none to start from. Read it only.
	ParentCheckpoint string
	// ProgressOut is the file the evaluator may save its progress to
	// (EVOQ_PROGRESS_OUT), replacing it whole each time (write another
	// file and rename it), then call Saved with the step; "" when the run
	// keeps no store. ProgressIn is the progress an earlier attempt saved,
	// at step ResumeStep, to start from (EVOQ_PROGRESS_IN,
	// EVOQ_RESUME_STEP); "" when there is none. ProgressRequest is a file
	// the worker creates when it is about to hand the design back (the
	// walltime, a drain): a save now is kept (EVOQ_PROGRESS_REQUEST).
	ProgressOut, ProgressIn, ProgressRequest string
	ResumeStep                               int64
	// Saved tells the worker that the file at ProgressOut holds the
	// progress at step; it returns once it is stored. nil: not kept.
	Saved func(step int64)
	// Log is where the evaluator says what concerns this evaluation
	// (its slot, design and attempt are in its fields); nil logs to
	// logrus's standard logger.
	Log logrus.FieldLogger
	// Warn, when set, makes msg one of the worker's standing warnings,
	// which its heartbeats carry to the run's warnings and evoq status:
	// for what concerns the evaluator as a whole, not one evaluation.
	Warn func(msg string)
}

// saved hands a progress line's step to Saved, if the task keeps progress.
func (t Task) saved(step int64) {
	if t.Saved != nil {
		t.Saved(step)
	}
}

// warn adds msg to the worker's standing warnings, if the task can.
func (t Task) warn(msg string) {
	if t.Warn != nil {
		t.Warn(msg)
	}
}

// Progress is one intermediate report of an evaluation: its fitness after
// Step steps of training. Steps increase from one report to the next.
type Progress struct {
	Step    int64
	Fitness float64
	Metrics map[string]any
	// Last says the training ended at Step: no report follows, and the
	// early-stopping rule does not judge this one (schema.Report.Last).
	// A last report may repeat the previous report's step, to say that
	// report was the last.
	Last bool
}

// Reporter takes an evaluation's intermediate reports. Report stores p
// and says whether the evaluation goes on: stop true means end it now,
// with Stopped(p, reason) as its outcome. It returns quickly: at a rung of
// the run's early-stopping rule after the controller's answer, elsewhere
// once the report is stored.
type Reporter interface {
	Report(ctx context.Context, p Progress) (stop bool, reason string)
}

// Report hands p to the task's Reporter; without one the evaluation goes
// on.
func (t Task) Report(ctx context.Context, p Progress) (stop bool, reason string) {
	if t.Reports == nil {
		return false, ""
	}
	return t.Reports.Report(ctx, p)
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

// NoCheckpoints is implemented by an evaluator that can tell it never
// writes a checkpoint (a built-in one that keeps no weights). Its tasks
// get no CheckpointOut, and the worker does not look for a file that
// cannot be there: at thousands of evaluations a second that look was a
// noticeable share of a worker's time. An evaluator that does not
// implement it may write one.
type NoCheckpoints interface {
	NoCheckpoints() bool
}

// SavesProgress is implemented by an evaluator that says NoCheckpoints
// and saves its progress all the same (ProgressOut): a built-in that keeps
// no weights but a step to resume from. Without it, a NoCheckpoints
// evaluator's tasks get no progress files either, and the worker looks up
// no saved progress for them: that look is a store request per
// evaluation.
type SavesProgress interface {
	SavesProgress() bool
}

// Failed is the outcome of an evaluator that failed with err; a cancelled
// or expired ctx makes it a timeout.
func Failed(ctx context.Context, err error) Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return Outcome{Status: schema.StatusTimeout, Fitness: schema.InfeasibleFitness, Error: "evaluation timed out"}
	}
	return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Error: err.Error()}
}

// Stopped is the outcome of an evaluation the run's early-stopping rule
// stopped after its report last: the fitness and metrics it reported
// last, with the step in metrics (stopped_at) and why in Error.
func Stopped(last Progress, reason string) Outcome {
	m := make(map[string]any, len(last.Metrics)+1)
	for k, v := range last.Metrics {
		m[k] = v
	}
	m["stopped_at"] = last.Step
	return Outcome{Status: schema.StatusStopped, Fitness: last.Fitness, Metrics: m, Error: reason}
}

// withMetricsOf adds to o the metrics of line, the result an evaluator
// printed, that o lacks: a stopped design keeps what its evaluator said
// of it besides its reports (whether it inherited its parent's weights,
// say), while its reports' metrics, which go with its fitness, win.
func withMetricsOf(o Outcome, line Outcome) Outcome {
	if line.Status != schema.StatusOK || len(line.Metrics) == 0 {
		return o
	}
	m := make(map[string]any, len(o.Metrics)+len(line.Metrics))
	for k, v := range line.Metrics {
		m[k] = v
	}
	for k, v := range o.Metrics {
		m[k] = v
	}
	o.Metrics = m
	return o
}

// finishedAt is the outcome of an evaluation whose last report, end, said
// its training ended, but that printed no result (a stop reached it as it
// ended, and it was killed before it printed one): the last report is its
// result.
func finishedAt(end Progress) Outcome {
	m := make(map[string]any, len(end.Metrics))
	for k, v := range end.Metrics {
		m[k] = v
	}
	return Outcome{Status: schema.StatusOK, Fitness: end.Fitness, Metrics: m}
}

// Infeasible is the outcome of a design that cannot be evaluated.
func Infeasible(reason string) Outcome {
	return Outcome{Status: schema.StatusInfeasible, Fitness: schema.InfeasibleFitness, Error: reason}
}
