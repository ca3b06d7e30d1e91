package test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// evoq status --watch redraws until interrupted: with --json one object
// per period, following the run as it moves on, and exit 0 on SIGINT.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	const run = "watched"
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", "300", "--init", "10", "--pool", "5", "--json")
	background(t, "worker", "--nats", url, "--run", run, "--slots", "4", "--evaluator", "sim", "--sim-mean", "0.05")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "worker joined") })
	watch := background(t, "status", "--nats", url, "--run", run, "--watch", "300ms", "--json")
	time.Sleep(2500 * time.Millisecond)
	if err := watch.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := watch.wait(t, 10*time.Second); err != nil {
		t.Fatalf("status --watch after SIGINT: %v\n%s", err, watch.stderr.String())
	}
	var done []int
	withSlots := 0
	for _, l := range strings.Split(strings.TrimSpace(watch.stderr.String()), "\n") {
		if l == "evoq: interrupt: stopping" {
			continue
		}
		var st struct {
			Run     string `json:"run"`
			Done    int    `json:"done"`
			Workers []struct {
				Slots int `json:"slots"`
			} `json:"workers"`
		}
		if err := json.Unmarshal([]byte(l), &st); err != nil {
			t.Fatalf("status --watch --json printed a line that is not JSON: %q", l)
		}
		if st.Run != run || len(st.Workers) != 1 {
			t.Errorf("status: %s", l)
		} else if st.Workers[0].Slots == 4 {
			withSlots++
		} else {
			t.Logf("a status without the worker's heartbeat: %s", l)
		}
		done = append(done, st.Done)
	}
	if withSlots == 0 {
		t.Error("no status showed the worker's 4 slots")
	}
	if len(done) < 4 {
		t.Fatalf("%d redraws in 2.5 s at --watch 300ms, want at least 4", len(done))
	}
	for i := 1; i < len(done); i++ {
		if done[i] < done[i-1] {
			t.Errorf("done went backwards: %v", done)
		}
	}
	if done[len(done)-1] <= done[0] {
		t.Errorf("done did not move while watching: %v", done)
	}
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatal(err)
	}
}
