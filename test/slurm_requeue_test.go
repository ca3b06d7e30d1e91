package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// The Slurm template under requeue, on the real one-node Slurm of
// TestSlurmTemplate: a job requeued mid-run (scontrol requeue, as a
// preemption that requeues does) starts again with the same job ID, so the
// same run and store, and its controller continues the run to its budget
// with every design counted once; a job warned of its end (USR1, which
// the template's --signal asks Slurm for) drains its workers, which hand
// their designs back, and with REQUEUE_AT_END=1 requeues itself and
// finishes the run in its next start. Skipped where Slurm is not
// installed or the test does not run as root (see slurmPrereqs).
func TestSlurmRequeue(t *testing.T) {
	t.Parallel()
	sl := startSlurm(t)
	const budget = 60
	tests := []struct {
		name  string
		env   []string
		act   func(ctx context.Context, job string) *exec.Cmd
		inLog []string
	}{
		{"scontrol requeue mid-run", nil,
			func(ctx context.Context, job string) *exec.Cmd { return sl.command(ctx, "scontrol", "requeue", job) },
			nil},
		{"the end's warning, then requeued by the job", []string{"REQUEUE_AT_END=1"},
			func(ctx context.Context, job string) *exec.Cmd {
				return sl.command(ctx, "scancel", "--batch", "--signal=USR1", job)
			},
			[]string{"Slurm warns that the job ends soon", "user defined signal 1: the batch system warns that the job ends soon: draining",
				"worker stopping: no new designs", "requeueing job"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			evals := filepath.Join(dir, "evaluated")
			space, script := filepath.Join(dir, "space.yaml"), filepath.Join(dir, "eval.sh")
			write(t, space, "name: tiny\nparams:\n  x: {type: float, min: 0, max: 1}\n")
			// About 0.4 s a design on 2 slots: the first start is
			// interrupted well before its 60 designs are done.
			write(t, script, fmt.Sprintf("#!/bin/sh\ncat > /dev/null\necho \"$EVOQ_DESIGN_ID\" >> %s\nsleep 0.4\necho \"{\\\"fitness\\\": 0.${EVOQ_DESIGN_ID##*-}}\"\n", evals))
			env := append([]string{fmt.Sprintf("BUDGET=%d", budget), "INIT=10", "POOL=5", "GPUS=none", "SLOTS=2", "IFACE=127.0.0.1",
				"SPACE=" + space, "EVAL=sh " + script, "PERSISTENT=0", "DRAIN_TIMEOUT=1s"}, tt.env...)
			job := sl.submitNoWait(t, dir, env...)
			run := "nas-" + job
			waitFor(t, 2*time.Minute, func() bool { return lineCount(evals) >= 15 })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if out, err := tt.act(ctx, job).CombinedOutput(); err != nil {
				t.Fatalf("interrupting job %s: %v: %s", job, err, out)
			}
			at := lineCount(evals)
			sl.startRequeued(t, job, dir)
			state := sl.waitJobEnd(t, job, 4*time.Minute, dir)
			log := sl.jobLog(dir, job)
			if !strings.Contains(state, "JobState=COMPLETED") || !regexp.MustCompile(`Restarts=[1-9]`).MatchString(state) || !strings.Contains(state, "ExitCode=0:0") {
				t.Fatalf("job %s: %s\nwant completed, exit 0, after a restart; job log:\n%s\n%s", job, state, tail(log, 4000), sl.logs())
			}
			s := lastJSON(t, readText(t, filepath.Join(dir, "evoq-"+job+".summary")))
			if s.Evaluations != budget || s.Run != run || s.Error != 0 || s.Lost != 0 {
				t.Fatalf("job %s: summary %+v; want %d evaluations of run %s, no error or lost\njob log:\n%s", job, s, budget, run, tail(log, 4000))
			}
			// Slurm signals every process of the job, evaluators too:
			// the designs they ran go back, none fails.
			if strings.Contains(log, "evaluation failed") {
				t.Errorf("job %s: an evaluation failed; the designs the job's end cut short are to be handed back:\n%s", job, tail(log, 6000))
			}
			for _, want := range append([]string{"requeued (restart 1): continuing run " + run, "continuing the run with its recorded settings"}, tt.inLog...) {
				if !strings.Contains(log, want) {
					t.Errorf("job %s: the log lacks %q:\n%s", job, want, tail(log, 6000))
				}
			}
			checkCountedOnce(t, filepath.Join(dir, "evoq-store-"+run), run, budget)
			t.Logf("job %s: interrupted after %d evaluations started; %d started in all for a budget of %d; %d designs handed back as the job stopped",
				job, at, lineCount(evals), budget, strings.Count(log, "the evaluator was stopped with the job"))
		})
	}
}

// lineCount is the number of lines in the file at path; 0 when there is
// none.
func lineCount(path string) int {
	data, _ := os.ReadFile(path)
	return bytes.Count(data, []byte("\n"))
}

// submitNoWait submits the template on one node in dir, sharing the node,
// with env added, and returns the job ID at once.
func (sl *slurm) submitNoWait(t *testing.T, dir string, env ...string) string {
	t.Helper()
	script, err := filepath.Abs(slurmTemplate)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := sl.command(ctx, "sbatch", "--parsable", "--nodes=1", "--oversubscribe", "--chdir="+dir, script)
	cmd.Env = append(append(append([]string(nil), sl.env...), "EVOQ="+evoqBin), env...)
	out, err := cmd.CombinedOutput()
	job, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if err != nil || job == "" {
		t.Fatalf("sbatch: %v: %s", err, out)
	}
	return job
}

// waitJobEnd waits until job has ended for good (not requeued) and
// returns its scontrol record on one line.
func (sl *slurm) waitJobEnd(t *testing.T, job string, limit time.Duration, dir string) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	ended := regexp.MustCompile(`JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE)\b`)
	var last string
	for time.Now().Before(deadline) {
		out, err := sl.command(context.Background(), "scontrol", "-o", "show", "job", job).Output()
		if last = strings.TrimSpace(string(out)); err == nil && ended.MatchString(last) {
			return last
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("job %s has not ended after %s: %s\njob log:\n%s\n%s", job, limit, last, tail(sl.jobLog(dir, job), 4000), sl.logs())
	return ""
}

// checkCountedOnce reads run's results from its stopped store, made in
// operator mode, with evoq export: each design of the budget has exactly
// one counted result, and results for one design are of one design.
func checkCountedOnce(t *testing.T, store, run string, budget int) {
	t.Helper()
	r := evoq(t, time.Minute, "export", "--dir", store, "--trust", filepath.Join(store, "evoq-trust.json"), "--run", run, "--format", "jsonl")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	var results []*schema.Result
	counted := map[uint64]int{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var row struct {
			Counted bool `json:"counted"`
			schema.Result
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		results = append(results, &row.Result)
		if row.Counted {
			counted[row.Design.Seq]++
		}
	}
	checkDesigns(t, results, budget)
	for seq := uint64(1); seq <= uint64(budget); seq++ {
		if counted[seq] != 1 {
			t.Errorf("design %d counted %d times, want once", seq, counted[seq])
		}
	}
	if len(counted) != budget {
		t.Errorf("%d designs counted, want %d", len(counted), budget)
	}
}

// startRequeued waits until the requeued job is pending again, and lets
// it start at once: Slurm holds a requeued job for about two minutes
// (its begin time), then its main scheduler starts it within a minute,
// which a test need not wait for. What the job does when it starts again
// is the same.
func (sl *slurm) startRequeued(t *testing.T, job, dir string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var pending time.Time
	for {
		out, _ := sl.command(context.Background(), "scontrol", "-o", "show", "job", job).Output()
		if pending.IsZero() && strings.Contains(string(out), "JobState=PENDING") {
			pending = time.Now()
		}
		// slurmd refuses a launch whose credential is from the second its
		// job was requeued in (credentials carry whole seconds): the job
		// starts again two seconds later at the earliest.
		if !pending.IsZero() && time.Since(pending) > 2*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is not pending again 2 minutes after its requeue: %s\njob log:\n%s", job, out, tail(sl.jobLog(dir, job), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := sl.command(context.Background(), "scontrol", "update", "JobId="+job, "StartTime=now").CombinedOutput(); err != nil {
		t.Logf("scontrol update JobId=%s StartTime=now: %v: %s (the job starts when Slurm lets it)", job, err, out)
	}
}
