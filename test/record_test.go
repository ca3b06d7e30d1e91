package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// recordSpace is a small search space for the tests of the run's record.
const recordSpace = `name: rec
params:
  x: {type: float, min: 0, max: 1}
  y: {type: int, min: 1, max: 9}
`

// writeRecordEvaluator writes a Python evaluator that speaks both modes
// through the helper, and the search space, into dir.
func writeRecordEvaluator(t *testing.T, dir string) (space, cmd string) {
	t.Helper()
	helper, err := filepath.Abs("../python")
	if err != nil {
		t.Fatal(err)
	}
	ev := fmt.Sprintf(`import sys, time
sys.path.insert(0, %q)
import evoq_eval

def train(g):
    time.sleep(0.2)
    g = g["genome"]
    return {"fitness": g["x"] * g["y"]}

evoq_eval.main(train)
`, helper)
	space = filepath.Join(dir, "space.yaml")
	for name, text := range map[string]string{"space.yaml": recordSpace, "ev.py": ev} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return space, python3(t) + " " + filepath.Join(dir, "ev.py")
}

var evaluationsRe = regexp.MustCompile(`evaluations=(\d+)`)

// evaluationsSoFar is the largest evaluations= figure in a progress log.
func evaluationsSoFar(log string) int {
	n := 0
	for _, m := range evaluationsRe.FindAllStringSubmatch(log, -1) {
		v, _ := strconv.Atoi(m[1])
		n = max(n, v)
	}
	return n
}

// A run SIGKILLed and continued with --resume and no other flag runs the
// evaluator it recorded (an --eval-cmd, one-shot or persistent), not the
// built-in default: every design ends ok, counted once.
func TestResumeKeepsRecordedEvaluator(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		extra []string
	}{{"oneshot", nil}, {"persistent", []string{"--persistent"}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			space, cmd := writeRecordEvaluator(t, dir)
			store := filepath.Join(dir, "store")
			args := append([]string{"run", "--run", "rs", "--dir", store, "--listen", "127.0.0.1:0", "--config", space,
				"--eval-cmd", cmd, "--budget", "60", "--init", "10", "--pool", "5", "--slots", "2", "--progress", "200ms",
				"--ack-wait", "3s", "--log-level", "info"}, tc.extra...)
			first := background(t, args...)
			waitShowing(t, time.Minute, func() bool { return evaluationsSoFar(first.stderr.String()) >= 4 },
				func() string { return first.stderr.String() })
			_ = first.cmd.Process.Signal(syscall.SIGKILL)
			_ = first.wait(t, 30*time.Second)

			r := evoq(t, 3*time.Minute, "run", "--resume", "--run", "rs", "--dir", store, "--listen", "127.0.0.1:0", "--json")
			if r.code != 0 {
				t.Fatalf("resume: exit %d\n%s", r.code, tail(r.stderr, 4000))
			}
			s := lastJSON(t, r.stdout)
			if s.Evaluations != 60 || s.OK != 60 {
				t.Fatalf("resumed run: %d evaluations, %d ok (error %d, lost %d); want 60 and 60:\n%s",
					s.Evaluations, s.OK, s.Error, s.Lost, tail(r.stderr, 3000))
			}
			if !strings.Contains(r.stderr, "--eval-cmd") || strings.Contains(r.stderr, "evaluator=mlp") {
				t.Errorf("the resumed run's workers did not start the recorded command:\n%s", tail(r.stderr, 3000))
			}
			if tc.extra != nil && !strings.Contains(r.stderr, "--persistent") {
				t.Errorf("the resumed run's evaluator is not persistent:\n%s", tail(r.stderr, 3000))
			}
			results := readResults(t, store, "rs")
			checkDesigns(t, results, 60)
			for _, res := range results {
				if res.Status != "ok" {
					t.Errorf("design %s attempt %d ended %s: %s", res.DesignID, res.Attempt, res.Status, res.Error)
				}
			}
		})
	}
}

// A worker given no evaluator flag runs the evaluator its run records; one
// given its own says, in its log, how it differs; and a worker joining a
// run that records none is told to name one.
func TestWorkerTakesRecordedEvaluator(t *testing.T) {
	t.Parallel()
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--run", "wr", "--nats", url, "--evaluator", "sim",
		"--sim-mean", "0.05", "--budget", "60", "--init", "10", "--pool", "5", "--json", "--log-level", "info")
	plain := background(t, "worker", "--nats", url, "--run", "wr", "--gpus", "none", "--slots", "2", "--id", "plain")
	own := background(t, "worker", "--nats", url, "--run", "wr", "--gpus", "none", "--slots", "1", "--id", "own",
		"--evaluator", "sim", "--sim-mean", "0.02")
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	_ = plain.wait(t, 30*time.Second)
	_ = own.wait(t, 30*time.Second)
	if !strings.Contains(plain.stderr.String(), "evaluator=sim") {
		t.Errorf("a worker with no evaluator flag did not take the run's sim evaluator:\n%s", tail(plain.stderr.String(), 2000))
	}
	if strings.Contains(plain.stderr.String(), "differs") {
		t.Errorf("a worker running the run's own evaluator says it differs:\n%s", tail(plain.stderr.String(), 2000))
	}
	if !strings.Contains(own.stderr.String(), "differs from the run's") || !strings.Contains(own.stderr.String(), "--sim-mean 0.05") {
		t.Errorf("a worker given its own --sim-mean did not say how its evaluator differs:\n%s", tail(own.stderr.String(), 2000))
	}

	// A run whose controller was given no evaluator records none: a worker
	// with no evaluator flag is told to give one, at once.
	ctl2 := background(t, "controller", "--run", "none", "--nats", url, "--budget", "20", "--log-level", "info")
	waitLog(t, ctl2, "records no evaluator")
	r := evoq(t, time.Minute, "worker", "--nats", url, "--run", "none", "--gpus", "none")
	if r.code != 2 || !strings.Contains(r.stderr, "records no evaluator") || !strings.Contains(r.stderr, "--eval-cmd") {
		t.Errorf("worker on a run with no recorded evaluator: exit %d, want 2 naming the flags:\n%s", r.code, tail(r.stderr, 2000))
	}
}

// waitLog waits until p's log holds s, and returns the log.
func waitLog(t *testing.T, p *proc, s string) string {
	t.Helper()
	waitShowing(t, time.Minute, func() bool { return strings.Contains(p.stderr.String(), s) }, func() string { return p.stderr.String() })
	return p.stderr.String()
}

// A node whose evaluator fails at once, started a second before the
// healthy ones, with --expect-slots covering all of them and no
// --wait-slots: the run does not fail on the first node's word. The node
// is quarantined after at most --quarantine-after failed attempts per
// slot, its designs are retried elsewhere, and no design ends counted
// error.
func TestStartSkewBrokenNodeFirst(t *testing.T) {
	t.Parallel()
	const run = "skew"
	_, url := startBroker(t, t.TempDir())
	ctl := newProc(nil, "controller", "--nats", url, "--run", run, "--evaluator", "sim", "--sim-mean", "0.05",
		"--budget", "80", "--init", "10", "--pool", "5", "--expect-slots", "5", "--json", "--log-level", "info")
	var out strings.Builder
	ctl.cmd.Stdout = &out
	ctl.start(t, nil)
	broken := background(t, "worker", "--nats", url, "--run", run, "--id", "broken", "--host", "broken-node",
		"--gpus", "none", "--slots", "1", "--eval-cmd", brokenGPU, "--log-level", "info")
	waitShowing(t, time.Minute, func() bool { return strings.Contains(broken.stderr.String(), "evaluation failed") },
		func() string { return broken.stderr.String() + ctl.stderr.String() })
	time.Sleep(time.Second) // the allocation's other nodes start a second later
	h1 := background(t, "worker", "--nats", url, "--run", run, "--id", "h1", "--gpus", "none", "--slots", "2")
	h2 := background(t, "worker", "--nats", url, "--run", run, "--id", "h2", "--gpus", "none", "--slots", "2")
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v (the run failed on one node's word?)\n%s", err, tail(ctl.stderr.String(), 4000))
	}
	s := lastJSON(t, out.String())
	if s.Evaluations != 80 || s.Error != 0 || s.Timeout != 0 || s.Lost != 0 {
		t.Errorf("summary: %d evaluations, %d ok, %d error, %d timeout, %d lost; want 80 with no error",
			s.Evaluations, s.OK, s.Error, s.Timeout, s.Lost)
	}
	if err := broken.wait(t, 30*time.Second); err == nil {
		t.Errorf("the broken worker exited 0; want the quarantine's exit:\n%s", tail(broken.stderr.String(), 2000))
	}
	_ = h1.wait(t, 30*time.Second)
	_ = h2.wait(t, 30*time.Second)
	_, js := connectJS(t, url)
	store := storedResults(t, js, run)
	failedThere, there := 0, ""
	for _, r := range store {
		if r.Worker == "broken" && r.Status != "ok" {
			failedThere++
			there += fmt.Sprintf("\n  %s attempt %d retry %d: %s", r.DesignID, r.Attempt, r.Design.Retry, r.Status)
		}
	}
	if failedThere == 0 || failedThere > 3 {
		t.Errorf("the broken node failed %d attempts; want 1 to 3 (--quarantine-after 3 times its 1 slot):%s", failedThere, there)
	}
}

// A feature that is on but does nothing says so: early stopping with an
// evaluator that never reports, inheritance with one that saves no
// checkpoint. Each is warned once the first --init results are in, kept
// in the summary's warnings and shown by evoq status after the run.
func TestInertFeaturesWarn(t *testing.T) {
	t.Parallel()
	s, dir := runJSON(t, 2*time.Minute, "--run", "inert", "--evaluator", "sim", "--sim-mean", "0.01", "--slots", "2",
		"--budget", "40", "--init", "10", "--pool", "5", "--early-stop", "asha", "--max-step", "9", "--inherit")
	all := strings.Join(s.Warnings, "\n")
	for _, want := range []string{"early stopping (asha", "none of the run's first 10 results came with a report",
		"--inherit is on, but none of the run's first 10 results stored a checkpoint"} {
		if !strings.Contains(all, want) {
			t.Errorf("summary warnings lack %q:\n%s", want, all)
		}
	}
	r := evoq(t, time.Minute, "status", "--dir", dir, "--run", "inert")
	if r.code != 0 || !strings.Contains(r.stdout, "warnings:") || !strings.Contains(r.stdout, "stored a checkpoint") {
		t.Errorf("status after the run: exit %d, want the warnings shown:\n%s%s", r.code, r.stdout, r.stderr)
	}

	// With reports and checkpoints, no such warning.
	s, _ = runJSON(t, 2*time.Minute, "--run", "active", "--evaluator", "sim", "--sim-mean", "0.01", "--slots", "2",
		"--budget", "40", "--init", "10", "--pool", "5", "--early-stop", "asha", "--max-step", "9", "--sim-curve", "--sim-steps", "9",
		"--inherit", "--sim-checkpoint", "1KB")
	if len(s.Warnings) != 0 {
		t.Errorf("a run whose features work warns: %v", s.Warnings)
	}
}
