package test

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A controller SIGKILLed right after "whole budget published" and started
// again once every result is stored ends the run at once: it must still
// fold every stored report first, so that its rung statistics are evoq
// replay's. Standalone workers, over 10,000 reports; three times.
func TestRestartAtEndFoldsEveryReport(t *testing.T) {
	t.Parallel()
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			testRestartAtEndFoldsEveryReport(t)
		})
	}
}

func testRestartAtEndFoldsEveryReport(t *testing.T) {
	const run, budget = "rr", 1200
	_, url := startBroker(t, t.TempDir())
	args := []string{"controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "20", "--pool", "10",
		"--evaluator", "sim", "--sim-mean", "0.03", "--sim-curve", "--sim-steps", "27", "--early-stop", "median",
		"--max-step", "27", "--json", "--log-level", "info"}
	ctl := background(t, args...)
	for i := range 2 {
		background(t, "worker", "--nats", url, "--run", run, "--id", fmt.Sprint("w", i), "--slots", "4", "--gpus", "none")
	}
	waitShowing(t, 3*time.Minute, func() bool { return strings.Contains(ctl.stderr.String(), "whole budget published") },
		func() string { return tail(ctl.stderr.String(), 3000) })
	_ = ctl.cmd.Process.Signal(syscall.SIGKILL)
	_ = ctl.wait(t, 30*time.Second)
	// The workers finish the designs in flight with no controller.
	_, js := connectJS(t, url)
	waitShowing(t, 3*time.Minute, func() bool {
		seen := map[string]bool{}
		for _, r := range storedResults(t, js, run) {
			seen[r.DesignID] = true
		}
		return len(seen) >= budget
	}, func() string { return "results still coming" })

	r := evoq(t, 3*time.Minute, args...)
	if r.code != 0 {
		t.Fatalf("restarted controller: exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	s := lastJSON(t, r.stdout)
	rep := evoq(t, time.Minute, "replay", "--nats", url, "--run", run, "--json")
	var out struct {
		EarlyStop *struct {
			Reports int    `json:"reports"`
			Stops   int    `json:"stops"`
			Digest  string `json:"rungs_digest"`
		} `json:"early_stop"`
	}
	if err := json.Unmarshal([]byte(lastLine(rep.stdout)), &out); err != nil || out.EarlyStop == nil {
		t.Fatalf("replay: %v\n%s%s", err, rep.stdout, rep.stderr)
	}
	if out.EarlyStop.Reports < 10000 {
		t.Errorf("only %d reports stored; the test wants over 10,000 to exercise a long reports stream", out.EarlyStop.Reports)
	}
	if s.EarlyStop == nil || s.EarlyStop.Digest != out.EarlyStop.Digest || s.EarlyStop.Reports != out.EarlyStop.Reports {
		t.Errorf("the restarted controller's rungs: %+v; replay's: %+v", s.EarlyStop, out.EarlyStop)
	}
}
