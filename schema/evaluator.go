package schema

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Built-in evaluators a run may name in Evaluator.Builtin.
const (
	EvaluatorMLP  = "mlp"
	EvaluatorSim  = "sim"
	EvaluatorNoop = "noop"
	EvaluatorZDT1 = "zdt1"
	EvaluatorZDT2 = "zdt2"
	// EvaluatorNB201 looks a cell of NAS-Bench-201 up in its table of
	// ImageNet16-120 test accuracies.
	EvaluatorNB201 = "nb201"
)

// Evaluator is what evaluates a run's designs, recorded with the run so
// that every worker that joins it, and every controller that continues it,
// evaluates the way the run began: a default never takes the place of a
// recorded evaluator. Exactly one of Builtin and Cmd is set.
type Evaluator struct {
	// Builtin names a built-in evaluator: mlp, sim, noop, zdt1, zdt2 or
	// nb201.
	Builtin string `msgpack:"builtin,omitempty" json:"builtin,omitempty"`
	// Cmd is an external evaluator command, run with sh -c.
	Cmd string `msgpack:"cmd,omitempty" json:"cmd,omitempty"`
	// Persistent: one long-lived Cmd process per slot, one JSON line per
	// design and per result.
	Persistent bool `msgpack:"persistent,omitempty" json:"persistent,omitempty"`
	// Timeout bounds one evaluation; 0: no limit.
	Timeout time.Duration `msgpack:"timeout_ns,omitempty" json:"timeout_ns,omitempty"`
	// StopGrace is the time an evaluator stopped early has to end its
	// design; 0: the worker's default.
	StopGrace time.Duration `msgpack:"stop_grace_ns,omitempty" json:"stop_grace_ns,omitempty"`
	// Sim holds the sim evaluator's settings; nil for the others.
	Sim *SimEvaluator `msgpack:"sim,omitempty" json:"sim,omitempty"`
	// NB201 holds the nb201 evaluator's settings; nil for the others.
	NB201 *NB201Evaluator `msgpack:"nb201,omitempty" json:"nb201,omitempty"`
}

// NB201Evaluator is the built-in nb201 evaluator's settings.
type NB201Evaluator struct {
	// Noise is the standard deviation, in accuracy points, of the normal
	// noise added to each evaluation's accuracy, as a retraining with
	// another seed would differ; 0: the table's accuracy as it is.
	Noise float64 `msgpack:"noise,omitempty" json:"noise,omitempty"`
}

// SimEvaluator is the built-in sim evaluator's settings.
type SimEvaluator struct {
	// Mean is the mean evaluation time, Sigma the lognormal's sigma.
	Mean  time.Duration `msgpack:"mean_ns" json:"mean_ns"`
	Sigma float64       `msgpack:"sigma" json:"sigma"`
	// Fail is the share of designs that are infeasible at once.
	Fail float64 `msgpack:"fail" json:"fail"`
	// Curve makes it report a learning curve of Steps steps.
	Curve bool `msgpack:"curve,omitempty" json:"curve,omitempty"`
	Steps int  `msgpack:"steps,omitempty" json:"steps,omitempty"`
	// Checkpoint is the size of the checkpoint written per design; 0: none.
	Checkpoint int64 `msgpack:"checkpoint,omitempty" json:"checkpoint,omitempty"`
	// Progress makes it save its step after each step of its curve
	// (Curve on), and resume from the step an interrupted attempt saved.
	// A run recorded before the field existed has it off: no progress.
	Progress bool `msgpack:"progress,omitempty" json:"progress,omitempty"`
	// FixedTime draws a design's time from its ID alone, the same for
	// every attempt; off (and in a run recorded before the field
	// existed), each attempt draws its own.
	FixedTime bool `msgpack:"fixed_time,omitempty" json:"fixed_time,omitempty"`
}

// Validate checks every field of e.
func (e *Evaluator) Validate() error {
	switch {
	case e.Builtin != "" && e.Cmd != "":
		return invalid("evaluator", "builtin", "%q and cmd %q: one or the other", e.Builtin, e.Cmd)
	case e.Builtin == "" && strings.TrimSpace(e.Cmd) == "":
		return invalid("evaluator", "cmd", "neither a built-in evaluator nor a command")
	case e.Persistent && e.Cmd == "":
		return invalid("evaluator", "persistent", "needs a command")
	case e.Timeout < 0:
		return invalid("evaluator", "timeout_ns", "%s < 0", e.Timeout)
	case e.StopGrace < 0:
		return invalid("evaluator", "stop_grace_ns", "%s < 0", e.StopGrace)
	case (e.Sim != nil) != (e.Builtin == EvaluatorSim):
		return invalid("evaluator", "sim", "sim settings go with the sim evaluator only")
	case (e.NB201 != nil) != (e.Builtin == EvaluatorNB201):
		return invalid("evaluator", "nb201", "nb201 settings go with the nb201 evaluator only")
	}
	switch e.Builtin {
	case "", EvaluatorMLP, EvaluatorNoop, EvaluatorZDT1, EvaluatorZDT2:
	case EvaluatorNB201:
		if n := e.NB201.Noise; !(n >= 0 && n <= 100) {
			return invalid("evaluator", "nb201", "noise %v: want accuracy points in 0..100", n)
		}
	case EvaluatorSim:
		s := e.Sim
		if s.Mean <= 0 || !(s.Sigma > 0 && s.Sigma <= 3) || !(s.Fail >= 0 && s.Fail <= 1) ||
			math.IsNaN(s.Sigma) || s.Steps < 0 || s.Checkpoint < 0 || (s.Curve && s.Steps < 1) {
			return invalid("evaluator", "sim", "settings out of range: %+v", *s)
		}
		if s.Progress && !s.Curve {
			return invalid("evaluator", "sim", "progress needs the curve: without steps there is nothing to save")
		}
	default:
		return invalid("evaluator", "builtin", "%q is not mlp, sim, noop, zdt1, zdt2 or nb201", e.Builtin)
	}
	return nil
}

// String says what e runs, with every setting that differs from its zero
// value, as the command line gives them.
func (e *Evaluator) String() string {
	if e == nil {
		return "none recorded"
	}
	var parts []string
	if e.Cmd != "" {
		parts = append(parts, fmt.Sprintf("--eval-cmd %q", e.Cmd))
	} else {
		parts = append(parts, "--evaluator "+e.Builtin)
	}
	parts = append(parts, e.Settings()...)
	return strings.Join(parts, " ")
}

// Settings are e's settings other than what it runs, as flags.
func (e *Evaluator) Settings() []string {
	var parts []string
	if e.Persistent {
		parts = append(parts, "--persistent")
	}
	if e.Timeout > 0 {
		parts = append(parts, "--eval-timeout "+e.Timeout.String())
	}
	if e.StopGrace > 0 {
		parts = append(parts, "--stop-grace "+e.StopGrace.String())
	}
	parts = append(parts, e.Sim.settings()...)
	return append(parts, e.NB201.settings()...)
}

// settings are the nb201 settings as flags: none for nil or no noise.
func (n *NB201Evaluator) settings() []string {
	if n == nil || n.Noise == 0 {
		return nil
	}
	return []string{fmt.Sprintf("--nb201-noise %g", n.Noise)}
}

// settings are the sim settings as flags; none for nil.
func (s *SimEvaluator) settings() []string {
	if s == nil {
		return nil
	}
	parts := []string{fmt.Sprintf("--sim-mean %g", s.Mean.Seconds()), fmt.Sprintf("--sim-sigma %g", s.Sigma),
		fmt.Sprintf("--sim-fail %g", s.Fail)}
	if s.Curve {
		parts = append(parts, fmt.Sprintf("--sim-curve --sim-steps %d", s.Steps))
	}
	if s.Checkpoint > 0 {
		parts = append(parts, fmt.Sprintf("--sim-checkpoint %d", s.Checkpoint))
	}
	if s.Progress {
		parts = append(parts, "--sim-progress")
	}
	if s.FixedTime {
		parts = append(parts, "--sim-fixed-time")
	}
	return parts
}

// Diff lists how got differs from e, the recorded evaluator, one
// "setting: recorded -> got" per difference; nil when they are equal.
func (e *Evaluator) Diff(got *Evaluator) []string {
	var out []string
	add := func(name, rec, g string) {
		if rec != g {
			out = append(out, fmt.Sprintf("%s: %s -> %s", name, rec, g))
		}
	}
	what := func(x *Evaluator) string {
		if x.Cmd != "" {
			return fmt.Sprintf("command %q", x.Cmd)
		}
		return "built-in " + x.Builtin
	}
	add("evaluator", what(e), what(got))
	add("persistent", fmt.Sprint(e.Persistent), fmt.Sprint(got.Persistent))
	add("eval-timeout", e.Timeout.String(), got.Timeout.String())
	add("stop-grace", e.StopGrace.String(), got.StopGrace.String())
	if e.Sim != nil || got.Sim != nil {
		add("sim", strings.Join(e.Sim.settings(), " "), strings.Join(got.Sim.settings(), " "))
	}
	if e.NB201 != nil || got.NB201 != nil {
		add("nb201", strings.Join(e.NB201.settings(), " "), strings.Join(got.NB201.settings(), " "))
	}
	return out
}
