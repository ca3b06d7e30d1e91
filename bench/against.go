package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// With Config.Against, Run builds the evoq binary of another revision and
// runs the noop and sim workloads with it and with Config.Evoq in turns,
// Config.Rounds times, so that the machine's noise falls on both. Every
// figure is computed from each run's exported results (`evoq export
// --format jsonl`, by the binary that made the run), not from its summary:
// what a summary means changes between revisions, a result's start, stop,
// worker and slot do not.

// RoundsDefault is the number of alternating rounds of Config.Against: the
// median of three is the least that drops one noisy round.
const RoundsDefault = 3

// AgainstWorkloads are the workloads Config.Against can run: those whose
// figures a run's results alone give.
var AgainstWorkloads = []string{"noop", "sim"}

// SimGapTarget is the sim workload's gap p99 target, in milliseconds.
const SimGapTarget = 5.0

// againstWorkload is one workload of Config.Against: the flags of `evoq
// run` after the store's, full and smoke. Only flags that evoq run has
// had since 0e61128 (2026-11-30): the other revision gets the same
// command, and checkFlags refuses one it does not know.
type againstWorkload struct {
	name, about     string
	args, smokeArgs []string
	target          string
}

var againstWorkloads = []*againstWorkload{
	{name: "noop", about: "no-op evaluations, 8 slots in 2 worker processes, with the plain nats.go loop in every round",
		args:      []string{"--evaluator", "noop", "--slots", "8", "--workers", "2", "--budget", "20000"},
		smokeArgs: []string{"--evaluator", "noop", "--slots", "8", "--workers", "2", "--budget", "300"},
		target:    fmt.Sprintf("evoq / plain loop >= %g (median of the rounds' shares)", BoundTarget)},
	{name: "sim", about: "simulated training, 92 slots in 2 worker processes, mean 0.2 s, 30% infeasible at once",
		args: []string{"--evaluator", "sim", "--slots", "92", "--workers", "2", "--budget", "2000",
			"--sim-mean", "0.2", "--sim-fail", "0.3"},
		smokeArgs: []string{"--evaluator", "sim", "--slots", "16", "--workers", "2", "--budget", "200",
			"--sim-mean", "0.02", "--sim-fail", "0.3"},
		target: fmt.Sprintf("gap p99 <= %g ms (median of the rounds)", SimGapTarget)},
}

func findAgainst(name string) *againstWorkload {
	for _, w := range againstWorkloads {
		if w.name == name {
			return w
		}
	}
	return nil
}

// runFlags are the flags of `evoq run` that every against run passes
// before its workload's: a store of its own, any free port on loopback,
// warnings only.
func runFlags(dir string) []string {
	return []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--log-level", "warn"}
}

// Comparison is one workload run by both binaries in alternating rounds.
type Comparison struct {
	Workload string `json:"workload"`
	About    string `json:"about"`
	// Command is the evoq run command both binaries ran, store flags
	// left out.
	Command string `json:"command"`
	Rounds  int    `json:"rounds"`
	// This is Config.Evoq's runs, Ref the other revision's.
	This *Side `json:"this"`
	Ref  *Side `json:"ref"`
	// Loop is the noop workload's plain loop, one run a round, after both
	// binaries' runs of the round.
	Loop []*Loop `json:"loop,omitempty"`
	// Ratio is This's median over Ref's, figure by figure: above 1 is
	// better for rates, utilization and shares of the loop, worse for
	// gaps and CPU.
	Ratio  map[string]float64 `json:"ratio"`
	Target string             `json:"target"`
	// Met says whether This met the target; nil for a smoke run.
	Met *bool `json:"met,omitempty"`
	// RefMet says whether Ref would have; nil for a smoke run.
	RefMet *bool `json:"ref_met,omitempty"`
}

// Side is one binary's rounds of a Comparison.
type Side struct {
	// Label names the binary: "this" or the revision asked for.
	Label string `json:"label"`
	// Revision is the commit the binary was built from, with "+dirty"
	// when its working tree had changes; "" when the binary does not say.
	Revision string `json:"revision"`
	// WorkTree, when the binary does not say its revision, is the
	// repository's HEAD commit, with "+changes" when its working tree
	// has uncommitted changes: what the binary was likely built from.
	WorkTree string     `json:"work_tree,omitempty"`
	Runs     []*Figures `json:"runs"`
	// Median is each figure's median over Runs.
	Median *Figures `json:"median"`
}

// Figures are one run's, computed from its exported results.
type Figures struct {
	// Evaluations are the results a slot evaluated (every status but
	// lost), duplicates included: each took slot time.
	Evaluations int `json:"evaluations"`
	// Slots is the number of distinct worker slots that evaluated.
	Slots int `json:"slots"`
	// EvalsPerS is Evaluations over the time from the first evaluation's
	// start to the last one's stop.
	EvalsPerS float64 `json:"evals_per_s"`
	// UtilSteady is the slot time spent in evaluations within the window
	// from the first evaluation's start to the last one's start, over
	// Slots times that window.
	UtilSteady float64 `json:"util_steady"`
	// GapP50Ms and GapP99Ms are quantiles of a slot's time from one
	// evaluation's stop to its next one's start.
	GapP50Ms float64 `json:"gap_p50_ms"`
	GapP99Ms float64 `json:"gap_p99_ms"`
	// WallS is the evoq run process's time from start to exit; CPUPerEvalUs
	// the CPU time of it and its worker processes, over Evaluations.
	WallS        float64 `json:"wall_s"`
	CPUPerEvalUs float64 `json:"cpu_per_eval_us"`
	// LoopShare is, for noop, EvalsPerS over the plain loop's rate in the
	// same round.
	LoopShare float64 `json:"loop_share,omitempty"`
}

// figureNames are Figures' JSON names in the order they are compared.
var figureNames = []string{"evals_per_s", "util_steady", "gap_p50_ms", "gap_p99_ms", "cpu_per_eval_us", "loop_share"}

// get is the figure of that JSON name.
func (f *Figures) get(name string) float64 {
	switch name {
	case "evals_per_s":
		return f.EvalsPerS
	case "util_steady":
		return f.UtilSteady
	case "gap_p50_ms":
		return f.GapP50Ms
	case "gap_p99_ms":
		return f.GapP99Ms
	case "cpu_per_eval_us":
		return f.CPUPerEvalUs
	case "loop_share":
		return f.LoopShare
	case "wall_s":
		return f.WallS
	}
	panic("bench: no figure " + name)
}

// medianFigures is each figure's median over runs.
func medianFigures(runs []*Figures) *Figures {
	m := func(name string) float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = r.get(name)
		}
		return sig4(median(xs))
	}
	ints := func(get func(*Figures) int) int {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = float64(get(r))
		}
		return int(median(xs))
	}
	return &Figures{Evaluations: ints(func(f *Figures) int { return f.Evaluations }),
		Slots:     ints(func(f *Figures) int { return f.Slots }),
		EvalsPerS: m("evals_per_s"), UtilSteady: m("util_steady"), GapP50Ms: m("gap_p50_ms"), GapP99Ms: m("gap_p99_ms"),
		WallS: m("wall_s"), CPUPerEvalUs: m("cpu_per_eval_us"), LoopShare: m("loop_share")}
}

// ratios divides this side's medians by ref's, figure by figure; a zero
// divisor gives no ratio.
func (c *Comparison) ratios() {
	c.Ratio = map[string]float64{}
	for _, name := range figureNames {
		if b := c.Ref.Median.get(name); b > 0 {
			c.Ratio[name] = sig4(c.This.Median.get(name) / b)
		}
	}
}

// judge sets Met and RefMet from the medians.
func (c *Comparison) judge() {
	ok := func(f *Figures) *bool {
		var v bool
		switch c.Workload {
		case "noop":
			v = f.LoopShare >= BoundTarget
		case "sim":
			v = f.GapP99Ms <= SimGapTarget
		}
		return &v
	}
	c.Met, c.RefMet = ok(c.This.Median), ok(c.Ref.Median)
}

// runAgainst runs the comparisons of cfg.Against.
func (r *runner) runAgainst(ctx context.Context) error {
	ref, err := buildRevision(ctx, r.cfg.Repo, r.cfg.Against, r.cfg.Dir, r.cfg.Log)
	if err != nil {
		return err
	}
	this := &revision{label: "this", bin: r.cfg.Evoq, commit: binaryRevision(r.cfg.Evoq)}
	if this.commit == "" {
		this.workTree = workTree(ctx, ref.repo)
	}
	for _, name := range r.cfg.Workloads {
		w := findAgainst(name)
		args := w.args
		if r.cfg.Smoke {
			args = w.smokeArgs
		}
		if err := checkFlags(ctx, args, this, ref); err != nil {
			return err
		}
		fmt.Fprintf(r.cfg.Log, "evoq bench: %s: %s; this and %s, %d round(s)\n", w.name, w.about, ref.label, r.cfg.Rounds)
		c, err := r.compare(ctx, w, args, this, ref)
		if c != nil {
			r.rep.Against = append(r.rep.Against, c)
		}
		if err != nil {
			return fmt.Errorf("workload %s: %w", w.name, err)
		}
	}
	return nil
}

// compare runs one workload with both binaries, this first in odd rounds
// and ref first in even ones, and with noop the plain loop after both.
func (r *runner) compare(ctx context.Context, w *againstWorkload, args []string, this, ref *revision) (*Comparison, error) {
	c := &Comparison{Workload: w.name, About: w.about, Command: "evoq run " + strings.Join(args, " "), Rounds: r.cfg.Rounds,
		This: &Side{Label: this.label, Revision: this.commit, WorkTree: this.workTree}, Ref: &Side{Label: ref.label, Revision: ref.commit}, Target: w.target}
	for i := range r.cfg.Rounds {
		order := []*revision{this, ref}
		if i%2 == 1 {
			order = []*revision{ref, this}
		}
		got := map[*revision]*Figures{}
		for _, rev := range order {
			dir := filepath.Join(r.cfg.Dir, "against", fmt.Sprintf("%s-%s-%d", w.name, rev.dirName(), i+1))
			f, err := r.measure(ctx, rev.bin, dir, args)
			if err != nil {
				return c, fmt.Errorf("%s, round %d: %w", rev.label, i+1, err)
			}
			got[rev] = f
		}
		if w.name == "noop" {
			slots, procs, budget := argInt(args, "--slots"), argInt(args, "--workers"), argInt(args, "--budget")
			loop, err := r.runLoop(ctx, filepath.Join(r.cfg.Dir, "against", fmt.Sprintf("loop-%d", i+1)), r.cfg.Loop, slots, procs, budget)
			if err != nil {
				return c, fmt.Errorf("plain loop, round %d: %w", i+1, err)
			}
			c.Loop = append(c.Loop, loop)
			for _, f := range got {
				f.LoopShare = sig4(f.EvalsPerS / loop.EvalsPerS)
			}
		}
		c.This.Runs, c.Ref.Runs = append(c.This.Runs, got[this]), append(c.Ref.Runs, got[ref])
	}
	c.This.Median, c.Ref.Median = medianFigures(c.This.Runs), medianFigures(c.Ref.Runs)
	c.ratios()
	if !r.cfg.Smoke {
		c.judge()
	}
	return c, nil
}

// revision is one of the two binaries compared.
type revision struct {
	label  string // "this", or the revision as asked for
	bin    string
	commit string // the commit it was built from; "" if unknown
	// workTree is, for an unstamped binary, the repository's HEAD and
	// whether its working tree has changes.
	workTree string
	repo     string // the repository it was built from, for a built one
}

// dirName is the revision's label as a file name.
func (v *revision) dirName() string {
	return strings.Map(func(c rune) rune {
		if c == '/' || c == '~' || c == '^' || c == ':' || c == ' ' {
			return '_'
		}
		return c
	}, v.label)
}
