package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/evoq/evoq/bench"
)

// benchCmd runs named workloads end to end with real worker processes over
// TCP, and with --vs-dask the same workload on Dask distributed; package
// bench does the work.
type benchCmd struct {
	env                         Env
	workloads                   string
	vsDask                      bool
	smoke                       bool
	jsonOut                     bool
	python                      string
	script                      string
	dir                         string
	seeds                       int
	helper                      string
	loop                        string
	against                     string
	rounds                      int
	repo                        string
	nb201Args                   string
	fidelityArgs, fidelityRules string
	nb201Base                   bool
	t20Args, t20RuleArgs        string
	t20Rules                    string
	t20MinStep                  int
	t20Base, t20Inherit         bool
}

func (c *benchCmd) Run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == bench.LoopWorkerCommand {
		return c.loopWorker(ctx, args[1:])
	}
	fs := newFlagSet("bench", "Runs named workloads end to end with real worker processes over TCP and prints evoq run's figures;\n"+
		"with --vs-dask the same workload on Dask distributed too, side by side with ratios.\n"+
		"Workloads: noop, sim, scale, memory, replay (replay reads the store the memory workload wrote),\n"+
		"fidelity (full training against early stopping), inherit (the mlp search from scratch against --inherit),\n"+
		"preempt (workers cut by short walltimes and requeued, with sim's progress checkpoints and without),\n"+
		"stoplatency (a persistent Python evaluator's stop answers) and zdt (several objectives: zdt1 and zdt2\n"+
		"against their true fronts and the textbook NSGA-II), nb201 (NAS-Bench-201's ImageNet16-120 landscape\n"+
		"against Optuna TPE and random search), train20 (PyTorch training: full training, early stopping and --inherit\n"+
		"against Optuna TPE with and without its pruners).", c.env.Stderr)
	fs.StringVar(&c.workloads, "workload", "noop,sim", "comma-separated workloads, or all")
	fs.BoolVar(&c.vsDask, "vs-dask", false, "run the Dask baseline of each workload too (needs Debian's python3-distributed)")
	fs.BoolVar(&c.smoke, "smoke", false, "one short iteration of each workload: checks that the bench runs, measures nothing")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object")
	fs.StringVar(&c.python, "python", bench.PythonDefault, "the Python that has dask.distributed; the stoplatency and train20 evaluators (and the Optuna baselines) run with it too")
	fs.StringVar(&c.script, "dask-script", "", "the Dask baseline script (default: the one built into evoq, bench/dask_baseline.py)")
	fs.StringVar(&c.dir, "dir", "", "directory for the runs' stores (default: a temporary directory, removed afterwards)")
	fs.IntVar(&c.seeds, "seeds", 0, "fidelity, inherit, preempt, zdt, nb201 and train20: seeds 1..N (default 5, preempt 3, nb201 10, train20 3; 1 with --smoke)")
	fs.StringVar(&c.nb201Args, "nb201-args", "", "nb201: evoq run flags added to each of its evoq runs, space-separated, such as '--replace oldest --pool 20': the settings a comparison of defaults measures")
	fs.StringVar(&c.fidelityArgs, "fidelity-args", "", "fidelity: evoq run flags added to each early-stopping run (not the full-training runs), space-separated, such as '--eta 2 --rung-select reached': the settings a comparison of defaults measures")
	fs.StringVar(&c.fidelityRules, "fidelity-rules", "median,asha", "fidelity: comma-separated early-stopping rules run beside full training: median, asha or both")
	fs.BoolVar(&c.nb201Base, "nb201-baselines", true, "nb201: run the Optuna TPE and random search baselines (needs Debian's python3-optuna); false leaves them, and the targets against them, out")
	fs.StringVar(&c.t20Args, "train20-args", "", "train20: evoq run flags added to each of its evoq runs, space-separated, such as '--pool 10': the settings a comparison measures")
	fs.StringVar(&c.t20RuleArgs, "train20-rule-args", "", "train20: evoq run flags added to each early-stopping run (not the full-training and --inherit runs), such as '--brackets 3'")
	fs.StringVar(&c.t20Rules, "train20-rules", "median,asha", "train20: comma-separated early-stopping rules run beside full training: median, asha or both")
	fs.IntVar(&c.t20MinStep, "train20-min-step", 0, "train20: the first rung in epochs, for evoq's rules and Optuna's pruners alike (0: the workload's, 3)")
	fs.BoolVar(&c.t20Inherit, "train20-inherit", true, "train20: run the full search again with --inherit; false leaves it out")
	fs.BoolVar(&c.t20Base, "train20-baselines", true, "train20: run the Optuna TPE studies, without a pruner and with two (needs Debian's python3-optuna); false leaves them, and the target against them, out")
	fs.StringVar(&c.loop, "loop", bench.LoopPlain, "noop: the plain loop beside evoq: "+strings.Join(bench.LoopVariants, ", ")+
		" (batched: a worker process's ready results in one message; small: results with a digest instead of the design; the target is judged against plain only)")
	fs.StringVar(&c.against, "against", "", "a git revision (commit, branch, HEAD~3) to build and run beside this binary on noop and sim, "+
		"in alternating rounds; figures from each run's exported results")
	fs.IntVar(&c.rounds, "rounds", bench.RoundsDefault, "with --against: alternating rounds (1 with --smoke unless given)")
	fs.StringVar(&c.repo, "repo", "", "with --against: the git repository of the revision (default: the working directory's)")
	fs.StringVar(&c.helper, "eval-helper", "", "stoplatency and train20: directory of evoq_eval.py (default: python/ of the working directory or its nearest parent that has it)")
	if err := parse(fs, args); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the evoq binary: %w", err)
	}
	cfg := bench.Config{Evoq: exe, VsDask: c.vsDask, Smoke: c.smoke, Python: c.python,
		DaskScript: c.script, Dir: c.dir, Log: c.env.Stderr, Workloads: bench.Names(), Seeds: c.seeds, EvalHelper: c.helper, Loop: c.loop,
		Against: c.against, Repo: c.repo, NB201Args: strings.Fields(c.nb201Args), NB201NoBaselines: !c.nb201Base,
		FidelityArgs: strings.Fields(c.fidelityArgs), FidelityRules: strings.Split(c.fidelityRules, ","),
		Train20Args: strings.Fields(c.t20Args), Train20NoBaselines: !c.t20Base, Train20RuleArgs: strings.Fields(c.t20RuleArgs),
		Train20Rules: strings.Split(c.t20Rules, ","), Train20MinStep: c.t20MinStep, Train20NoInherit: !c.t20Inherit}
	if c.against == "" && (isSet(fs, "rounds") || isSet(fs, "repo")) {
		return usageErr("--rounds and --repo: with --against only")
	}
	if isSet(fs, "rounds") && c.rounds < 1 {
		return usageErr("--rounds %d: want 1 or more", c.rounds)
	}
	if c.against != "" && (isSet(fs, "rounds") || !c.smoke) {
		cfg.Rounds = c.rounds
	}
	if c.against != "" && c.workloads == "all" {
		cfg.Workloads = bench.AgainstWorkloads
	} else if c.workloads != "all" {
		cfg.Workloads = strings.Split(c.workloads, ",")
		for i, w := range cfg.Workloads {
			cfg.Workloads[i] = strings.TrimSpace(w)
		}
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return benchFlagErr(err)
	}
	return c.print(rep)
}

// benchFlagErr names the flag of a bench.Config field.
func benchFlagErr(err error) error {
	var ce *bench.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	flag := map[string]string{"Workloads": "--workload", "Python": "--python", "DaskScript": "--dask-script",
		"Dir": "--dir", "Seeds": "--seeds", "EvalHelper": "--eval-helper", "Loop": "--loop",
		"Against": "--against", "Rounds": "--rounds", "Repo": "--repo", "VsDask": "--vs-dask",
		"Train20Args": "--train20-args", "Train20RuleArgs": "--train20-rule-args", "Train20Rules": "--train20-rules",
		"Train20MinStep": "--train20-min-step", "FidelityRules": "--fidelity-rules"}[ce.Field]
	if flag == "" {
		return err
	}
	if ce.Value != "" {
		flag += " " + ce.Value
	}
	return usageErr("%s: %s", flag, ce.Reason)
}

func (c *benchCmd) print(rep *bench.Report) error {
	if c.jsonOut {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.env.Stdout, "%s\n", b)
		return err
	}
	w := tabwriter.NewWriter(c.env.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "machine: %s%s\n\n", rep.Machine, map[bool]string{true: " (smoke run: figures mean nothing)", false: ""}[rep.Smoke])
	for _, cmp := range rep.Against {
		if err := w.Flush(); err != nil {
			return err
		}
		printComparison(c.env.Stdout, cmp, rep.Smoke)
	}
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "%s: %s\n", r.Workload, r.About)
		switch {
		case r.Evoq != nil:
			printEvoqRow(w, r)
			if b := r.Bound; b != nil {
				fmt.Fprintf(w, "  plain nats.go loop (%s)\t%d slots in %d processes, %d evaluations a round, evoq then the loop, %d rounds\n", b.Variant, b.Slots, b.Procs, b.Budget, b.Rounds)
				for i := range b.Evoq {
					fmt.Fprintf(w, "  round %d\tevoq %g/s, %g µs CPU each\tloop %g/s, %g µs CPU each, results in %d messages\t%.3gx\n",
						i+1, b.Evoq[i], b.EvoqCPUUs[i], b.Loop[i], b.LoopCPUUs[i], b.ResultMsgs[i], b.Evoq[i]/b.Loop[i])
				}
				fmt.Fprintf(w, "  evoq / loop (median)\t%gx\n", b.Share)
			}
		case r.Scale != nil:
			printScale(w, r.Scale)
		case r.Growth != nil:
			if err := w.Flush(); err != nil { // the tables below align their own columns
				return err
			}
			printGrowth(c.env.Stdout, r.Growth)
		case r.Memory != nil:
			m := r.Memory
			fmt.Fprintf(w, "  controller RSS after %d evaluations\t%g MB\n", m.Sampled, m.RSSFirstMB)
			fmt.Fprintf(w, "  controller RSS after %d evaluations\t%g MB (peak %g MB)\n", m.Evaluations, m.RSSEndMB, m.RSSPeakMB)
			fmt.Fprintf(w, "  ratio\t%g (pool of %d designs)\n", m.Ratio, m.Pool)
			fmt.Fprintf(w, "  evals_per_s\t%g\n", m.EvalsPerS)
		case r.Replay != nil:
			fmt.Fprintf(w, "  results replayed\t%d in %g s\n", r.Replay.Results, r.Replay.Seconds)
			fmt.Fprintf(w, "  results_per_s\t%g\n", r.Replay.ResultsPerS)
		case r.Fidelity != nil:
			if err := w.Flush(); err != nil { // the table below aligns its own columns
				return err
			}
			printFidelity(c.env.Stdout, r.Fidelity, rep.Smoke)
		case r.StopLatency != nil:
			printStopLatency(w, r.StopLatency)
		case r.Inherit != nil:
			if err := w.Flush(); err != nil { // the table below aligns its own columns
				return err
			}
			printInherit(c.env.Stdout, r.Inherit, rep.Smoke)
		case r.Preempt != nil:
			if err := w.Flush(); err != nil { // the table below aligns its own columns
				return err
			}
			r.Preempt.Print(c.env.Stdout, rep.Smoke)
		case r.ZDT != nil:
			if err := w.Flush(); err != nil { // the table below aligns its own columns
				return err
			}
			r.ZDT.Print(c.env.Stdout, rep.Smoke)
		case r.NB201 != nil:
			if err := w.Flush(); err != nil { // the tables below align their own columns
				return err
			}
			r.NB201.Print(c.env.Stdout, rep.Smoke)
		case r.Train20 != nil:
			if err := w.Flush(); err != nil { // the table below aligns its own columns
				return err
			}
			r.Train20.Print(c.env.Stdout, rep.Smoke)
		}
		if r.Note != "" {
			fmt.Fprintf(w, "  note\t%s\n", r.Note)
		}
		verdict := "met"
		switch {
		case rep.Smoke:
			verdict = "not judged (smoke run)"
		case r.Met == nil:
			verdict = "not judged"
		case !*r.Met:
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "  target\t%s: %s\n\n", r.Target, verdict)
	}
	return w.Flush()
}

// printComparison prints one workload of --against: each round's figures
// of both binaries, their medians, the ratios of this binary's medians to
// the other's and the target.
func printComparison(out io.Writer, c *bench.Comparison, smoke bool) {
	fmt.Fprintf(out, "%s: %s\n  command: %s\n", c.Workload, c.About, c.Command)
	rev := func(s *bench.Side) string {
		switch {
		case s.Revision != "":
			return s.Label + " = " + s.Revision
		case s.WorkTree != "":
			return s.Label + " = a binary without its revision stamped; the working tree is at " + s.WorkTree
		}
		return s.Label + " = a binary without its revision stamped"
	}
	rounds := fmt.Sprintf("%d rounds, the two in turns (this first in odd rounds)", c.Rounds)
	if c.Rounds == 1 {
		rounds = "1 round"
	}
	fmt.Fprintf(out, "  %s\n  %s\n  %s\n", rev(c.This), rev(c.Ref), rounds)
	noop := len(c.Loop) > 0
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	head := "  round\tbinary\tevaluations\tevals/s\tutil_steady\tgap p50 ms\tgap p99 ms\tµs CPU each\twall s\t"
	if noop {
		head += "loop evals/s, µs CPU each\tevoq / loop\t"
	}
	fmt.Fprintln(w, head)
	row := func(round, label string, f *bench.Figures, loop string) {
		fmt.Fprintf(w, "  %s\t%s\t%d\t%g\t%g\t%g\t%g\t%g\t%g\t", round, label, f.Evaluations, f.EvalsPerS, f.UtilSteady,
			f.GapP50Ms, f.GapP99Ms, f.CPUPerEvalUs, f.WallS)
		if noop {
			fmt.Fprintf(w, "%s\t%g\t", loop, f.LoopShare)
		}
		fmt.Fprintln(w)
	}
	for i := range c.This.Runs {
		loop := ""
		if noop {
			loop = fmt.Sprintf("%g, %g", c.Loop[i].EvalsPerS, c.Loop[i].CPUPerEvalUs)
		}
		row(fmt.Sprint(i+1), c.This.Label, c.This.Runs[i], loop)
		row(fmt.Sprint(i+1), c.Ref.Label, c.Ref.Runs[i], loop)
	}
	row("median", c.This.Label, c.This.Median, "")
	row("median", c.Ref.Label, c.Ref.Median, "")
	ratio := func(name string) string {
		if v, ok := c.Ratio[name]; ok {
			return fmt.Sprintf("%gx", v)
		}
		return "-"
	}
	fmt.Fprintf(w, "  ratio\tthis / %s\t\t%s\t%s\t%s\t%s\t%s\t\t", c.Ref.Label, ratio("evals_per_s"), ratio("util_steady"),
		ratio("gap_p50_ms"), ratio("gap_p99_ms"), ratio("cpu_per_eval_us"))
	if noop {
		fmt.Fprintf(w, "\t%s\t", ratio("loop_share"))
	}
	fmt.Fprintln(w)
	_ = w.Flush()
	verdict := func(m *bool) string {
		if m == nil {
			return "not judged (smoke run)"
		}
		return map[bool]string{true: "met", false: "MISSED"}[*m]
	}
	if smoke {
		fmt.Fprintf(out, "  target: %s: not judged (smoke run)\n\n", c.Target)
		return
	}
	fmt.Fprintf(out, "  target: %s: this %s, %s %s\n\n", c.Target, verdict(c.Met), c.Ref.Label, verdict(c.RefMet))
}

// printEvoqRow prints evoq's figures beside Dask's and their ratios.
func printEvoqRow(w *tabwriter.Writer, r *bench.Row) {
	fmt.Fprintf(w, "  figure\tevoq\tdask\tratio\n")
	d := func(k string) string {
		if v, ok := r.Dask[k]; ok {
			return fmt.Sprint(v)
		}
		return "-"
	}
	ratio := func(k string) string {
		if v, ok := r.Ratios[k]; ok {
			return fmt.Sprintf("%gx", v)
		}
		return ""
	}
	s := r.Evoq
	fmt.Fprintf(w, "  evaluations\t%d\t%s\t\n", s.Evaluations, d("evaluations"))
	fmt.Fprintf(w, "  evals_per_s\t%g\t%s\t%s\n", s.EvalsPerS, d("evals_per_s"), ratio("evals_per_s"))
	fmt.Fprintf(w, "  slots / used\t%d / %d\t%s / %s\t\n", s.Slots, s.SlotsUsed, d("slots"), d("slots_used"))
	fmt.Fprintf(w, "  util_steady\t%g\t%s\t%s\n", s.UtilSteady, d("util_steady"), ratio("util_steady"))
	fmt.Fprintf(w, "  gap_p50_ms\t%g\t%s\t%s\n", s.GapP50Ms, d("gap_p50_ms"), ratio("gap_p50_ms (dask/evoq)"))
	fmt.Fprintf(w, "  gap_p99_ms\t%g\t%s\t%s\n", s.GapP99Ms, d("gap_p99_ms"), ratio("gap_p99_ms (dask/evoq)"))
	fmt.Fprintf(w, "  wall_s\t%g\t%s\t\n", s.WallS, d("wall_s"))
}

// printFidelity prints the fidelity workload's runs, one row per run of
// each seed, then each rule's medians, the decision times and the two
// halves of the target.
func printFidelity(out io.Writer, f *bench.Fidelity, smoke bool) {
	s := f.Settings
	fmt.Fprintf(out, "  %d slots in %d worker processes; sim curves of %d steps, mean %g s a design; early stopping with min-step 1, eta 3, max-step %d\n",
		s.Slots, s.Workers, s.Steps, s.SimMeanS, s.Steps)
	fmt.Fprintf(out, "  budgets in designs: full %d, median %d, asha %d; seeds 1..%d; slot-seconds count time inside evaluations only\n",
		s.Budget, s.Budget*s.Factor["median"], s.Budget*s.Factor["asha"], s.Seeds)
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  seed\trun\tok / stopped\tbest\tslot-s\twall s\tcpu\treached full's best\tbest at equal slot-s\n")
	for _, fs := range f.Seeds {
		full := fs.Full
		fmt.Fprintf(w, "  %d\tfull\t%d / %d\t%.4f\t%g\t%g\t%g\tits best at %s\t\n", fs.Seed, full.OK, full.Stopped, full.Best,
			full.SlotS, full.WallS, full.CPUShare, pct(fs.FullBestShare))
		for _, r := range fs.Rules {
			reached := fmt.Sprintf("not reached (best %.4f)", r.Best)
			if r.Reached {
				reached = fmt.Sprintf("at %s (%g slot-s)", pct(r.ReachedShare), r.ReachedSlotS)
			}
			equal := fmt.Sprintf("%.4f (%+.4f), %d designs", r.BestAtEqual, r.Delta, r.DesignsAtEqual)
			if r.Short {
				equal += fmt.Sprintf("; ended short at %s: its final best", pct(r.Coverage))
			}
			fmt.Fprintf(w, "  %d\t%s\t%d / %d\t%.4f\t%g\t%g\t%g\t%s\t%s\n", fs.Seed, r.Rule, r.OK, r.Stopped, r.Best,
				r.SlotS, r.WallS, r.CPUShare, reached, equal)
		}
	}
	w.Flush()
	for _, m := range f.Medians {
		share := "most seeds never reached it"
		if m.ReachedShare != nil {
			share = "median " + pct(*m.ReachedShare)
		}
		fmt.Fprintf(out, "  median of %d seeds, %s: reached full's best in %d (%s); best at equal slot-s %.4f against full's %.4f, median difference %+.4f",
			len(f.Seeds), m.Rule, m.Reached, share, m.BestAtEqual, m.FullBest, m.Delta)
		if m.Short > 0 {
			fmt.Fprintf(out, "; %d ended short", m.Short)
		}
		fmt.Fprintln(out)
	}
	if d := f.Decisions; d != nil {
		fmt.Fprintf(out, "  decision latency, asha runs' workers (answer_ms of %d rung decisions; the controllers made %d): p50 %g ms, p99 %g ms, max %g ms\n",
			d.N, f.Asked, d.P50, d.P99, d.Max)
	}
	fmt.Fprintf(out, "  largest CPU share of a run: %g of the machine\n", f.CPUShareMax)
	if !smoke {
		fmt.Fprintf(out, "  asha reaches full's best in <= 35%% of its slot-seconds: %s; at equal slot-seconds at least as good: %s\n",
			verdict(f.ReachMet), verdict(f.EqualMet))
	}
}

// printInherit prints the inherit workload's runs, one row per run of
// each seed, then the medians and the target.
func printInherit(out io.Writer, f *bench.Inherit, smoke bool) {
	s := f.Settings
	procs := map[bool]string{true: "1 worker process", false: fmt.Sprintf("%d worker processes", s.Workers)}[s.Workers == 1]
	fmt.Fprintf(out, "  mlp evaluator, %d slots in %s, %d designs a run (init %d, pool %d); seeds 1..%d\n",
		s.Slots, procs, s.Budget, s.Init, s.Pool, s.Seeds)
	fmt.Fprintf(out, "  slot-seconds: time inside the evaluations stored up to a result, in the results stream's order\n")
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  seed\trun\tok\tepochs\tbest\tbest at\tslot-s\twall s\tcpu\tmutants inherited\treached scratch's best\n")
	for _, is := range f.Seeds {
		for _, r := range []bench.InheritRun{is.Scratch, is.Inherit} {
			reached, inherited := "", "-"
			if r.Mode == "inherit" {
				inherited = fmt.Sprintf("%d of %d (%s)", r.Inherited, r.Mutants, pct(r.InheritedShare))
				reached = fmt.Sprintf("not reached in %g slot-s, %s of scratch's to its best (best %+.4f)", r.SlotS,
					pct(is.TotalShare), is.BestDelta)
				if is.Reached {
					reached = fmt.Sprintf("at %s (%g slot-s, result %d; best %+.4f)", pct(is.Share), is.ReachedSlotS,
						is.ReachedResults, is.BestDelta)
				}
			}
			fmt.Fprintf(w, "  %d\t%s\t%d\t%d\t%.4f\t%g slot-s (result %d)\t%g\t%g\t%g\t%s\t%s\n", is.Seed, r.Mode, r.OK,
				r.Epochs, r.Best, r.BestSlotS, r.BestResults, r.SlotS, r.WallS, r.CPUShare, inherited, reached)
		}
	}
	w.Flush()
	share := "most seeds never reached it"
	if f.Share != nil {
		share = "median " + pct(*f.Share)
	}
	fmt.Fprintf(out, "  median of %d seeds: reached scratch's best in %d (%s); best %.4f against scratch's %.4f, median difference %+.4f; %s of mutants inherited\n",
		len(f.Seeds), f.Reached, share, f.InheritBest, f.ScratchBest, f.BestDelta, pct(f.InheritedShare))
	fmt.Fprintf(out, "  largest CPU share of a run: %g of the machine\n", f.CPUShareMax)
	if !smoke {
		fmt.Fprintf(out, "  --inherit reaches scratch's best in <= 60%% of its slot-seconds: %s\n", verdict(f.Met))
	}
}

// printStopLatency prints the stoplatency workload's answer times.
func printStopLatency(w io.Writer, s *bench.StopLatency) {
	fmt.Fprintf(w, "  run\t%d slots in %d worker processes, %d designs of %d steps of %g ms, asha at steps %v\n",
		s.Slots, s.Workers, s.Budget, s.Steps, s.StepMs, s.Rungs)
	fmt.Fprintf(w, "  ok / stopped\t%d / %d (wall %g s, CPU share %g)\n", s.OK, s.Stopped, s.WallS, s.CPUShare)
	q := func(name string, x *bench.Quantiles) {
		if x == nil {
			fmt.Fprintf(w, "  %s\tnone\n", name)
			return
		}
		fmt.Fprintf(w, "  %s\tp50 %g ms, p99 %g ms, max %g ms (%d answers)\n", name, x.P50, x.P99, x.Max, x.N)
	}
	q("report() at rungs", s.Rung)
	q("  of which stop", s.Stop)
	q("report() elsewhere", s.Other)
}

func pct(share float64) string { return fmt.Sprintf("%.1f%%", share*100) }

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

// loopWorker is one worker process of the noop workload's plain loop; the
// bench starts it, with the broker's URL and its slots.
func (c *benchCmd) loopWorker(ctx context.Context, args []string) error {
	fs := newFlagSet("bench "+bench.LoopWorkerCommand, "One worker process of the noop workload's plain nats.go loop; evoq bench starts it.", c.env.Stderr)
	url := fs.String("nats", "", "the broker's URL")
	slots := fs.Int("slots", 4, "slots")
	variant := fs.String("variant", bench.LoopPlain, "the loop's variant: "+strings.Join(bench.LoopVariants, ", "))
	if err := parse(fs, args); err != nil {
		return err
	}
	if *url == "" {
		return usageErr("--nats: the broker's URL is required")
	}
	if *slots < 1 {
		return usageErr("--slots %d: want 1 or more", *slots)
	}
	if !slices.Contains(bench.LoopVariants, *variant) {
		return usageErr("--variant %s: want one of %s", *variant, strings.Join(bench.LoopVariants, ", "))
	}
	err := bench.LoopWorker(ctx, *url, *variant, *slots)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func printScale(w io.Writer, s *bench.Scale) {
	fmt.Fprintf(w, "  slots / used\t%d / %d in %d worker processes (%s", s.Slots, s.SlotsUsed, s.Workers, s.Evaluator)
	if s.Evaluator == "sim" {
		fmt.Fprintf(w, ", mean %g s", s.SimMeanS)
	}
	fmt.Fprintf(w, ")\n")
	fmt.Fprintf(w, "  evaluations\t%d of %d, %g/s over %g s\n", s.Evaluations, s.Budget, s.EvalsPerS, s.WallS)
	fmt.Fprintf(w, "  util_steady\t%g (idle %.4f: %.4f waiting for a slot's first design, %.4f between designs)\n", s.UtilSteady,
		1-s.UtilSteady, s.IdleBeforeFirst, max(1-s.UtilSteady-s.IdleBeforeFirst, 0))
	fmt.Fprintf(w, "  gap_p99_ms\t%g\n", s.GapP99Ms)
	fmt.Fprintf(w, "  controller CPU\t%g s, %g µs a result\n", s.ControllerCPUS, s.CPUPerResultUs)
	fmt.Fprintf(w, "  peak RSS\tcontroller %g MB, broker %g MB, largest worker %g MB\n", s.ControllerRSSMB, s.BrokerRSSMB, s.WorkerRSSMB)
	fmt.Fprintf(w, "  store\t%g MB\n", s.StoreMB)
	if len(s.StatusS) > 0 {
		fmt.Fprintf(w, "  evoq status\t%d answers during the run, longest %g s\n", len(s.StatusS), s.StatusMaxS)
	}
}

// printGrowth prints the growth workload's two tables.
func printGrowth(out io.Writer, g *bench.Growth) {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	row := func(first string, s *bench.Scale) {
		fmt.Fprintf(w, "  %s\t%d\t%g\t%g\t%g\t%g\t%g\t%g\n", first, s.Evaluations, s.UtilSteady, s.CPUPerResultUs,
			s.ControllerRSSMB, s.BrokerRSSMB, s.WorkerRSSMB, s.StoreMB)
	}
	fmt.Fprintf(w, "  slots\tresults\tutil_steady\tcontroller µs CPU a result\tcontroller MB\tbroker MB\tlargest worker MB\tstore MB\n")
	for _, s := range g.Slots {
		row(fmt.Sprint(s.Slots), s)
	}
	fmt.Fprintf(w, "  budget (8 slots, noop)\tresults\tutil_steady\tcontroller µs CPU a result\tcontroller MB\tbroker MB\tlargest worker MB\tstore MB\n")
	for _, s := range g.Budget {
		row(fmt.Sprint(s.Budget), s)
	}
	_ = w.Flush()
}
