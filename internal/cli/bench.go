package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/evoq/evoq/bench"
	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchCmd runs named workloads end to end with real worker processes over
// TCP, and with --vs-dask the same workload on Dask distributed.
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

// workload is one named benchmark.
type workload struct {
	name  string
	about string
	// evoq run flags, full and smoke
	args, smokeArgs []string
	// Dask baseline flags, full and smoke; nil: no Dask counterpart
	dask, smokeDask []string
	target          string
}

var workloads = []*workload{
	{name: "noop", about: "no-op evaluations, 8 slots in 2 worker processes: evoq's own overhead",
		args:      []string{"--evaluator", "noop", "--slots", "8", "--workers", "2", "--budget", "20000"},
		smokeArgs: []string{"--evaluator", "noop", "--slots", "8", "--workers", "2", "--budget", "300"},
		dask:      []string{"--workload", "noop", "--slots", "8", "--procs", "2", "--budget", "2000"},
		smokeDask: []string{"--workload", "noop", "--slots", "8", "--procs", "2", "--budget", "100"},
		target:    "evals_per_s >= 10000 and >= 50x Dask"},
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
	{name: "memory", about: "controller resident size after 10,000 and after 1,000,000 no-op evaluations (pool of 10)",
		target: "rss at the end <= 2x rss after 10,000"},
	{name: "replay", about: "a controller rebuilt from the memory workload's 1,000,000 results",
		target: "results_per_s >= 100000"},
}

// benchRow is one workload's figures.
type benchRow struct {
	Workload string              `json:"workload"`
	About    string              `json:"about"`
	Target   string              `json:"target"`
	Evoq     *controller.Summary `json:"evoq,omitempty"`
	Dask     map[string]any      `json:"dask,omitempty"`
	Ratios   map[string]float64  `json:"ratios,omitempty"`
	Memory   *memoryFigures      `json:"memory,omitempty"`
	Replay   *replayFigures      `json:"replay,omitempty"`
	Met      *bool               `json:"met,omitempty"`
	Note     string              `json:"note,omitempty"`
}

type memoryFigures struct {
	Evaluations int     `json:"evaluations"`
	Sampled     int     `json:"sampled_at"` // evaluations when the first size was taken
	RSSFirstMB  float64 `json:"rss_first_mb"`
	RSSEndMB    float64 `json:"rss_end_mb"`
	RSSPeakMB   float64 `json:"rss_peak_mb"`
	Ratio       float64 `json:"ratio"`
	Pool        int     `json:"pool"`
	EvalsPerS   float64 `json:"evals_per_s"`
}

type replayFigures struct {
	Results     int     `json:"results"`
	Seconds     float64 `json:"replay_s"`
	ResultsPerS float64 `json:"results_per_s"`
}

// benchReport is what bench prints; its JSON form is --json.
type benchReport struct {
	Machine string      `json:"machine"`
	Smoke   bool        `json:"smoke"`
	Rows    []*benchRow `json:"workloads"`
	// memoryURL is the broker that keeps the memory workload's run for
	// replay; memoryStop stops it.
	memoryURL   string
	memoryStop  func()
	memoryEvals int
}

func (c *benchCmd) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("bench", "Runs named workloads end to end with real worker processes over TCP and prints evoq run's figures;\n"+
		"with --vs-dask the same workload on Dask distributed too, side by side with ratios.\n"+
		"Workloads: noop, sim, scale, memory, replay (replay reads the store the memory workload wrote).", c.env.Stderr)
	fs.StringVar(&c.workloads, "workload", "noop,sim", "comma-separated workloads, or all")
	fs.BoolVar(&c.vsDask, "vs-dask", false, "run the Dask baseline of each workload too (needs Debian's python3-distributed)")
	fs.BoolVar(&c.smoke, "smoke", false, "one short iteration of each workload: checks that the bench runs, measures nothing")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object")
	fs.StringVar(&c.python, "python", "/usr/bin/python3", "the Python that has dask.distributed")
	fs.StringVar(&c.script, "dask-script", "", "the Dask baseline script (default: the one built into evoq, bench/dask_baseline.py)")
	fs.StringVar(&c.dir, "dir", "", "directory for the runs' stores (default: a temporary directory, removed afterwards)")
	if err := parse(fs, args); err != nil {
		return err
	}
	chosen, err := c.choose()
	if err != nil {
		return err
	}
	if c.vsDask {
		if err := c.checkDask(ctx); err != nil {
			return err
		}
	}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "evoq-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		c.dir = d
	} else if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return usageErr("--dir %s: %v", c.dir, err)
	}
	rep := &benchReport{Machine: machine(), Smoke: c.smoke}
	defer func() {
		if rep.memoryStop != nil {
			rep.memoryStop()
		}
	}()
	for _, w := range chosen {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(c.env.Stderr, "evoq bench: %s: %s\n", w.name, w.about)
		if err := c.runWorkload(ctx, w, rep); err != nil {
			return fmt.Errorf("workload %s: %w", w.name, err)
		}
	}
	return c.print(rep)
}

// choose parses --workload.
func (c *benchCmd) choose() ([]*workload, error) {
	if c.workloads == "all" {
		return workloads, nil
	}
	var out []*workload
	seen := map[string]bool{}
	for _, name := range strings.Split(c.workloads, ",") {
		name = strings.TrimSpace(name)
		var found *workload
		for _, w := range workloads {
			if w.name == name {
				found = w
			}
		}
		if found == nil {
			return nil, usageErr("--workload %q: want a comma-separated list of noop, sim, scale, memory, replay, or all", name)
		}
		if !seen[name] {
			out = append(out, found)
			seen[name] = true
		}
	}
	if seen["replay"] && !seen["memory"] {
		return nil, usageErr("--workload replay: needs the memory workload before it (--workload memory,replay)")
	}
	return out, nil
}

// checkDask checks that the Python has dask.distributed before anything
// runs.
func (c *benchCmd) checkDask(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, c.python, "-c", "import distributed; print(distributed.__version__)").CombinedOutput()
	if err != nil {
		return usageErr("--vs-dask: %s cannot import dask.distributed (%v: %s); install Debian's python3-distributed (apt-get install python3-distributed) or name another Python with --python",
			c.python, err, strings.TrimSpace(lastLine(string(out))))
	}
	if c.script == "" {
		f, err := os.CreateTemp("", "dask_baseline-*.py")
		if err != nil {
			return err
		}
		if _, err := f.Write(bench.DaskBaseline); err != nil {
			f.Close()
			return err
		}
		f.Close()
		c.script = f.Name()
		go func() { <-ctx.Done(); os.Remove(f.Name()) }()
	} else if _, err := os.Stat(c.script); err != nil {
		return usageErr("--dask-script %s: %v", c.script, err)
	}
	return nil
}

func (c *benchCmd) runWorkload(ctx context.Context, w *workload, rep *benchReport) error {
	row := &benchRow{Workload: w.name, About: w.about, Target: w.target}
	rep.Rows = append(rep.Rows, row)
	switch w.name {
	case "memory":
		return c.memory(ctx, rep, row)
	case "replay":
		return c.replay(ctx, rep, row)
	}
	args := w.args
	if c.smoke {
		args = w.smokeArgs
	}
	dir := filepath.Join(c.dir, w.name)
	sum, err := c.evoqRun(ctx, dir, args)
	if err != nil {
		return err
	}
	row.Evoq = sum
	if c.vsDask && w.dask != nil {
		dargs := w.dask
		if c.smoke {
			dargs = w.smokeDask
		}
		if row.Dask, err = c.daskRun(ctx, dargs); err != nil {
			return err
		}
		row.Ratios = ratios(sum, row.Dask)
	} else if c.vsDask {
		row.Note = "no Dask run: 10,000 Dask worker threads are beyond what the yardstick's loop is for"
	}
	row.Met = met(w.name, row)
	return nil
}

// evoqRun runs `evoq run` with the workload's flags and returns its summary.
func (c *benchCmd) evoqRun(ctx context.Context, dir string, args []string) (*controller.Summary, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	full := append([]string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--log-level", "warn",
		"--eval-logs", filepath.Join(dir, "eval-logs")}, args...)
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, full...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("evoq %s: %v\n%s", strings.Join(full, " "), err, tailText(errb.String(), 2000))
	}
	var sum controller.Summary
	if err := json.Unmarshal([]byte(lastLine(out.String())), &sum); err != nil {
		return nil, fmt.Errorf("evoq run printed no summary: %v\n%s", err, tailText(out.String(), 500))
	}
	return &sum, nil
}

// daskRun runs the Dask baseline and returns its JSON figures.
func (c *benchCmd) daskRun(ctx context.Context, args []string) (map[string]any, error) {
	full := append([]string{c.script, "--json"}, args...)
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, c.python, full...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	// On an interrupt the baseline closes its Dask cluster itself.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v\n%s", c.python, strings.Join(full, " "), err, tailText(errb.String(), 2000))
	}
	var fig map[string]any
	if err := json.Unmarshal([]byte(lastLine(out.String())), &fig); err != nil {
		return nil, fmt.Errorf("the Dask baseline printed no JSON: %v\n%s", err, tailText(out.String(), 500))
	}
	return fig, nil
}

// ratios divides evoq's figures by Dask's: throughput and utilization
// (higher is better) and gaps (lower is better: Dask over evoq).
func ratios(s *controller.Summary, d map[string]any) map[string]float64 {
	num := func(k string) float64 {
		if v, ok := d[k].(float64); ok {
			return v
		}
		return 0
	}
	out := map[string]float64{}
	div := func(name string, a, b float64) {
		if b > 0 {
			out[name] = round3(a / b)
		}
	}
	div("evals_per_s", s.EvalsPerS, num("evals_per_s"))
	div("util_steady", s.UtilSteady, num("util_steady"))
	div("gap_p50_ms (dask/evoq)", num("gap_p50_ms"), s.GapP50Ms)
	div("gap_p99_ms (dask/evoq)", num("gap_p99_ms"), s.GapP99Ms)
	return out
}

// met says whether a workload met its target; nil for a smoke run, which
// measures nothing.
func met(name string, row *benchRow) *bool {
	var ok bool
	switch name {
	case "noop":
		ok = row.Evoq.EvalsPerS >= 10000 && (row.Ratios == nil || row.Ratios["evals_per_s"] >= 50)
	case "sim":
		ok = row.Evoq.UtilSteady >= 0.98 && row.Evoq.GapP99Ms <= 5
	case "scale":
		ok = row.Evoq.SlotsUsed == row.Evoq.Slots && row.Evoq.UtilSteady >= 0.97
	case "memory":
		ok = row.Memory.Ratio <= 2
	case "replay":
		ok = row.Replay.ResultsPerS >= 100000
	}
	return &ok
}

func round3(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'g', 4, 64), 64)
	return v
}

// memory runs a standalone broker, a controller and two noop workers for
// 1,000,000 evaluations and samples the controller's resident size after
// 10,000 and at the end. The store is kept for the replay workload.
func (c *benchCmd) memory(ctx context.Context, rep *benchReport, row *benchRow) error {
	total, first := 1_000_000, 10_000
	if c.smoke {
		total, first = 3_000, 1_000
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.dir, "memory")
	brk := exec.Command(exe, "broker", "--dir", dir, "--listen", "127.0.0.1:0", "--log-level", "warn")
	brk.Stderr = io.Discard
	stdout, err := brk.StdoutPipe()
	if err != nil {
		return err
	}
	if err := brk.Start(); err != nil {
		return err
	}
	rep.memoryStop = func() { _ = brk.Process.Signal(syscall.SIGTERM); _ = brk.Wait() }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("broker printed no URL: %v", err)
	}
	url := strings.TrimSpace(line)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	rep.memoryURL, rep.memoryEvals = url, total
	const run = "memory"
	ctlArgs := []string{"controller", "--nats", url, "--run", run, "--budget", strconv.Itoa(total), "--json",
		"--log-level", "warn", "--expect-slots", "8"}
	var ctlOut, ctlErr bytes.Buffer
	ctl := exec.CommandContext(ctx, exe, ctlArgs...)
	ctl.Stdout, ctl.Stderr = &ctlOut, &ctlErr
	if err := ctl.Start(); err != nil {
		return err
	}
	var workers []*exec.Cmd
	defer func() {
		for _, w := range workers {
			_ = w.Process.Signal(syscall.SIGTERM)
			_ = w.Wait()
		}
	}()
	for i := range 2 {
		w := exec.CommandContext(ctx, exe, "worker", "--nats", url, "--run", run, "--id", fmt.Sprintf("m%d", i+1),
			"--slots", "4", "--evaluator", "noop", "--log-level", "warn")
		w.Stderr = io.Discard
		if err := w.Start(); err != nil {
			return err
		}
		workers = append(workers, w)
	}
	fig := &memoryFigures{Evaluations: total, Pool: controller.PoolDefault}
	row.Memory = fig
	done := make(chan error, 1)
	go func() { done <- ctl.Wait() }()
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("controller: %v\n%s", err, tailText(ctlErr.String(), 2000))
			}
			var sum controller.Summary
			if err := json.Unmarshal([]byte(lastLine(ctlOut.String())), &sum); err == nil {
				fig.EvalsPerS = sum.EvalsPerS
			}
			if fig.RSSFirstMB > 0 {
				fig.Ratio = round3(fig.RSSEndMB / fig.RSSFirstMB)
			}
			row.Met = met("memory", row)
			return nil
		case <-tick.C:
			rss := residentMB(ctl.Process.Pid)
			if rss <= 0 {
				continue
			}
			n := storedResults(ctx, js, run)
			if fig.RSSFirstMB == 0 && n >= first {
				fig.RSSFirstMB, fig.Sampled = rss, n
			}
			if n >= first {
				fig.RSSEndMB = rss
			}
			fig.RSSPeakMB = max(fig.RSSPeakMB, rss)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// replay restarts a controller on the memory workload's finished run: it
// folds every stored result, finds the budget spent and stops.
func (c *benchCmd) replay(ctx context.Context, rep *benchReport, row *benchRow) error {
	if rep.memoryURL == "" {
		return errors.New("the memory workload did not run")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, "controller", "--nats", rep.memoryURL, "--run", "memory",
		"--budget", strconv.Itoa(rep.memoryEvals), "--log-format", "json", "--json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("controller restart: %v\n%s", err, tailText(errb.String(), 2000))
	}
	for _, l := range strings.Split(errb.String(), "\n") {
		var entry struct {
			Msg     string  `json:"msg"`
			Results int     `json:"results"`
			Seconds float64 `json:"replay_s"`
			Rate    float64 `json:"results_per_s"`
		}
		if json.Unmarshal([]byte(l), &entry) == nil && entry.Msg == "resumed run from its results stream" {
			row.Replay = &replayFigures{Results: entry.Results, Seconds: entry.Seconds, ResultsPerS: entry.Rate}
			row.Met = met("replay", row)
			return nil
		}
	}
	return fmt.Errorf("the restarted controller logged no replay\n%s", tailText(errb.String(), 2000))
}

// storedResults counts run's stored results; -1 if the broker does not
// answer.
func storedResults(ctx context.Context, js jetstream.JetStream, run string) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, schema.ResultStream)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(schema.ResultSubject(run)))
	if err != nil {
		return -1
	}
	return int(info.State.Subjects[schema.ResultSubject(run)])
}

// residentMB reads a process's resident set size from /proc, 0 if unknown.
func residentMB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return round3(kb / 1024)
		}
	}
	return 0
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

func (c *benchCmd) print(rep *benchReport) error {
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

// tailText returns the last n bytes of s.
func tailText(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
