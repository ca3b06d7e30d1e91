package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// failFastOut is the part of `evoq replay --json` that says how the
// fail-fast check judged the run.
type failFastOut struct {
	Phase     schema.Phase    `json:"phase"`
	FailFast  string          `json:"fail_fast"`
	Failure   *schema.Failure `json:"failure"`
	Integrity string          `json:"integrity"`
}

func replayFailFast(t *testing.T, dir string) failFastOut {
	t.Helper()
	r := evoq(t, time.Minute, "replay", "--json", "--dir", dir)
	var out failFastOut
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &out); r.code != 0 || err != nil {
		t.Fatalf("replay: exit %d, %v\nstdout:\n%s\nstderr:\n%s", r.code, err, r.stdout, tail(r.stderr, 2000))
	}
	return out
}

// An evaluator that is not installed on any worker: the run stops with
// exit code 3 when its first 10 evaluations have failed, quoting the
// shell's complaint and naming the flag to check, instead of turning the
// whole budget into errors. Started again without --resume it is refused;
// with --resume and a working evaluator it finishes, every design counted
// once, the designs spent on the broken evaluator made up for.
func TestFailFastBrokenEvaluator(t *testing.T) {
	t.Parallel()
	const run, budget, slots = "broken", 500, 2
	dir := t.TempDir()
	base := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--slots", fmt.Sprint(slots), "--budget", fmt.Sprint(budget)}
	r := evoq(t, 2*time.Minute, append(base, "--run", run, "--eval-cmd", "nonexistent-prog")...)
	if r.code != 3 || !strings.Contains(r.stderr, "nonexistent-prog: not found") || !strings.Contains(r.stderr, "--eval-cmd") ||
		!strings.Contains(r.stderr, "--resume") {
		t.Fatalf("broken evaluator: exit %d; want 3 with the error text, --eval-cmd and --resume named\nstderr:\n%s", r.code, tail(r.stderr, 4000))
	}
	failedRun := replayFailFast(t, dir)
	f := failedRun.Failure
	if failedRun.Phase != schema.PhaseFailed || failedRun.FailFast != "failed" || f == nil || f.Attempts != runstate.FailFastDefault ||
		f.StreamSeq != runstate.FailFastDefault || !strings.Contains(f.Error, "nonexistent-prog: not found") {
		t.Fatalf("replay of the failed run: %+v, failure %+v; want phase failed, decided at the 10th result, quoting the shell", failedRun, f)
	}

	again := evoq(t, time.Minute, append(base, "--run", run, "--eval-cmd", "nonexistent-prog")...)
	if again.code != 3 || !strings.Contains(again.stderr, "--resume") {
		t.Fatalf("the failed run started again without --resume: exit %d; want 3 naming --resume\nstderr:\n%s", again.code, tail(again.stderr, 2000))
	}

	// The evaluator ignores its design: the test is about counting.
	fixed := evoq(t, 2*time.Minute, append(base, "--resume", "--json", "--eval-cmd", `cat >/dev/null; echo '{"fitness": 1}'`)...)
	if fixed.code != 0 {
		t.Fatalf("--resume with a working evaluator: exit %d\nstderr:\n%s", fixed.code, tail(fixed.stderr, 4000))
	}
	s := lastJSON(t, fixed.stdout)
	if s.Run != run || s.OK != budget || s.Evaluations != budget+s.Error {
		t.Errorf("resumed run %s: %d evaluations, %d ok, %d error; want %s with %d ok, the rest the failed start's errors",
			s.Run, s.Evaluations, s.OK, s.Error, run, budget)
	}
	if after := replayFailFast(t, dir); after.Phase != schema.PhaseDone || after.FailFast != "passed" || after.Integrity != "ok" {
		t.Errorf("replay of the continued run: %+v; want done, passed, integrity ok", after)
	}
	checkFailFastHistory(t, dir, run, budget, slots, s)
}

// checkFailFastHistory checks the stored results of the run that failed
// and was continued: every design has one counted result; the failed start
// stored few results, all errors; the resumed one none.
func checkFailFastHistory(t *testing.T, dir, run string, budget, slots int, s *runstate.Summary) {
	t.Helper()
	results := readResults(t, dir, run)
	total := budget + s.Error
	tally := runstate.NewTally(run, total, runstate.RulesOf(readRecord(t, dir, run)))
	// errs are the failed start's error attempts, countedErrs those that
	// counted: with retries, a design's first failure is retried, not
	// counted, and the continued run evaluates it again.
	errs, countedErrs, counted := 0, 0, map[uint64]int{}
	for i, r := range results {
		v := tally.Judge(r, nil)
		if v == runstate.Counted {
			counted[r.Design.Seq]++
		}
		if r.Status != schema.StatusError {
			continue
		}
		if v == runstate.Counted {
			countedErrs++
		}
		errs++
		if errs != i+1 {
			t.Errorf("an error result at stream sequence %d, after the run was continued: %s", i+1, r.Error)
		}
	}
	// After its 10th result the failed start publishes nothing more: only
	// the designs already handed out can still end in error.
	if most := runstate.FailFastDefault + slots + runstate.MarginFor(slots); errs < runstate.FailFastDefault || errs > most {
		t.Errorf("the failed start stored %d errors; want %d to %d", errs, runstate.FailFastDefault, most)
	}
	if countedErrs != s.Error || len(counted) != total || tally.Counted() != total {
		t.Errorf("%d counted error results (of %d error attempts), %d designs counted of %d; want %d errors and every design once",
			countedErrs, errs, len(counted), total, s.Error)
	}
}

// The same with the controller and a worker apart: the worker, which runs
// the broken evaluator, follows the failed run out with exit code 3 too,
// so that a batch system shows a failed step.
func TestFailFastStandaloneWorker(t *testing.T) {
	t.Parallel()
	_, url := startBroker(t, t.TempDir())
	w := background(t, "worker", "--nats", url, "--run", "apart", "--gpus", "none", "--slots", "2", "--eval-cmd", "nonexistent-prog")
	r := evoq(t, 2*time.Minute, "controller", "--nats", url, "--run", "apart", "--budget", "500", "--wait-slots", "2")
	if r.code != 3 || !strings.Contains(r.stderr, "nonexistent-prog: not found") || !strings.Contains(r.stderr, "--eval-cmd") {
		t.Fatalf("controller: exit %d; want 3 with the error text and --eval-cmd\nstderr:\n%s", r.code, tail(r.stderr, 4000))
	}
	err := w.wait(t, time.Minute)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(w.stderr.String(), "the run failed") {
		t.Fatalf("worker: %v; want exit code 3 saying the run failed\noutput:\n%s", err, tail(w.stderr.String(), 3000))
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// After its 10th result the controller publishes nothing more.
	if n := subjectCount(t, js, "apart"); n > runstate.FailFastDefault+2+runstate.MarginFor(2) {
		t.Errorf("%d results stored; the run should have stopped at its 10th", n)
	}
}
