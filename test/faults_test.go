package test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// killWindows records when a component was down.
type killWindows [][2]time.Time

func (k killWindows) contains(t time.Time) bool {
	for _, w := range k {
		if t.After(w[0]) && t.Before(w[1]) {
			return true
		}
	}
	return false
}

// heldResults counts results that finished while the broker was down: the
// worker held them and stored them once the broker was back.
func heldResults(results []*schema.Result, down killWindows) int {
	n := 0
	for _, r := range results {
		if r.Status != schema.StatusLost && down.contains(r.Stop) {
			n++
		}
	}
	return n
}

// The controller and its embedded broker are killed with SIGKILL at random
// moments and restarted on the same store: the run ends with exactly its
// budget, nothing published twice, the pool rebuilt exactly, and results
// computed while the broker was down stored once it is back.
func TestControllerWithEmbeddedBrokerKilled(t *testing.T) {
	t.Parallel()
	const run, budget = "ctlkill", 240
	dir, port := t.TempDir(), freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	ctlArgs := []string{"controller", "--dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--run", run,
		"--budget", fmt.Sprint(budget), "--init", "10", "--pool", "5", "--progress", "100ms", "--json"}
	ctl := newRestartable(t, "controller", ctlArgs...)
	var workers []*restartable
	for i := range 2 {
		workers = append(workers, newRestartable(t, "worker", "worker", "--nats", url, "--run", run,
			"--id", fmt.Sprintf("w%d", i), "--slots", "3", "--evaluator", "sim", "--sim-mean", "0.3"))
	}
	var down killWindows
	for k := range 3 {
		// Each kill once the run is that far along, so that the workers
		// are evaluating through the outage: timed from the start, on a
		// loaded machine the first kills came before any evaluation.
		waitEvaluations(t, ctl, (k+1)*budget/5)
		sleepRandom(0, 500*time.Millisecond)
		if ctl.exited() {
			break
		}
		from := time.Now()
		ctl.kill()
		time.Sleep(time.Second) // workers keep evaluating, holding their results
		ctl.start()
		down = append(down, [2]time.Time{from, time.Now()})
	}
	if err := ctl.cur.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.output(), 4000))
	}
	for _, w := range workers {
		if err := w.cur.wait(t, 30*time.Second); err != nil {
			t.Fatalf("worker: %v\n%s", err, tail(w.output(), 3000))
		}
	}
	s := lastJSON(t, ctl.cur.stderr.String())
	if s.Evaluations != budget {
		t.Fatalf("run ended with %d evaluations, want %d", s.Evaluations, budget)
	}
	if ctl.kills == 0 {
		t.Fatal("the run ended before the controller could be killed")
	}
	v := verifyRun(t, dir, run, budget, runstate.ReplaceWorst, 10, 5, ctl.output())
	results := readResults(t, dir, run)
	if n := heldResults(results, down); n == 0 {
		t.Errorf("no result finished while the broker was down; the test did not exercise held results")
	}
	t.Logf("survived %s; %s; %d results held through a broker outage", killCount(ctl), v, heldResults(results, down))
}

// A standalone broker is killed and restarted mid-run on the same store:
// the controller and the workers reconnect by themselves and the same
// guarantees hold.
func TestStandaloneBrokerKilled(t *testing.T) {
	t.Parallel()
	const run, budget = "brokill", 200
	dir, port := t.TempDir(), freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	brk := newRestartable(t, "broker", "broker", "--dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	ctl := newRestartable(t, "controller", "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget),
		"--init", "10", "--pool", "5", "--progress", "100ms", "--json")
	for i := range 2 {
		newRestartable(t, "worker", "worker", "--nats", url, "--run", run, "--id", fmt.Sprintf("w%d", i),
			"--slots", "3", "--evaluator", "sim", "--sim-mean", "0.3")
	}
	var down killWindows
	for k := range 2 {
		// As above: a kill timed from the start could come before the
		// workers evaluated anything, and no result would be held.
		waitEvaluations(t, ctl, (k+1)*budget/4)
		sleepRandom(0, 500*time.Millisecond)
		if ctl.exited() {
			break
		}
		from := time.Now()
		brk.kill()
		time.Sleep(time.Second)
		brk.start()
		down = append(down, [2]time.Time{from, time.Now()})
	}
	if err := ctl.cur.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.output(), 4000))
	}
	s := lastJSON(t, ctl.cur.stderr.String())
	if s.Evaluations != budget || brk.kills == 0 {
		t.Fatalf("run ended with %d evaluations after %d broker kills, want %d and at least one", s.Evaluations, brk.kills, budget)
	}
	brk.stop()
	v := verifyRun(t, dir, run, budget, runstate.ReplaceWorst, 10, 5, ctl.output())
	results := readResults(t, dir, run)
	if n := heldResults(results, down); n == 0 {
		t.Errorf("no result finished while the broker was down; the test did not exercise held results")
	}
	t.Logf("survived %s; %s; %d results held through a broker outage", killCount(brk), v, heldResults(results, down))
}

// A worker killed mid-evaluation: its designs come back to another slot
// after AckWait and count once.
func TestWorkerKilledMidEvaluation(t *testing.T) {
	t.Parallel()
	const run, budget = "wkill", 16
	dir := t.TempDir()
	_, url := startBroker(t, dir)
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "4",
		"--pool", "4", "--ack-wait", "3s", "--json")
	victim := background(t, "worker", "--nats", url, "--run", run, "--id", "victim", "--slots", "2",
		"--eval-cmd", `sleep 30; echo '{"fitness": 0}'`)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(victim.stderr.String(), "worker joined run") })
	_, js := connectJS(t, url)                                                     // the broker outlives the workers: read through it
	waitFor(t, 30*time.Second, func() bool { return ackPending(t, js, run) == 2 }) // both slots evaluating
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	background(t, "worker", "--nats", url, "--run", run, "--id", "rescuer", "--slots", "2",
		"--evaluator", "sim", "--sim-mean", "0.05")
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	results := storedResults(t, js, run)
	redelivered := 0
	for _, r := range results {
		if r.Worker == "victim" {
			t.Errorf("a result from the killed worker: %s", r.DesignID)
		}
		if r.Attempt == 2 {
			redelivered++
		}
	}
	if redelivered != 2 || len(results) != budget {
		t.Fatalf("%d results, %d of them second attempts; want %d and 2 (the killed worker's two designs)", len(results), redelivered, budget)
	}
}

// An evaluation longer than AckWait is never redelivered while its worker
// lives: InProgress heartbeats keep it.
func TestLongEvaluationNotRedelivered(t *testing.T) {
	t.Parallel()
	const run = "long"
	dir := t.TempDir()
	_, url := startBroker(t, dir)
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", "4", "--init", "4", "--pool", "2",
		"--ack-wait", "3s", "--json")
	slow := background(t, "worker", "--nats", url, "--run", run, "--slots", "4", "--eval-cmd", `sleep 7; echo '{"fitness": 1}'`)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(slow.stderr.String(), "worker joined run") })
	_, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return ackPending(t, js, run) == 4 })              // the slow worker's slots hold all four designs
	background(t, "worker", "--nats", url, "--run", run, "--slots", "4", "--evaluator", "noop") // would take any redelivery
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	results := storedResults(t, js, run)
	if len(results) != 4 {
		t.Fatalf("%d results for 4 designs: a live evaluation was redelivered", len(results))
	}
	for _, r := range results {
		if r.Attempt != 1 || r.Duration() < 7*time.Second {
			t.Errorf("%s: attempt %d, %s; want the 7 s evaluation's first attempt", r.DesignID, r.Attempt, r.Duration())
		}
	}
}

// A worker frozen (SIGSTOP) mid-evaluation has its design redelivered to
// another worker; thawed, it stores its own result for the same design
// too. The stream keeps both, the run counts the design once.
func TestDuplicateResultsCountOnce(t *testing.T) {
	t.Parallel()
	const run, budget = "dup", 20
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "4",
		"--pool", "4", "--ack-wait", "3s", "--json")
	a := background(t, "worker", "--nats", url, "--run", run, "--id", "a", "--slots", "1",
		"--eval-cmd", `sleep 2; echo '{"fitness": 0.1}'`)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(a.stderr.String(), "worker joined run") })
	_, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return ackPending(t, js, run) == 1 }) // a's slot is evaluating
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2",
		"--eval-cmd", `sleep 1; echo '{"fitness": 0.1}'`)
	var redelivered *schema.Result
	for deadline := time.Now().Add(30 * time.Second); redelivered == nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no second attempt by worker b within 30 s\ncontroller:\n%s", tail(ctl.stderr.String(), 3000))
		}
		for _, r := range storedResults(t, js, run) {
			if r.Worker == "b" && r.Attempt == 2 {
				redelivered = r
			}
		}
	}
	thaw()
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	s := lastJSON(t, ctl.stderr.String())
	results := storedResults(t, js, run)
	twice := 0
	for seq, rs := range bySeq(results) {
		if len(rs) == 1 {
			continue
		}
		twice++
		if seq != redelivered.Design.Seq || len(rs) != 2 {
			t.Errorf("design %d has %d results", seq, len(rs))
			continue
		}
		got := map[string]int{}
		for _, r := range rs {
			got[r.Worker] = r.Attempt
		}
		if got["a"] != 1 || got["b"] != 2 {
			t.Errorf("design %d: results by worker and attempt %v, want a: 1, b: 2", seq, got)
		}
	}
	if twice != 1 {
		t.Errorf("%d designs with two results, want 1 (the frozen worker's own result was not stored?)\nworker a:\n%s",
			twice, tail(a.stderr.String(), 2000))
	}
	f := fold(results, run, budget, 4, 4, runstate.ReplaceWorst)
	if s.Evaluations != budget || f.Terminal() != budget || len(results) != budget+1 {
		t.Errorf("summary %d evaluations, replayed fold %d terminal, %d results stored; want %d, %d, %d",
			s.Evaluations, f.Terminal(), len(results), budget, budget, budget+1)
	}
	t.Logf("design %s evaluated by a (frozen, attempt 1) and b (attempt 2); counted once", redelivered.DesignID)
}
