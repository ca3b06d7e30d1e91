package test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// A worker that joins a run in progress has every one of its slots fed
// within a second of joining, and the run completes its budget.
func TestJoinMidRun(t *testing.T) {
	t.Parallel()
	const run, budget = "join", 120
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "20",
		"--pool", "10", "--json")
	a := background(t, "worker", "--nats", url, "--run", run, "--id", "a", "--slots", "2",
		"--evaluator", "sim", "--sim-mean", "0.5")
	_, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(a.stderr.String(), "worker joined run") })
	// The run is under way: a has stored some results.
	waitFor(t, 30*time.Second, func() bool { return subjectCount(t, js, run) >= 4 })
	b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "4",
		"--evaluator", "sim", "--sim-mean", "0.5")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(b.stderr.String(), "worker joined run") })
	joined := logLineTime(t, b.stderr.String(), "worker joined run", "worker=b")
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if !hasLine(ctl.stderr.String(), `msg="worker joined"`, "worker=b", "slots=4") {
		t.Errorf("the controller did not log b joining with 4 slots:\n%s", tail(ctl.stderr.String(), 3000))
	}
	s := lastJSON(t, ctl.stderr.String())
	if s.Evaluations != budget || s.Slots != 6 || s.SlotsUsed != 6 {
		t.Errorf("evaluations %d, slots %d, used %d; want %d, 6, 6", s.Evaluations, s.Slots, s.SlotsUsed, budget)
	}
	results := storedResults(t, js, run)
	checkOneResultEach(t, results, budget)
	first := map[int]time.Time{}
	for _, r := range resultsOf(results, "b") {
		if f, ok := first[r.Slot]; !ok || r.Start.Before(f) {
			first[r.Slot] = r.Start
		}
	}
	for slot := range 4 {
		f, ok := first[slot]
		if !ok {
			t.Errorf("b's slot %d evaluated nothing", slot)
			continue
		}
		// Within a few heartbeats, far inside the 30 s ack wait: a slot
		// that waited for a redelivery would show it.
		if d := f.Sub(joined); d < -5*time.Millisecond || d > 3*time.Second {
			t.Errorf("b's slot %d started its first design %s after b joined, want within 3 s (the ack wait is 30 s)", slot, d)
		} else {
			t.Logf("b's slot %d started its first design %s after b joined", slot, d.Round(time.Millisecond))
		}
	}
	if len(first) != 4 {
		t.Errorf("b evaluated on slots %v, want 0-3", first)
	}
}

// A worker sent SIGTERM takes no new design, finishes the evaluations it
// is running and stores their results, then exits 0; the run completes
// with another worker and nothing is evaluated twice.
func TestLeaveDrain(t *testing.T) {
	t.Parallel()
	const run, budget = "drain", 40
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "10",
		"--pool", "5", "--json")
	a := background(t, "worker", "--nats", url, "--run", run, "--id", "a", "--slots", "2",
		"--eval-cmd", `sleep 5; echo '{"fitness": 1}'`)
	_, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(a.stderr.String(), "worker joined run") })
	// Both slots evaluating: delivered, and started (a delivered design's
	// start is taken a moment later, so ackPending alone can see the
	// SIGTERM come first).
	waitFor(t, 30*time.Second, func() bool { return ackPending(t, js, run) == 2 && busySlots(t, js, run, "a") == 2 })
	sig := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2", "--evaluator", "noop")
	if err := a.wait(t, 15*time.Second); err != nil {
		t.Fatalf("a exited with %v on SIGTERM, want 0\n%s", err, tail(a.stderr.String(), 3000))
	}
	left := time.Since(sig)
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if err := b.wait(t, 30*time.Second); err != nil {
		t.Fatalf("b: %v", err)
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget || s.OK != budget {
		t.Errorf("evaluations %d, ok %d; want %d, %d", s.Evaluations, s.OK, budget, budget)
	}
	results := storedResults(t, js, run)
	checkOneResultEach(t, results, budget)
	fromA := resultsOf(results, "a")
	if len(fromA) != 2 {
		t.Errorf("a stored %d results, want its 2 running evaluations", len(fromA))
	}
	for _, r := range fromA {
		if r.Status != schema.StatusOK || r.Attempt != 1 || !r.Start.Before(sig) || !r.Stop.After(sig) {
			t.Errorf("a's %s: %s attempt %d, %s to %s, SIGTERM at %s; want ok attempt 1, running at the SIGTERM",
				r.DesignID, r.Status, r.Attempt, r.Start.Format("15:04:05.000"), r.Stop.Format("15:04:05.000"), sig.Format("15:04:05.000"))
		}
	}
	for _, r := range resultsOf(results, "b") {
		if r.Attempt != 1 {
			t.Errorf("b's %s: attempt %d, want 1: nothing of a's was handed back", r.DesignID, r.Attempt)
		}
	}
	log := a.stderr.String()
	if !strings.Contains(log, "worker stopping: no new designs") || strings.Contains(log, "drain time over") {
		t.Errorf("a's log does not show a complete drain:\n%s", tail(log, 3000))
	}
	t.Logf("a drained its 2 evaluations and left %s after SIGTERM", left.Round(time.Millisecond))
}

// A worker whose drain is cut short, by --drain-timeout or by a second
// signal, exits at once and hands its running designs back: another
// worker evaluates them (attempt 2) right away, long before the 30 s
// AckWait would have redelivered them.
func TestLeaveDrainTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		extra   []string
		signals int
	}{
		{name: "drain-timeout", extra: []string{"--drain-timeout", "1s"}, signals: 1},
		{name: "second-signal", extra: nil, signals: 2}, // default drain timeout 5m
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const run, budget = "cut", 40
			_, url := startBroker(t, t.TempDir())
			ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "10",
				"--pool", "5", "--json")
			a := background(t, append([]string{"worker", "--nats", url, "--run", run, "--id", "a", "--slots", "2",
				"--eval-cmd", `sleep 30; echo '{"fitness": 1}'`}, tc.extra...)...)
			_, js := connectJS(t, url)
			waitFor(t, 30*time.Second, func() bool { return strings.Contains(a.stderr.String(), "worker joined run") })
			waitFor(t, 30*time.Second, func() bool { return ackPending(t, js, run) == 2 })
			sig := time.Now()
			if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if tc.signals == 2 {
				// The second signal once the first is seen: two at once may merge.
				waitFor(t, 5*time.Second, func() bool { return strings.Contains(a.stderr.String(), "draining; send it again") })
				if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2", "--evaluator", "noop")
			if err := a.wait(t, 5*time.Second); err != nil {
				t.Fatalf("a exited with %v, want 0\n%s", err, tail(a.stderr.String(), 3000))
			}
			left := time.Since(sig)
			if err := ctl.wait(t, 20*time.Second); err != nil {
				t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
			}
			if err := b.wait(t, 30*time.Second); err != nil {
				t.Fatalf("b: %v", err)
			}
			if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget || s.OK != budget {
				t.Errorf("evaluations %d, ok %d; want %d, %d", s.Evaluations, s.OK, budget, budget)
			}
			results := storedResults(t, js, run)
			checkOneResultEach(t, results, budget)
			if n := len(resultsOf(results, "a")); n != 0 {
				t.Errorf("a stored %d results of cut evaluations, want 0", n)
			}
			var handedBack []string
			for _, r := range results {
				if r.Attempt == 1 {
					continue
				}
				handedBack = append(handedBack, r.DesignID)
				if r.Worker != "b" || r.Attempt != 2 || r.Start.Sub(sig) > 10*time.Second {
					t.Errorf("%s: worker %s attempt %d, started %s after the SIGTERM; want b, attempt 2, within 10 s",
						r.DesignID, r.Worker, r.Attempt, r.Start.Sub(sig).Round(time.Millisecond))
				}
			}
			if len(handedBack) != 2 {
				t.Errorf("designs evaluated again: %v, want a's 2", handedBack)
			}
			t.Logf("a left %s after the first SIGTERM; %v evaluated again by b", left.Round(time.Millisecond), handedBack)
		})
	}
}

// busySlots is the number of busy slots worker's last heartbeat in run
// reported; 0 before its first.
func busySlots(t *testing.T, js jetstream.JetStream, run, worker string) int {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, schema.PresenceBucket)
	if err != nil {
		return 0 // not created yet
	}
	e, err := kv.Get(ctx, schema.PresenceKey(run, worker))
	if err != nil {
		return 0
	}
	p, err := schema.DecodePresence(e.Value())
	if err != nil {
		t.Fatalf("presence of %s: %v", worker, err)
	}
	return p.Busy
}
