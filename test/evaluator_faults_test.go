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

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// An evaluator dies with its worker: a SIGKILLed worker leaves no orphan
// holding a GPU.
func TestEvaluatorDiesWithWorker(t *testing.T) {
	t.Parallel()
	const run = "orphan"
	_, url := startBroker(t, t.TempDir())
	background(t, "controller", "--nats", url, "--run", run, "--budget", "2", "--init", "2", "--pool", "1")
	// The shell expands the marker, so only a running evaluator matches it,
	// not the worker's own command line; it is this process's own, so an
	// orphan of another test run does not match either.
	marker := fmt.Sprintf("98%d.31", os.Getpid())
	w := background(t, "worker", "--nats", url, "--run", run, "--slots", "1", "--eval-cmd",
		fmt.Sprintf("sleep 98%d.3$((1))", os.Getpid()))
	waitFor(t, 30*time.Second, func() bool { return len(procsMatching(marker)) > 0 })
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	waitFor(t, 10*time.Second, func() bool { return len(procsMatching(marker)) == 0 })
}

// procsMatching lists the processes whose command line contains s.
func procsMatching(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		if cmd := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})); strings.Contains(cmd, s) {
			found = append(found, e.Name()+": "+strings.TrimSpace(cmd))
		}
	}
	return found
}

// A design whose evaluation kills its worker every time (a poison design)
// reaches the redelivery limit and is recorded as lost, once; the
// supervised workers come back and the rest of the run completes.
func TestPoisonDesign(t *testing.T) {
	t.Parallel()
	const run, budget = "poison", 12
	dir := t.TempDir()
	_, url := startBroker(t, dir)
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "4",
		"--pool", "4", "--max-deliver", "2", "--ack-wait", "3s", "--json")
	// The default worker ID is <host>-<pid>: design 5 kills the worker
	// evaluating it, whichever incarnation that is.
	script := `if [ "${EVOQ_DESIGN_ID##*-}" = 5 ]; then kill -9 "${EVOQ_WORKER##*-}"; sleep 2; exit 1; fi
echo '{"fitness": 0.5}'`
	var workers []*restartable
	for range 2 {
		workers = append(workers, newRestartable(t, "worker", "worker", "--nats", url, "--run", run,
			"--slots", "1", "--eval-cmd", script))
	}
	stop := make(chan struct{})
	wg := supervise(workers, stop)
	stopSupervising := func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(stopSupervising) // runs before the workers' own cleanups
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 4000))
	}
	stopSupervising()
	s := lastJSON(t, ctl.stderr.String())
	if s.Evaluations != budget || s.Lost != 1 || s.OK != budget-1 {
		t.Fatalf("evaluations %d, ok %d, lost %d; want %d, %d, 1\ncontroller:\n%s\nworkers:\n%s", s.Evaluations, s.OK, s.Lost,
			budget, budget-1, tail(ctl.stderr.String(), 3000), tail(workers[0].output()+workers[1].output(), 3000))
	}
	_, js := connectJS(t, url)
	results := storedResults(t, js, run)
	seqs := bySeq(results)
	for seq := uint64(1); seq <= budget; seq++ {
		rs := seqs[seq]
		switch {
		case len(rs) == 0:
			t.Errorf("design %d has no result", seq)
		case seq == 5:
			if len(rs) != 1 || rs[0].Status != schema.StatusLost || rs[0].Attempt != 2 {
				for _, r := range rs {
					t.Logf("design 5: status %s attempt %d worker %q error %q", r.Status, r.Attempt, r.Worker, r.Error)
				}
				t.Errorf("design 5 has %d results, first %s; want exactly one, lost after 2 deliveries", len(rs), rs[0].Status)
			}
		case rs[0].Status != schema.StatusOK:
			t.Errorf("design %d: counted result %s (%s), want ok", seq, rs[0].Status, rs[0].Error)
		}
	}
	f := fold(results, run, budget, 4, 4, runstate.ReplaceWorst)
	if f.Terminal() != budget || f.Count(schema.StatusLost) != 1 || len(seqs) != budget {
		t.Errorf("replayed fold: %d terminal, %d lost, %d designs with results; want %d, 1, %d", f.Terminal(),
			f.Count(schema.StatusLost), len(seqs), budget, budget)
	}
	t.Logf("%d results for %d designs; design 5 lost after 2 deliveries, each of which killed its worker", len(results), len(seqs))
}

// An evaluation past --eval-timeout is a timeout result, and the
// evaluator's whole process group dies with it: a background child as well
// as the foreground command.
func TestEvalTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	const marker = "987.65" // in no other command line
	script := `if [ $(( ${EVOQ_DESIGN_ID##*-} % 4 )) -eq 0 ]; then sleep 987.654 & sleep 987.655; fi
echo '{"fitness": 0.5}'`
	start := time.Now()
	s, dir := runJSON(t, time.Minute, "--run", "evto", "--eval-cmd", script, "--eval-timeout", "1s",
		"--slots", "2", "--budget", "8", "--init", "4", "--pool", "2")
	took := time.Since(start)
	if s.Evaluations != 8 || s.Timeout != 2 || s.OK != 6 {
		t.Fatalf("evaluations %d, timeout %d, ok %d; want 8, 2, 6", s.Evaluations, s.Timeout, s.OK)
	}
	if took > 30*time.Second {
		t.Errorf("the run took %s; the timeouts should end it within seconds", took)
	}
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = procsMatching(marker); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("evaluator processes outlived their timed-out evaluation:\n%s", strings.Join(left, "\n"))
	}
	for _, r := range readResults(t, dir, "evto") {
		timedOut := r.Design.Seq%4 == 0
		if (r.Status == schema.StatusTimeout) != timedOut {
			t.Errorf("design %d: status %s", r.Design.Seq, r.Status)
		}
		if timedOut && (r.Duration() < time.Second || r.Duration() > 10*time.Second) {
			t.Errorf("design %d timed out after %s, want about 1 s", r.Design.Seq, r.Duration())
		}
	}
}

// An evaluator that prints 20 MB to stdout costs the worker one result
// line at most (schema.MaxResultLine): the last line is still found, or,
// longer than a result line may be, reported by its size.
func TestEvaluatorFloodsStdout(t *testing.T) {
	t.Parallel()
	const flood = `head -c 20000000 /dev/zero | tr '\0' x`
	for _, tc := range []struct {
		name, cmd string
		args      []string
		check     func(t *testing.T, s *runstate.Summary, results []*schema.Result)
	}{{
		name: "json-after-flood",
		cmd:  flood + `; echo; echo '{"fitness": 0.5}'`,
		check: func(t *testing.T, s *runstate.Summary, results []*schema.Result) {
			if s.OK != 6 {
				t.Errorf("ok %d, want 6 (error %d)", s.OK, s.Error)
			}
			for _, r := range results {
				if r.Status != schema.StatusOK || r.Fitness != 0.5 {
					t.Errorf("%s: %s, fitness %v (%s); want ok, 0.5", r.DesignID, r.Status, r.Fitness, tail(r.Error, 300))
				}
			}
		},
	}, {
		name: "flood-without-newline",
		cmd:  flood,
		// Every design fails here, which would fail the run at its end
		// (--fail-fast); the point is what each result says.
		args: []string{"--fail-fast", "0"},
		check: func(t *testing.T, s *runstate.Summary, results []*schema.Result) {
			if s.Error != 6 {
				t.Errorf("error %d, want 6 (ok %d)", s.Error, s.OK)
			}
			for _, r := range results {
				if r.Status != schema.StatusError || !strings.Contains(r.Error, "result line is 20000000 bytes") ||
					!strings.Contains(r.Error, fmt.Sprintf("%d-byte limit", schema.MaxResultLine)) ||
					!strings.Contains(r.Error, `"xxxxxxxxxxxxxxxx`) || len(r.Error) > 1000 {
					t.Errorf("%s: %s, error (%d bytes) %q; want an error naming the line's size and the limit", r.DesignID, r.Status,
						len(r.Error), tail(r.Error, 300))
				}
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One attempt per design: the failures here are the designs'
			// own, retrying them would only flood again.
			s, dir := runJSON(t, time.Minute, append([]string{"--run", "flood", "--eval-cmd", tc.cmd, "--slots", "2", "--budget", "6",
				"--init", "4", "--pool", "2", "--error-retries", "0"}, tc.args...)...)
			if s.Evaluations != 6 {
				t.Fatalf("evaluations %d, want 6", s.Evaluations)
			}
			results := readResults(t, dir, "flood")
			if len(results) != 6 {
				t.Errorf("%d results stored, want 6", len(results))
			}
			tc.check(t, s, results)
		})
	}
}
