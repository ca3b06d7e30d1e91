package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/evoq/evoq/bench"
)

// benchCmd runs named workloads end to end with real worker processes over
// TCP, and with --vs-dask the same workload on Dask distributed; package
// bench does the work.
type benchCmd struct {
	env       Env
	workloads string
	vsDask    bool
	smoke     bool
	jsonOut   bool
	python    string
	script    string
	dir       string
}

func (c *benchCmd) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("bench", "Runs named workloads end to end with real worker processes over TCP and prints evoq run's figures;\n"+
		"with --vs-dask the same workload on Dask distributed too, side by side with ratios.\n"+
		"Workloads: noop, sim, scale, memory, replay (replay reads the store the memory workload wrote).", c.env.Stderr)
	fs.StringVar(&c.workloads, "workload", "noop,sim", "comma-separated workloads, or all")
	fs.BoolVar(&c.vsDask, "vs-dask", false, "run the Dask baseline of each workload too (needs Debian's python3-distributed)")
	fs.BoolVar(&c.smoke, "smoke", false, "one short iteration of each workload: checks that the bench runs, measures nothing")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object")
	fs.StringVar(&c.python, "python", bench.PythonDefault, "the Python that has dask.distributed")
	fs.StringVar(&c.script, "dask-script", "", "the Dask baseline script (default: the one built into evoq, bench/dask_baseline.py)")
	fs.StringVar(&c.dir, "dir", "", "directory for the runs' stores (default: a temporary directory, removed afterwards)")
	if err := parse(fs, args); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the evoq binary: %w", err)
	}
	cfg := bench.Config{Evoq: exe, VsDask: c.vsDask, Smoke: c.smoke, Python: c.python,
		DaskScript: c.script, Dir: c.dir, Log: c.env.Stderr, Workloads: bench.Names()}
	if c.workloads != "all" {
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
	flag := map[string]string{"Workloads": "--workload", "Python": "--vs-dask: --python", "DaskScript": "--dask-script",
		"Dir": "--dir"}[ce.Field]
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
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "%s: %s\n", r.Workload, r.About)
		switch {
		case r.Evoq != nil:
			printEvoqRow(w, r)
		case r.Memory != nil:
			m := r.Memory
			fmt.Fprintf(w, "  controller RSS after %d evaluations\t%g MB\n", m.Sampled, m.RSSFirstMB)
			fmt.Fprintf(w, "  controller RSS after %d evaluations\t%g MB (peak %g MB)\n", m.Evaluations, m.RSSEndMB, m.RSSPeakMB)
			fmt.Fprintf(w, "  ratio\t%g (pool of %d designs)\n", m.Ratio, m.Pool)
			fmt.Fprintf(w, "  evals_per_s\t%g\n", m.EvalsPerS)
		case r.Replay != nil:
			fmt.Fprintf(w, "  results replayed\t%d in %g s\n", r.Replay.Results, r.Replay.Seconds)
			fmt.Fprintf(w, "  results_per_s\t%g\n", r.Replay.ResultsPerS)
		}
		if r.Note != "" {
			fmt.Fprintf(w, "  note\t%s\n", r.Note)
		}
		verdict := "met"
		if rep.Smoke {
			verdict = "not judged (smoke run)"
		} else if r.Met != nil && !*r.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "  target\t%s: %s\n\n", r.Target, verdict)
	}
	return w.Flush()
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
