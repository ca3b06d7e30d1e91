package test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
)

var soakFor = flag.Duration("soak", 0, "run TestSoak for this long, killing random components (0: skip)")

// TestSoak runs a search for -soak while killing workers, the controller
// and the standalone broker with SIGKILL at random moments, then checks
// every invariant and reports what it survived:
//
//	go test ./test -run TestSoak -v -soak=3m
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("pass -soak=3m to run the soak")
	}
	const run, slotsPerWorker, nWorkers = "soak", 3, 3
	budget := int(soakFor.Seconds() * 60) // more than 9 slots of 0.1 s finish meanwhile: kills go on to the end
	dir, port := t.TempDir(), freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	brk := newRestartable(t, "broker", "broker", "--dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	ctl := newRestartable(t, "controller", "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget),
		"--init", "20", "--pool", "10", "--replace", "oldest", "--ack-wait", "3s", "--max-deliver", "20",
		"--progress", "250ms", "--json")
	workers := make([]*restartable, nWorkers)
	for i := range workers {
		workers[i] = newRestartable(t, "worker", "worker", "--nats", url, "--run", run, "--id", fmt.Sprintf("w%d", i),
			"--slots", fmt.Sprint(slotsPerWorker), "--evaluator", "sim", "--sim-mean", "0.1", "--sim-fail", "0.2")
	}
	stop := make(chan struct{})
	sup := supervise(workers, stop)
	workerKills := soakKills(ctl, brk, workers, *soakFor)
	if err := ctl.cur.wait(t, *soakFor+5*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.output(), 4000))
	}
	close(stop)
	sup.Wait()
	s := lastJSON(t, ctl.cur.stderr.String())
	brk.stop()
	v := verifyRun(t, dir, run, budget, runstate.ReplaceOldest, 20, 10, ctl.output())
	if s.Evaluations != budget || s.Lost != 0 {
		t.Errorf("summary: %d evaluations, %d lost; want %d and 0", s.Evaluations, s.Lost, budget)
	}
	fmt.Printf("soak %s: survived %d worker kills, %s; verified %s; lost designs %d, double-counted results 0 (fold terminal %d = budget %d)\n",
		*soakFor, workerKills, killCount(ctl, brk), v, s.Lost, v.terminal, budget)
}

// soakKills kills a random component every 0.5-3 s for d: a worker (the
// supervisor restarts it), the controller (restarted at once) or the broker
// (restarted after up to 1.5 s). It returns the number of worker kills.
func soakKills(ctl, brk *restartable, workers []*restartable, d time.Duration) int {
	kills := 0
	for end := time.Now().Add(d); time.Now().Before(end) && !ctl.exited(); {
		sleepRandom(500*time.Millisecond, 3*time.Second)
		switch p := rand.Float64(); {
		case p < 0.6:
			w := workers[rand.IntN(len(workers))]
			if !w.exited() {
				w.kill()
				kills++
			}
		case p < 0.85:
			ctl.kill()
			ctl.start()
		default:
			brk.kill()
			sleepRandom(200*time.Millisecond, 1500*time.Millisecond)
			brk.start()
		}
	}
	return kills
}
