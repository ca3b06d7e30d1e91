// Package evaluators holds the evaluators built into the evoq binary and
// chosen with --evaluator: noop, sim and mlp.
//
// They live apart from package worker so that the worker knows only the
// Evaluator interface and the evaluators that run the user's code (Command,
// Persistent), and does not link a neural network into every program that
// embeds it. They live under internal/ because they are the command line's
// tools, not a library: Noop and Sim measure evoq itself and are tuned to
// its benchmarks and tests, and MLP rests on internal/mlp. A program that
// embeds package worker implements worker.Evaluator for its own work.
package evaluators

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/evoq/evoq/internal/mlp"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// Noop returns at once with fitness 0. It measures the system's own cost.
type Noop struct{}

// Name implements worker.Evaluator.
func (Noop) Name() string { return "noop" }

// NoCheckpoints implements worker.NoCheckpoints: Noop keeps no weights.
func (Noop) NoCheckpoints() bool { return true }

// Evaluate implements worker.Evaluator.
func (Noop) Evaluate(context.Context, worker.Task) worker.Outcome {
	return worker.Outcome{Status: schema.StatusOK}
}

// Sim simulates training: it sleeps a lognormal time with mean Mean and
// sigma Sigma (SimSigma when 0), and a share Fail of designs is infeasible and returns at
// once. Fitness is a deterministic function of the genome, so the search
// has something to find. Times and failures are drawn from the design ID
// and attempt, so a run is reproducible.
//
// With Curve on, Sim also learns as it goes, so that early stopping has
// something to decide: the same time is spent in Steps equal steps, each
// followed by a report of the fitness SimCurve gives for that step, and
// the evaluation ends stopped when the report's answer says so.
//
// With Checkpoint set, Sim stands in for a trainer that stores weights:
// an evaluation that ran (ok or stopped) ends by writing
// SimCheckpoint(design ID, Checkpoint) to the task's CheckpointOut, and a
// task with a ParentCheckpoint reports whether that file holds what Sim
// would have written for the design's parent (Design.Inherit's design,
// else its first parent): metrics inherited, inherit_reason when not, and
// parent_bytes, the file's size. A wrong parent never fails the design.
type Sim struct {
	Mean time.Duration
	Fail float64
	// Sigma is the sigma of the lognormal evaluation time; 0 means
	// SimSigma.
	Sigma float64
	// Curve makes Sim report a learning curve; off, it reports nothing and
	// returns GenomeScore at the end. Defaults to off.
	Curve bool
	// Steps is the number of steps, and reports, of a full training when
	// Curve is on; a negative count fails every design. Defaults to
	// SimStepsDefault.
	Steps int
	// Checkpoint is the size in bytes of the checkpoint written for each
	// design, and expected of its parent's; 0 writes none, and a negative
	// size fails every design. Defaults to 0.
	Checkpoint int64
	// Progress makes Sim with Curve on save its step to the task's
	// ProgressOut after each step but the last, and resume a task handed
	// ProgressIn from the step saved there: its reports, and its fitness,
	// are those of an uninterrupted training, and only the steps after
	// the saved one take time. Defaults to off.
	Progress bool
	// FixedTime draws a design's time, and whether it is infeasible, from
	// its ID alone, so that every attempt of it trains as long, as a real
	// training does: an interrupted design trained again from scratch
	// takes its whole time again. Off, each attempt draws its own.
	// Defaults to off.
	FixedTime bool
}

// SimSigma is the sigma of the lognormal evaluation time of Sim.
const SimSigma = 0.8

// Name implements worker.Evaluator.
func (Sim) Name() string { return "sim" }

// NoCheckpoints implements worker.NoCheckpoints: Sim writes one only
// with Checkpoint set.
func (s Sim) NoCheckpoints() bool { return s.Checkpoint == 0 }

// SavesProgress implements worker.SavesProgress: Sim saves progress with
// Progress and Curve on.
func (s Sim) SavesProgress() bool { return s.Progress && s.Curve }

// Evaluate implements worker.Evaluator.
func (s Sim) Evaluate(ctx context.Context, t worker.Task) worker.Outcome {
	if s.Checkpoint < 0 {
		return worker.Failed(ctx, fmt.Errorf("sim: Checkpoint is %d, want 0 or more", s.Checkpoint))
	}
	d, infeasible := s.Draw(t)
	if infeasible {
		return worker.Infeasible("simulated infeasible design")
	}
	inherit := s.checkParent(t)
	var out worker.Outcome
	if s.Curve {
		out = s.evaluateCurve(ctx, t, d)
	} else {
		out = s.train(ctx, t, d)
	}
	if out.Status != schema.StatusOK && out.Status != schema.StatusStopped {
		return out
	}
	return s.finish(t, out, inherit)
}

// train is the evaluation without a curve: d of waiting, then the
// genome's score.
func (s Sim) train(ctx context.Context, t worker.Task, d time.Duration) worker.Outcome {
	if !sleepCtx(ctx, d) {
		return worker.Failed(ctx, ctx.Err())
	}
	return worker.Outcome{Status: schema.StatusOK, Fitness: GenomeScore(t.Design.Genome)}
}

// checkParent returns the inheritance metrics of t, nil when it has no
// parent checkpoint.
func (s Sim) checkParent(t worker.Task) map[string]any {
	if t.ParentCheckpoint == "" {
		return nil
	}
	m := map[string]any{}
	parent := ""
	switch {
	case t.Design.Inherit != nil:
		parent = t.Design.Inherit.Design
	case len(t.Design.Parents) > 0:
		parent = t.Design.Parents[0]
	default:
		m[MetricParentBytes] = int64(0)
		setInheritance(m, false, "design has no parent whose checkpoint to expect")
		return m
	}
	n, err := checkSimParent(t.ParentCheckpoint, parent, s.Checkpoint)
	m[MetricParentBytes] = n
	setInheritance(m, err == nil, fmt.Sprint(err))
	return m
}

// finish adds the inheritance metrics to the outcome of an evaluation
// that ran, and writes the design's checkpoint.
func (s Sim) finish(t worker.Task, out worker.Outcome, inherit map[string]any) worker.Outcome {
	if inherit == nil && (s.Checkpoint == 0 || t.CheckpointOut == "") {
		return out
	}
	out = withMetrics(out)
	for k, v := range inherit {
		out.Metrics[k] = v
	}
	if s.Checkpoint > 0 && t.CheckpointOut != "" {
		err := writeCheckpoint(t.CheckpointOut, func(w io.Writer) error {
			return writeSimCheckpoint(w, t.Design.ID, s.Checkpoint)
		})
		if err != nil {
			out.Metrics[MetricCheckpointWriteError] = err.Error()
		}
	}
	return out
}

// Draw is what Evaluate does with t: take d to evaluate it, or find it
// infeasible at once. It depends on the design's ID and the attempt alone,
// and with FixedTime on the ID alone.
func (s Sim) Draw(t worker.Task) (d time.Duration, infeasible bool) {
	attempt := uint64(t.Attempt)
	if s.FixedTime {
		attempt = 0 // no attempt is 0: a stream of the design's own
	}
	r := rand.New(rand.NewPCG(hash64(t.Design.ID), attempt))
	if r.Float64() < s.Fail {
		return 0, true
	}
	sigma := s.Sigma
	if sigma == 0 {
		sigma = SimSigma
	}
	mu := math.Log(s.Mean.Seconds()) - sigma*sigma/2
	return time.Duration(math.Exp(mu+sigma*r.NormFloat64()) * float64(time.Second)), false
}

// GenomeScore maps a genome to a deterministic score in [0, 1): the same
// genome always scores the same, nearby genomes score alike.
func GenomeScore(g map[string]any) float64 {
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	score, n := 0.0, 0.0
	for _, k := range keys {
		if x, ok := toFloat(g[k]); ok && !math.IsNaN(x) && !math.IsInf(x, 0) {
			w := float64(hash64(k)%1000)/1000 + 0.5
			score += math.Sin(w*x)*0.5 + 0.5
			n++
		}
	}
	if n == 0 {
		return float64(hash64(fmt.Sprint(g))%1000) / 1000
	}
	return score / (n + 1e-9) * 0.999
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	case int:
		return float64(x), true
	}
	return 0, false
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// MLP trains the built-in multi-layer perceptron on the built-in spirals
// data set; fitness is validation accuracy.
//
// A task with a ParentCheckpoint starts from the parent's weights where
// the layers' shapes allow (mlp.EvaluateFrom) and reports metrics
// inherited, inherited_params and, when it inherited nothing,
// inherit_reason; a parent that cannot be read or decoded is such a
// reason, never an error. A task with a CheckpointOut gets the trained
// network's weights written there, except for a network whose training
// diverged.
type MLP struct{}

// Name implements worker.Evaluator.
func (MLP) Name() string { return "mlp" }

// Evaluate implements worker.Evaluator.
func (MLP) Evaluate(ctx context.Context, t worker.Task) worker.Outcome {
	var parent []byte
	var readErr error
	if t.ParentCheckpoint != "" {
		parent, readErr = readParent(t.ParentCheckpoint, mlp.MaxCheckpointSize)
	}
	res, ckpt, err := mlp.EvaluateFrom(ctx, t.Design.Genome, parent)
	switch {
	case errors.Is(err, mlp.ErrInfeasible):
		return worker.Infeasible(err.Error())
	case err != nil:
		return worker.Failed(ctx, err)
	}
	m := map[string]any{
		"params": int64(res.Params), "train_accuracy": res.TrainAccuracy,
		"loss": res.Loss, "epochs": int64(res.Epochs),
	}
	if t.ParentCheckpoint != "" {
		reason := res.InheritReason
		if readErr != nil {
			reason = readErr.Error()
		}
		setInheritance(m, res.Inherited, reason)
		m[MetricInheritedParams] = int64(res.InheritedParams)
	}
	if t.CheckpointOut != "" && ckpt != nil {
		err := writeCheckpoint(t.CheckpointOut, func(w io.Writer) error {
			_, err := w.Write(ckpt)
			return err
		})
		if err != nil {
			m[MetricCheckpointWriteError] = err.Error()
		}
	}
	return worker.Outcome{Status: schema.StatusOK, Fitness: res.Accuracy, Metrics: m}
}
