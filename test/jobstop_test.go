package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A batch system's warning (SIGUSR1) reaches every process of the job, as
// srun forwards it: the worker drains on it, its evaluators, which ignore
// the warning unless they handle it, finish their designs, and the worker
// exits 0; the controller, warned too, logs it and goes on. A worker
// started next finishes the run, every design counted once, none an error.
func TestJobWarningDrainsWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, url := startBroker(t, filepath.Join(dir, "store"))
	pids := filepath.Join(dir, "pids")
	if err := os.Mkdir(pids, 0o755); err != nil {
		t.Fatal(err)
	}
	space, script := filepath.Join(dir, "space.yaml"), filepath.Join(dir, "eval.sh")
	write(t, space, "name: tiny\nparams:\n  x: {type: float, min: 0, max: 1}\n")
	write(t, script, fmt.Sprintf("#!/bin/sh\ncat > /dev/null\necho $$ > %s/$EVOQ_DESIGN_ID-$EVOQ_ATTEMPT\nsleep 1\necho '{\"fitness\": 0.5}'\n", pids))
	var stdout bytes.Buffer
	ctl := newProc(&stdout, "controller", "--nats", url, "--run", "jw", "--budget", "8", "--init", "4", "--pool", "2",
		"--config", space, "--eval-cmd", "sh "+script, "--json")
	ctl.start(t, nil)
	first := background(t, "worker", "--nats", url, "--run", "jw", "--slots", "2", "--gpus", "none", "--drain-timeout", "30s")
	var running []int
	waitFor(t, time.Minute, func() bool {
		running = running[:0]
		entries, _ := os.ReadDir(pids)
		for _, e := range entries {
			data, _ := os.ReadFile(filepath.Join(pids, e.Name()))
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && syscall.Kill(pid, 0) == nil {
				running = append(running, pid)
			}
		}
		return len(running) == 2
	})
	// As srun passes on Slurm's warning: to the worker, its evaluators
	// (process groups of their own) and here the controller too.
	for _, pid := range running {
		_ = syscall.Kill(-pid, syscall.SIGUSR1)
	}
	_ = first.cmd.Process.Signal(syscall.SIGUSR1)
	_ = ctl.cmd.Process.Signal(syscall.SIGUSR1)
	if err := first.wait(t, time.Minute); err != nil {
		t.Fatalf("the warned worker: %v\n%s", err, tail(first.stderr.String(), 3000))
	}
	log := first.stderr.String()
	if !strings.Contains(log, "warns that the job ends soon: draining") || strings.Contains(log, "evaluation failed") ||
		strings.Contains(log, "the evaluator was stopped with the job") || strings.Count(log, "evaluation done") != 2 {
		t.Errorf("the warned worker did not drain with its two evaluations finished:\n%s", tail(log, 3000))
	}
	background(t, "worker", "--nats", url, "--run", "jw", "--slots", "2", "--gpus", "none")
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if !strings.Contains(ctl.stderr.String(), "the workers leave, this process goes on") {
		t.Errorf("the controller did not say it goes on after the warning:\n%s", tail(ctl.stderr.String(), 3000))
	}
	s := lastJSON(t, stdout.String())
	if s.Evaluations != 8 || s.OK != 8 || s.Retried != 0 {
		t.Fatalf("the run ended with %d evaluations, %d ok, %d retried; want 8 ok, none retried", s.Evaluations, s.OK, s.Retried)
	}
	r := evoq(t, time.Minute, "export", "--nats", url, "--run", "jw", "--format", "jsonl")
	if r.code != 0 || strings.Contains(r.stdout, `"status":"`+string(schema.StatusError)+`"`) {
		t.Errorf("export: exit %d; want no error result stored\n%s%s", r.code, r.stdout, r.stderr)
	}
}
