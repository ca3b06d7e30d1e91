package bench

import (
	"slices"
	"strconv"

	"github.com/evoq/evoq/runstate"
)

// workload is one named benchmark.
type workload struct {
	name  string
	about string
	// evoq run flags, full and smoke; nil for exascale, growth, memory, replay, fidelity,
	// inherit, preempt, stoplatency, zdt, nb201 and train20, which start their processes themselves
	args, smokeArgs []string
	// Dask baseline flags, full and smoke; nil: no Dask counterpart
	dask, smokeDask []string
	target          string
}

// workloads are the benchmarks, in the order "all" runs them: replay reads
// the store that memory wrote. fidelity, inherit, preempt, stoplatency,
// zdt, nb201 and train20 start their own runs: their settings are in
// fidelity.go, inherit.go, preempt.go, stoplatency.go, zdt.go, nb201.go
// and train20.go.
var workloads = []*workload{
	{name: "noop", about: "no-op evaluations, 8 slots in 2 worker processes: evoq's own overhead",
		args:      []string{"--evaluator", "noop", "--slots", "8", "--workers", "2", "--budget", "20000"},
		smokeArgs: []string{"--evaluator", "noop", "--slots", "8", "--workers", "2", "--budget", "300"},
		dask:      []string{"--workload", "noop", "--slots", "8", "--procs", "2", "--budget", "2000"},
		smokeDask: []string{"--workload", "noop", "--slots", "8", "--procs", "2", "--budget", "100"},
		target:    "evals_per_s >= 10000 and >= 50x Dask, and >= 0.9x the plain nats.go loop in the same run (median of 3)"},
	{name: "sim", about: "simulated training, 92 slots in 2 worker processes, mean 0.2 s, 30% infeasible at once",
		args: []string{"--evaluator", "sim", "--slots", "92", "--workers", "2", "--sim-mean", "0.2", "--sim-fail", "0.3",
			"--budget", "4000", "--init", "5", "--pool", "5", "--wait-slots", "92"},
		smokeArgs: []string{"--evaluator", "sim", "--slots", "16", "--workers", "2", "--sim-mean", "0.02", "--sim-fail", "0.3",
			"--budget", "200", "--init", "5", "--pool", "5", "--wait-slots", "16"},
		dask: []string{"--workload", "sim", "--slots", "92", "--procs", "2", "--sim-mean", "0.2", "--sim-fail", "0.3",
			"--budget", "1500"},
		smokeDask: []string{"--workload", "sim", "--slots", "16", "--procs", "2", "--sim-mean", "0.02", "--sim-fail", "0.3",
			"--budget", "100"},
		target: "util_steady >= 0.98 and gap_p99_ms <= 5"},
	{name: "scale", about: "10,000 slots in 20 worker processes, simulated training with mean 5 s, 30% infeasible",
		args: []string{"--evaluator", "sim", "--slots", "10000", "--workers", "20", "--sim-mean", "5", "--sim-fail", "0.3",
			"--budget", "100000", "--init", "100", "--pool", "50", "--wait-slots", "10000"},
		smokeArgs: []string{"--evaluator", "sim", "--slots", "200", "--workers", "4", "--sim-mean", "0.1", "--sim-fail", "0.3",
			"--budget", "600", "--init", "20", "--pool", "10", "--wait-slots", "200"},
		target: "slots_used == slots and util_steady >= 0.97"},
	{name: "exascale", about: "100,000 simulated slots in 100 worker processes, mean 90 s (sigma 0.2), budget 300,000, ack wait 2m; " +
		"broker, controller and workers in processes of their own, evoq status timed every 30 s",
		target: "slots_used == slots, util_steady >= 0.98, controller RSS < 1 GiB, evoq status answers in < 5 s"},
	{name: "growth", about: "cost as work grows: controller CPU per result, controller and broker memory, store size " +
		"at 1,000, 10,000 and 100,000 slots (sim, budget 3x the slots) and at 10,000, 100,000 and 1,000,000 results (noop, 8 slots)",
		target: "none: measured, not judged (docs/BENCHMARKS.md keeps the tables)"},
	{name: "memory", about: "controller resident size after 10,000 and after 1,000,000 no-op evaluations (pool of 10)",
		target: "rss at the end <= 2x rss after 10,000"},
	{name: "replay", about: "a controller rebuilt from the memory workload's 1,000,000 results",
		target: "results_per_s >= 100000"},
	{name: "fidelity", about: "full training against early stopping (median, asha) on sim learning curves, " +
		"same seeds and slots: slot-seconds to reach full training's best, best at equal slot-seconds",
		target: "asha reaches full training's best in <= 35% of its slot-seconds and, at equal slot-seconds, " +
			"finds a design at least as good (medians over the seeds)"},
	{name: "inherit", about: "the built-in mlp search from scratch against the same search with --inherit, " +
		"same seeds, slots and design budget: slot-seconds to reach the from-scratch search's best",
		target: "--inherit reaches the from-scratch search's best in <= 60% of the slot-seconds it took (median over the seeds)"},
	{name: "preempt", about: "sim learning curves on workers whose walltime is several times shorter than the run, " +
		"each started again when it exits at its walltime (a requeue), the controller up throughout; with --sim-progress " +
		"and without, same seeds: slot-seconds to finish the budget, designs resumed, slot-seconds retrained from scratch",
		target: "none: measured, not judged (docs/BENCHMARKS.md keeps the figures)"},
	{name: "stoplatency", about: "a persistent Python evaluator (python/evoq_eval.py) under asha: " +
		"time from before each report() to its return, at the rungs",
		target: "p99 <= 50 ms at the rungs, for every answer and for the stop answers alone"},
	{name: "zdt", about: "the built-in zdt1 and zdt2 problems with evoq's default operators, 16 slots, pool of 100, " +
		"against the textbook NSGA-II (population 100), same seeds: hypervolume ratio after 5,000 and 20,000 evaluations",
		target: "hypervolume ratio >= 0.80 after 5,000 evaluations and >= 0.99 after 20,000 (median of 5 seeds, 16 slots), " +
			"and at least the textbook NSGA-II's at the same evaluations"},
	{name: "nb201", about: "NAS-Bench-201 on ImageNet16-120 (the built-in nb201 lookup, 15,625 cells) with evoq's defaults, 8 slots, " +
		"against Optuna TPE and random search, 10 seeds, without noise and with noise of 0.5: the true accuracy of the best design after 100 and 300 evaluations",
		target: "without noise: after 300 evaluations every seed within 0.1 of the optimum (47.31) and >= 8 of 10 at it; " +
			"after 100 a median >= Optuna TPE's and a worst seed >= random search's median"},
	{name: "train20", about: "real training: a PyTorch MLP on a generated 20-class task with noisy labels, 30 epochs, 2 slots; " +
		"evoq with full training, asha and median, and --inherit, against Optuna TPE without a pruner, with Hyperband and with " +
		"its median pruner, same seeds, compared at full training's slot-seconds",
		target: "asha at equal slot-seconds at least as good as full training and as TPE with its better pruner, " +
			"and full training's best in <= 35% of its slot-seconds (medians over the seeds)"},
}

// Names are the workloads' names, in the order they run.
func Names() []string {
	out := make([]string, len(workloads))
	for i, w := range workloads {
		out[i] = w.name
	}
	return out
}

func find(name string) *workload {
	for _, w := range workloads {
		if w.name == name {
			return w
		}
	}
	return nil
}

// choose returns the named workloads in the order given, each once.
func choose(names []string) ([]*workload, error) {
	var out []*workload
	for _, name := range names {
		w := find(name)
		if w == nil {
			return nil, &ConfigError{Field: "Workloads", Value: name, Reason: "no such workload; want " + list(Names())}
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return nil, &ConfigError{Field: "Workloads", Reason: "none named; want " + list(Names())}
	}
	mem, rep := slices.Index(out, find("memory")), slices.Index(out, find("replay"))
	if rep >= 0 && (mem < 0 || mem > rep) {
		return nil, &ConfigError{Field: "Workloads", Value: "replay",
			Reason: "needs the memory workload before it (memory,replay): it replays what memory stored"}
	}
	return out, nil
}

func list(names []string) string {
	s := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			s += " or "
		default:
			s += ", "
		}
		s += n
	}
	return s
}

// ratios divides evoq's figures by Dask's: throughput and utilization
// (higher is better) and gaps (lower is better: Dask over evoq). A figure
// Dask did not report, or a zero divisor, gives no ratio rather than a
// misleading 0x or an infinite one.
func ratios(s *runstate.Summary, d map[string]any) map[string]float64 {
	out := map[string]float64{}
	div := func(name, daskKey string, daskOver bool, evoq float64) {
		dv, ok := d[daskKey].(float64)
		a, b := evoq, dv
		if daskOver {
			a, b = dv, evoq
		}
		if ok && b > 0 {
			out[name] = sig4(a / b)
		}
	}
	div("evals_per_s", "evals_per_s", false, s.EvalsPerS)
	div("util_steady", "util_steady", false, s.UtilSteady)
	div("gap_p50_ms (dask/evoq)", "gap_p50_ms", true, s.GapP50Ms)
	div("gap_p99_ms (dask/evoq)", "gap_p99_ms", true, s.GapP99Ms)
	return out
}

// met says whether a row met its workload's target.
func met(row *Row) bool {
	switch row.Workload {
	case "noop":
		return row.Evoq.EvalsPerS >= 10000 && (row.Ratios == nil || row.Ratios["evals_per_s"] >= 50) &&
			(row.Bound == nil || row.Bound.Met())
	case "sim":
		return row.Evoq.UtilSteady >= 0.98 && row.Evoq.GapP99Ms <= 5
	case "scale":
		return row.Evoq.SlotsUsed == row.Evoq.Slots && row.Evoq.UtilSteady >= 0.97
	case "exascale":
		return exascaleMet(row.Scale)
	case "memory":
		return row.Memory.Ratio <= 2
	case "replay":
		return row.Replay.ResultsPerS >= 100000
	case "fidelity":
		return row.Fidelity.ReachMet && row.Fidelity.EqualMet
	case "inherit":
		return row.Inherit.Met
	case "stoplatency":
		return row.StopLatency.met()
	case "zdt":
		return row.ZDT.Met
	case "nb201":
		return row.NB201.Met
	case "train20":
		return row.Train20.Met
	}
	return false
}

// sig4 rounds to 4 significant digits: figures move by 10% between runs,
// more digits would be noise.
func sig4(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'g', 4, 64), 64)
	return v
}
