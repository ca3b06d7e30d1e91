// Package bench runs evoq's named workloads end to end, with real broker,
// controller and worker processes over TCP, and with VsDask the same
// workload on Dask distributed (dask_baseline.py, embedded) side by side.
// `evoq bench` is its command line.
//
// Every figure comes from a structured source: the one JSON object that
// `evoq run --json` and `evoq controller --json` print last (a
// controller.Summary), the Dask baseline's own JSON line, the broker's
// stream counts, a run's stored results, the stoplatency evaluator's own
// JSON lines and /proc. One figure has no other source: the workers'
// time to answer a report at a rung, which they log and store nowhere;
// the fidelity workload reads it from their JSON log lines, in one
// function whose test pins the worker's text (see rungAnswers).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// PythonDefault is the Python that has Debian's python3-distributed.
const PythonDefault = "/usr/bin/python3"

// ErrConfig means a Config field is invalid; every *ConfigError is one.
var ErrConfig = errors.New("invalid bench config")

// ConfigError names the invalid Config field, so that a command line can
// name its flag instead.
type ConfigError struct {
	Field  string // the Config field
	Value  string // the bad value, "" when the field as a whole is wrong
	Reason string // what is wrong and what to do
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%v: %s: %s", ErrConfig, e.Field, e.Reason)
	}
	return fmt.Sprintf("%v: %s %q: %s", ErrConfig, e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrConfig) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// Config configures Run.
type Config struct {
	// Evoq is the evoq binary that runs the workloads. Required: the
	// command line passes itself.
	Evoq string
	// Workloads names the workloads to run, in order (see Names); replay
	// needs memory before it. Defaults to noop and sim.
	Workloads []string
	// VsDask runs the Dask baseline of each workload that has one.
	// Defaults to false.
	VsDask bool
	// Smoke runs one short iteration of each workload: it checks that the
	// bench runs and measures nothing. Defaults to false.
	Smoke bool
	// Python is the Python that has dask.distributed, for VsDask; the
	// stoplatency workload's evaluator runs with it too (it needs only the
	// standard library). Defaults to PythonDefault.
	Python string
	// DaskScript is the Dask baseline script. Defaults to DaskBaseline,
	// written to a temporary file while Run runs.
	DaskScript string
	// Dir holds the runs' stores. Defaults to a temporary directory,
	// removed when Run returns.
	Dir string
	// Seeds is the number of seeds, 1..Seeds, of the fidelity, inherit,
	// preempt, zdt, nb201 and train20 workloads. Defaults to 5 (preempt:
	// 3, nb201: 10, train20: 3), or 1 with Smoke.
	Seeds int
	// EvalHelper is the directory of evoq_eval.py, the Python helper the
	// stoplatency and train20 workloads' evaluators import (train20's
	// evoq_torch.py too). Defaults to the python
	// directory of the working directory or of its nearest parent that
	// has python/evoq_eval.py: the repository's, from its root and from
	// the directories go test runs in.
	EvalHelper string
	// Loop is the variant of the noop workload's plain loop, one of
	// LoopVariants; the target is judged only against LoopPlain. Defaults
	// to LoopPlain.
	Loop string
	// Against is a git revision (a commit, a branch, HEAD~3) whose evoq
	// binary is built and run beside Evoq on the same workloads, in
	// alternating rounds; only AgainstWorkloads can be compared. Defaults
	// to "": Evoq alone.
	Against string
	// Rounds is the number of alternating rounds with Against. Defaults
	// to RoundsDefault, or 1 with Smoke.
	Rounds int
	// Repo is the git repository Against is taken from. Defaults to the
	// one the working directory is in.
	Repo string
	// NB201Args are flags added to each evoq run of the nb201 workload:
	// the candidate settings a comparison of defaults measures. Defaults
	// to none, evoq's defaults.
	NB201Args []string
	// FidelityArgs are flags added to each early-stopping run of the
	// fidelity workload (not to its full-training runs), after its own,
	// so that they override them (--eta 2, --rung-select reached): the
	// settings a comparison of defaults measures. Defaults to none.
	FidelityArgs []string
	// FidelityRules are the early-stopping rules the fidelity workload
	// runs beside full training, of median and asha. Defaults to both.
	FidelityRules []string
	// NB201NoBaselines leaves the nb201 workload's Optuna baselines out,
	// and with them the targets that compare with them. Defaults to
	// false: they run, and Python must have Debian's python3-optuna.
	NB201NoBaselines bool
	// Train20Args are flags added to each evoq run of the train20
	// workload, so that other search settings can be measured on it.
	// Defaults to none.
	Train20Args []string
	// Train20RuleArgs are flags added to each early-stopping run of the
	// train20 workload (not to its full-training and --inherit runs),
	// such as --brackets 3. Defaults to none.
	Train20RuleArgs []string
	// Train20MinStep is the train20 workload's first rung, for evoq's
	// rules and Optuna's pruners alike. 0: the workload's, 3.
	Train20MinStep int
	// Train20Rules are the early-stopping rules the train20 workload runs
	// beside full training, of median and asha. Defaults to both.
	Train20Rules []string
	// Train20NoInherit leaves the train20 workload's --inherit run out.
	Train20NoInherit bool
	// Train20NoBaselines leaves the train20 workload's Optuna studies out,
	// and with them the target that compares with them. Defaults to
	// false: they run, and Python must have Debian's python3-optuna.
	Train20NoBaselines bool
	// Log receives one line as each workload starts: a full run takes
	// minutes. Defaults to io.Discard.
	Log io.Writer
}

func (c Config) withDefaults() Config {
	if len(c.Workloads) == 0 {
		c.Workloads = []string{"noop", "sim"}
	}
	if c.Python == "" {
		c.Python = PythonDefault
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Loop == "" {
		c.Loop = LoopPlain
	}
	if c.Rounds == 0 {
		c.Rounds = RoundsDefault
		if c.Smoke {
			c.Rounds = 1
		}
	}
	return c
}

func (c Config) validate() error {
	if c.Evoq == "" {
		return &ConfigError{Field: "Evoq", Reason: "no evoq binary to run"}
	}
	if _, err := os.Stat(c.Evoq); err != nil {
		return &ConfigError{Field: "Evoq", Value: c.Evoq, Reason: err.Error()}
	}
	if !slices.Contains(LoopVariants, c.Loop) {
		return &ConfigError{Field: "Loop", Value: c.Loop, Reason: fmt.Sprintf("want one of %s", strings.Join(LoopVariants, ", "))}
	}
	for _, rule := range c.FidelityRules {
		if rule != schema.RuleMedian && rule != schema.RuleASHA {
			return &ConfigError{Field: "FidelityRules", Value: rule, Reason: "want median or asha"}
		}
	}
	if c.Seeds < 0 {
		return &ConfigError{Field: "Seeds", Value: strconv.Itoa(c.Seeds), Reason: "want 1 or more (0 for the default)"}
	}
	if c.EvalHelper != "" {
		if _, err := os.Stat(filepath.Join(c.EvalHelper, evalHelperFile)); err != nil {
			return &ConfigError{Field: "EvalHelper", Value: c.EvalHelper, Reason: err.Error()}
		}
	}
	if c.DaskScript != "" {
		if _, err := os.Stat(c.DaskScript); err != nil {
			return &ConfigError{Field: "DaskScript", Value: c.DaskScript, Reason: err.Error()}
		}
	}
	if err := validateTrain20Args("Train20Args", c.Train20Args); err != nil {
		return err
	}
	if err := validateTrain20Args("Train20RuleArgs", c.Train20RuleArgs); err != nil {
		return err
	}
	for _, rule := range c.Train20Rules {
		if rule != schema.RuleMedian && rule != schema.RuleASHA {
			return &ConfigError{Field: "Train20Rules", Value: rule, Reason: "want median or asha"}
		}
	}
	if c.Train20MinStep < 0 || c.Train20MinStep >= train20Epochs {
		return &ConfigError{Field: "Train20MinStep", Value: strconv.Itoa(c.Train20MinStep),
			Reason: fmt.Sprintf("the first rung: want 1 to %d, below the %d epochs (0 for the workload's)", train20Epochs-1, train20Epochs)}
	}
	if c.Against != "" {
		return c.validateAgainst()
	}
	_, err := choose(c.Workloads)
	return err
}

func (c Config) validateAgainst() error {
	if c.Rounds < 1 {
		return &ConfigError{Field: "Rounds", Value: strconv.Itoa(c.Rounds), Reason: "want 1 or more"}
	}
	if c.VsDask {
		return &ConfigError{Field: "VsDask", Reason: "the Dask baseline does not change between revisions: run it without Against"}
	}
	for _, w := range c.Workloads {
		if findAgainst(w) == nil {
			return &ConfigError{Field: "Workloads", Value: w, Reason: "cannot be compared between revisions; want " + list(AgainstWorkloads)}
		}
	}
	return nil
}

// Report is what Run measured; its JSON form is what `evoq bench --json`
// prints.
type Report struct {
	Machine string `json:"machine"`
	// Smoke marks figures that mean nothing.
	Smoke bool   `json:"smoke"`
	Rows  []*Row `json:"workloads"`
	// Against is the comparisons of Config.Against, one per workload.
	Against []*Comparison `json:"against,omitempty"`
}

// Row is one workload's figures.
type Row struct {
	Workload string `json:"workload"`
	About    string `json:"about"`
	Target   string `json:"target"`
	// Evoq is the summary of `evoq run` (noop, sim, scale).
	Evoq *runstate.Summary `json:"evoq,omitempty"`
	// Dask is the Dask baseline's JSON figures, with VsDask.
	Dask map[string]any `json:"dask,omitempty"`
	// Ratios are evoq over Dask for rates and utilization, Dask over evoq
	// for gaps.
	Ratios map[string]float64 `json:"ratios,omitempty"`
	Memory *Memory            `json:"memory,omitempty"`
	// Replay is what the restarted controller's summary says of its replay.
	Replay *runstate.Replay `json:"replay,omitempty"`
	// Fidelity is the fidelity workload's figures.
	Fidelity *Fidelity `json:"fidelity,omitempty"`
	// StopLatency is the stoplatency workload's figures.
	StopLatency *StopLatency `json:"stop_latency,omitempty"`
	// Inherit is the inherit workload's figures.
	Inherit *Inherit `json:"inherit,omitempty"`
	// Preempt is the preempt workload's figures.
	Preempt *Preempt `json:"preempt,omitempty"`
	// ZDT is the zdt workload's figures.
	ZDT *ZDT `json:"zdt,omitempty"`
	// NB201 is the nb201 workload's figures.
	NB201 *NB201 `json:"nb201,omitempty"`
	// Train20 is the train20 workload's figures.
	Train20 *Train20 `json:"train20,omitempty"`
	// Scale is the exascale workload's figures.
	Scale *Scale `json:"scale,omitempty"`
	// Growth is the growth workload's figures.
	Growth *Growth `json:"growth,omitempty"`
	// Bound is the noop workload's rate beside the plain loop's.
	Bound *Bound `json:"bound,omitempty"`
	// Met says whether the target was met; nil for a smoke run, which
	// measures nothing.
	Met  *bool  `json:"met,omitempty"`
	Note string `json:"note,omitempty"`
}

// Memory is the memory workload's figures: the controller's resident size
// early in the run and at its end.
type Memory struct {
	Evaluations int     `json:"evaluations"`
	Sampled     int     `json:"sampled_at"` // results stored when the first size was taken
	RSSFirstMB  float64 `json:"rss_first_mb"`
	RSSEndMB    float64 `json:"rss_end_mb"`
	RSSPeakMB   float64 `json:"rss_peak_mb"`
	Ratio       float64 `json:"ratio"`
	Pool        int     `json:"pool"`
	EvalsPerS   float64 `json:"evals_per_s"`
}

// Run runs the workloads of cfg one after the other. On error it returns
// the rows measured so far with it.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	chosen, _ := choose(cfg.Workloads) // validate checked them (all but Against's own)
	r := &runner{cfg: cfg, rep: &Report{Machine: machine(), Smoke: cfg.Smoke}}
	defer r.close()
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	if cfg.Against != "" {
		return r.rep, r.runAgainst(ctx)
	}
	for _, w := range chosen {
		if err := ctx.Err(); err != nil {
			return r.rep, err
		}
		fmt.Fprintf(cfg.Log, "evoq bench: %s: %s\n", w.name, w.about)
		if err := r.run(ctx, w); err != nil {
			return r.rep, fmt.Errorf("workload %s: %w", w.name, err)
		}
	}
	return r.rep, nil
}

// runner is one Run: its report, and what its workloads leave for later
// ones and for the end.
type runner struct {
	cfg Config
	rep *Report
	// memory is the memory workload's broker, kept for replay; nil before.
	memory *memoryRun
	// exascale is the exascale workload's figures, for growth; nil before.
	exascale *Scale
	cleanup  []func()
}

func (r *runner) close() {
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		r.cleanup[i]()
	}
}

// prepare makes the store directory, finds the stoplatency workload's
// Python helper and, with VsDask, checks the Python and writes out the
// baseline script before anything runs, so that a missing Dask or helper
// fails at once and not after minutes of evoq workloads.
func (r *runner) prepare(ctx context.Context) error {
	if r.cfg.Dir == "" {
		d, err := os.MkdirTemp("", "evoq-bench-")
		if err != nil {
			return fmt.Errorf("store directory: %w", err)
		}
		r.cleanup = append(r.cleanup, func() { os.RemoveAll(d) })
		r.cfg.Dir = d
	} else if err := os.MkdirAll(r.cfg.Dir, 0o755); err != nil {
		return &ConfigError{Field: "Dir", Value: r.cfg.Dir, Reason: err.Error()}
	}
	if slices.Contains(r.cfg.Workloads, "stoplatency") || slices.Contains(r.cfg.Workloads, "train20") {
		if err := r.prepareStopLatency(ctx); err != nil {
			return err
		}
	}
	if slices.Contains(r.cfg.Workloads, "train20") {
		if err := r.prepareTrain20(ctx); err != nil {
			return err
		}
	}
	if !r.cfg.VsDask {
		return nil
	}
	if err := checkDask(ctx, r.cfg.Python); err != nil {
		return err
	}
	if r.cfg.DaskScript == "" {
		path, err := writeScript()
		if err != nil {
			return err
		}
		r.cleanup = append(r.cleanup, func() { os.Remove(path) })
		r.cfg.DaskScript = path
	}
	return nil
}

func (r *runner) run(ctx context.Context, w *workload) error {
	row := &Row{Workload: w.name, About: w.about, Target: w.target}
	r.rep.Rows = append(r.rep.Rows, row)
	var err error
	switch w.name {
	case "memory":
		err = r.runMemory(ctx, row)
	case "exascale":
		err = r.runExascale(ctx, row)
	case "growth":
		err = r.runGrowth(ctx, row)
	case "replay":
		err = r.runReplay(ctx, row)
	case "fidelity":
		err = r.runFidelity(ctx, row)
	case "stoplatency":
		err = r.runStopLatency(ctx, row)
	case "inherit":
		err = r.runInherit(ctx, row)
	case "preempt":
		err = r.runPreempt(ctx, row)
	case "zdt":
		err = r.runZDT(ctx, row)
	case "nb201":
		err = r.runNB201(ctx, row)
	case "train20":
		err = r.runTrain20(ctx, row)
	default:
		err = r.runEvoq(ctx, w, row)
	}
	if err == nil && !r.cfg.Smoke && w.name != "growth" && w.name != "preempt" { // measured, not judged
		ok := met(row)
		row.Met = &ok
	}
	return err
}

// runEvoq runs `evoq run` with the workload's flags and, with VsDask, its
// Dask counterpart.
func (r *runner) runEvoq(ctx context.Context, w *workload, row *Row) error {
	args, dargs := w.args, w.dask
	if r.cfg.Smoke {
		args, dargs = w.smokeArgs, w.smokeDask
	}
	if w.name == "noop" {
		return r.runNoop(ctx, w, row, args, dargs)
	}
	sum, err := r.evoqRun(ctx, w.name, args)
	if err != nil {
		return err
	}
	row.Evoq = sum
	return r.vsDask(ctx, row, dargs)
}

// vsDask runs the Dask counterpart of row's workload, with VsDask.
func (r *runner) vsDask(ctx context.Context, row *Row, dargs []string) error {
	sum := row.Evoq
	var err error
	switch {
	case r.cfg.VsDask && dargs != nil:
		if row.Dask, err = daskRun(ctx, r.cfg.Python, r.cfg.DaskScript, dargs); err != nil {
			return err
		}
		row.Ratios = ratios(sum, row.Dask)
	case r.cfg.VsDask:
		row.Note = "no Dask run: 10,000 Dask worker threads are beyond what the yardstick's loop is for"
	}
	return nil
}

// machine describes this machine in one line.
func machine() string {
	cpus := 0
	model := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "processor") {
				cpus++
			}
			if model == "" && strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					model = strings.TrimSpace(v)
				}
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0]); len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mem = fmt.Sprintf(", %.0f GiB", kb/1024/1024)
		}
	}
	return fmt.Sprintf("%d CPUs (%s)%s", cpus, model, mem)
}
