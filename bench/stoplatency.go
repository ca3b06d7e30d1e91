package bench

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/evoq/evoq/schema"
)

// StopLatencyScript is the source of stoplatency.py, the stoplatency
// workload's persistent Python evaluator, built into the package so that
// the evoq binary can run it from any directory.
//
//go:embed stoplatency.py
var StopLatencyScript []byte

// evalHelperFile is the Python helper the stoplatency evaluator imports.
const evalHelperFile = "evoq_eval.py"

// stopLatencyTarget is the target's bound on the p99 answer time, in ms.
const stopLatencyTarget = 50

// StopLatency is the stoplatency workload's figures: how long the
// evaluator's evoq_eval.report() calls took to return, in ms.
type StopLatency struct {
	Slots   int     `json:"slots"`
	Workers int     `json:"workers"`
	Budget  int     `json:"budget"`
	Steps   int     `json:"steps"`
	StepMs  float64 `json:"step_ms"`
	Rungs   []int64 `json:"rungs"`
	OK      int     `json:"ok"`
	Stopped int     `json:"stopped"`
	// Rung is every answer at a rung step, Stop the stop answers among
	// them, Other the answers at the other steps, which the worker gives
	// once the report is stored.
	Rung  *Quantiles `json:"rung"`
	Stop  *Quantiles `json:"stop"`
	Other *Quantiles `json:"other"`
	WallS float64    `json:"wall_s"`
	// CPUShare is the run's share of the machine's CPU time.
	CPUShare float64 `json:"cpu_share"`
}

// met says whether every rung answer, and the stop answers alone, met the
// target at p99.
func (s *StopLatency) met() bool {
	return s.Rung != nil && s.Stop != nil && s.Rung.P99 <= stopLatencyTarget && s.Stop.P99 <= stopLatencyTarget
}

// stopLatencySettings are the workload's run: 16 persistent Python
// processes that sleep through steps of 20 ms, so that a design asha
// stops at its first rung still spends a step, as a training epoch
// would, and 3,000 designs give some 4,500 rung answers to take a p99 of,
// in about 20 s.
func stopLatencySettings(smoke bool) *StopLatency {
	if smoke {
		return &StopLatency{Slots: 4, Workers: 1, Budget: 30, Steps: 27, StepMs: 5}
	}
	return &StopLatency{Slots: 16, Workers: 2, Budget: 3000, Steps: 27, StepMs: 20}
}

// prepareStopLatency finds the Python helper and checks that the Python
// imports it.
func (r *runner) prepareStopLatency(ctx context.Context) error {
	if r.cfg.EvalHelper == "" {
		dir, err := findEvalHelper()
		if err != nil {
			return err
		}
		r.cfg.EvalHelper = dir
	}
	out, err := exec.CommandContext(ctx, r.cfg.Python, "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import evoq_eval",
		r.cfg.EvalHelper).CombinedOutput()
	if err != nil {
		return &ConfigError{Field: "Python", Value: r.cfg.Python, Reason: fmt.Sprintf(
			"cannot import evoq_eval from %s (%v: %s); name a Python 3", r.cfg.EvalHelper, err, strings.TrimSpace(lastLine(string(out))))}
	}
	return nil
}

// findEvalHelper is the python directory of the working directory or of
// its nearest parent that has python/evoq_eval.py.
func findEvalHelper() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "python", evalHelperFile)); err == nil {
			return filepath.Join(dir, "python"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", &ConfigError{Field: "EvalHelper", Reason: "no python/" + evalHelperFile + " in " + wd +
				" or a parent: run from the evoq repository, or name the directory that holds " + evalHelperFile}
		}
	}
}

// runStopLatency runs the persistent evaluator under asha and reads the
// times it wrote.
func (r *runner) runStopLatency(ctx context.Context, row *Row) error {
	s := stopLatencySettings(r.cfg.Smoke)
	row.StopLatency = s
	dir := filepath.Join(r.cfg.Dir, "stoplatency")
	waitsDir := filepath.Join(r.cfg.Dir, "stoplatency-waits")
	script := filepath.Join(r.cfg.Dir, "stoplatency.py")
	if err := os.MkdirAll(waitsDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(script, StopLatencyScript, 0o644); err != nil {
		return fmt.Errorf("write the evaluator: %w", err)
	}
	cmd := strings.Join([]string{shellQuote(r.cfg.Python), shellQuote(script), shellQuote(r.cfg.EvalHelper),
		shellQuote(waitsDir), strconv.FormatFloat(s.StepMs/1000, 'g', -1, 64), strconv.Itoa(s.Steps)}, " ")
	rule := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: int64(s.Steps), Eta: 3}
	p, err := r.evoqRunIn(ctx, dir, []string{"--run", "stoplatency", "--eval-cmd", cmd, "--persistent",
		"--slots", strconv.Itoa(s.Slots), "--workers", strconv.Itoa(s.Workers), "--wait-slots", strconv.Itoa(s.Slots),
		"--budget", strconv.Itoa(s.Budget), "--early-stop", rule.Rule, "--min-step", strconv.FormatInt(rule.MinStep, 10),
		"--max-step", strconv.FormatInt(rule.MaxStep, 10), "--eta", strconv.Itoa(rule.Eta)})
	if err != nil {
		return err
	}
	s.OK, s.Stopped, s.WallS, s.CPUShare = p.sum.OK, p.sum.Stopped, sig4(p.wall.Seconds()), p.cpuShare()
	s.Rungs = rule.Rungs(rule.MaxStep)
	waits, err := readWaits(waitsDir)
	if err != nil {
		return err
	}
	s.Rung, s.Stop, s.Other = waitQuantiles(waits, s.Rungs)
	if n := quantilesN(s.Stop); n != s.Stopped {
		row.Note = fmt.Sprintf("the evaluator timed %d stop answers at rungs, the run stopped %d designs", n, s.Stopped)
	}
	return nil
}

func quantilesN(q *Quantiles) int {
	if q == nil {
		return 0
	}
	return q.N
}

// wait is one report() call as the evaluator timed it.
type wait struct {
	Design   string  `json:"design"`
	Step     int64   `json:"step"`
	Ms       float64 `json:"ms"`
	Continue bool    `json:"continue"`
}

// readWaits reads the evaluator processes' files of times.
func readWaits(dir string) ([]wait, error) {
	files, err := filepath.Glob(filepath.Join(dir, "waits-*.jsonl"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("the evaluator wrote no times: did it start? (see the run's eval-logs)")
	}
	var out []wait
	for _, f := range files {
		ws, err := readWaitFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, ws...)
	}
	return out, nil
}

func readWaitFile(path string) ([]wait, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []wait
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var w wait
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, w)
	}
	return out, sc.Err()
}

// waitQuantiles splits the times into the answers at rung steps, the
// stop answers among them, and the answers at other steps.
func waitQuantiles(waits []wait, rungs []int64) (rung, stop, other *Quantiles) {
	var r, s, o []float64
	for _, w := range waits {
		switch {
		case !slices.Contains(rungs, w.Step):
			o = append(o, w.Ms)
		case w.Continue:
			r = append(r, w.Ms)
		default:
			r, s = append(r, w.Ms), append(s, w.Ms)
		}
	}
	return quantiles(r), quantiles(s), quantiles(o)
}

// shellQuote quotes s for sh -c, which runs --eval-cmd.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
