package test

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// With inheritance and the standalone broker SIGKILLed mid-run (uploads
// and deletions cut short), the store at the end holds exactly the
// checkpoints the rule keeps (--keep-checkpoints pool: the pool's), and
// the summary says what the store holds.
func TestCheckpointStoreAfterBrokerKills(t *testing.T) {
	t.Parallel()
	const run, budget = "ckstore", 120
	dir, port := t.TempDir(), freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	brk := newRestartable(t, "broker", "broker", "--dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	ctl := newRestartable(t, "controller", "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget),
		"--init", "10", "--pool", "5", "--inherit", "--evaluator", "sim", "--sim-mean", "0.15", "--sim-checkpoint", "32KB",
		"--progress", "200ms", "--json")
	for i := range 2 {
		newRestartable(t, "worker", "worker", "--nats", url, "--run", run, "--id", fmt.Sprintf("w%d", i), "--slots", "3", "--gpus", "none")
	}
	for range 3 {
		sleepRandom(700*time.Millisecond, 1400*time.Millisecond)
		if ctl.exited() {
			break
		}
		brk.kill()
		time.Sleep(500 * time.Millisecond)
		brk.start()
	}
	if err := ctl.cur.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.output(), 4000))
	}
	s := lastJSON(t, ctl.cur.stderr.String())
	if s.Evaluations != budget {
		t.Fatalf("%d evaluations, want %d", s.Evaluations, budget)
	}
	brk.stop()
	b := openStore(t, dir)
	listed := listed(t, checkpointStore(t, b, run))
	pool := poolIDs(fold(readResults(t, dir, run), run, budget, 10, 5, "worst"))
	slices.Sort(pool)
	slices.Sort(listed)
	if !slices.Equal(listed, pool) {
		t.Errorf("after %d broker kills the store holds %v; want the pool's checkpoints %v; summary %+v\n%s", brk.kills, listed, pool, s.Checkpoints, tail(ctl.output(), 3000))
	}
	if c := s.Checkpoints; c == nil || !c.Listed || c.Stored != len(listed) {
		t.Errorf("summary checkpoints %+v; want the store's listing, %d", s.Checkpoints, len(listed))
	}
}
