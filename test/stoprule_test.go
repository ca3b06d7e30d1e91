package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// simArgs run a simulated evaluator of about 50 ms on 4 local slots.
var simArgs = []string{"--evaluator", "sim", "--sim-mean", "0.05", "--slots", "4", "--gpus", "none"}

// stopOf reads the stop reason that status and replay give for a run done.
func stopOf(t *testing.T, dir, run string) (status, replay schema.StopReason) {
	t.Helper()
	var st, rp struct {
		StopReason schema.StopReason `json:"stop_reason"`
	}
	for _, c := range []struct {
		cmd string
		v   any
	}{{"status", &st}, {"replay", &rp}} {
		r := evoq(t, time.Minute, c.cmd, "--dir", dir, "--run", run, "--json")
		if err := json.Unmarshal([]byte(r.stdout), c.v); err != nil || r.code != 0 {
			t.Fatalf("%s --json: exit %d, %v\n%s", c.cmd, r.code, err, r.stderr)
		}
	}
	return st.StopReason, rp.StopReason
}

// A run with a time budget and a budget it could never spend in that
// time ends on time, cleanly, with exit 0.
func TestTimeBudgetEndsRun(t *testing.T) {
	t.Parallel()
	began := time.Now()
	s, dir := runJSON(t, 2*time.Minute, append([]string{"--run", "tb", "--budget", "1000000", "--time-budget", "20s"}, simArgs...)...)
	took := time.Since(began)
	if s.StopReason != schema.StopTime {
		t.Fatalf("stop_reason %q, want time", s.StopReason)
	}
	// 20 s, the drain of the designs in flight (about 50 ms each), and
	// the start and end of the broker and workers.
	if took > 35*time.Second || s.Evaluations < 50 || s.Evaluations >= 1000000 {
		t.Fatalf("ended after %s with %d evaluations; want about 20 s and some hundreds", took.Round(time.Millisecond), s.Evaluations)
	}
	// status and replay open the store: before the test's own reader does.
	if st, _ := stopOf(t, dir, "tb"); st != schema.StopTime {
		t.Fatalf("status gives stop_reason %q, want time", st)
	}
	checkDesigns(t, readResults(t, dir, "tb"), s.Evaluations)
}

// Target and plateau end a run from its results: the best reaching the
// target, or a run of results without a better best; replay, reading the
// same results, reaches the same verdict.
func TestTargetAndPlateauEndRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want schema.StopReason
	}{
		{"target", []string{"--target", "0.7"}, schema.StopTarget},
		{"plateau", []string{"--plateau", "25"}, schema.StopPlateau},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := "sr-" + tt.name
			args := append([]string{"--run", run, "--budget", "1000000"}, tt.args...)
			s, dir := runJSON(t, 2*time.Minute, append(args, simArgs...)...)
			if s.StopReason != tt.want || s.Evaluations >= 1000000 {
				t.Fatalf("stop_reason %q after %d evaluations, want %s", s.StopReason, s.Evaluations, tt.want)
			}
			if tt.want == schema.StopTarget && (s.BestFitness == nil || *s.BestFitness < 0.7) {
				t.Fatalf("ended on target 0.7 with best %v", s.BestFitness)
			}
			if st, rp := stopOf(t, dir, run); st != tt.want || rp != tt.want {
				t.Fatalf("status gives stop_reason %q, replay %q; want %s", st, rp, tt.want)
			}
			checkDesigns(t, readResults(t, dir, run), s.Evaluations)
		})
	}
}

// A controller killed mid-run and started again with only its run and
// store keeps the run's target, plateau and time budget: the same
// deadline, not a new one from the restart, and it ends on time.
func TestRestartKeepsStopRule(t *testing.T) {
	t.Parallel()
	dir, port := t.TempDir(), freePort(t)
	listen, url := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("nats://127.0.0.1:%d", port)
	first := background(t, "controller", "--dir", dir, "--listen", listen, "--run", "rk", "--budget", "1000000",
		"--target", "5", "--plateau", "1000000", "--time-budget", "15s", "--progress", "100ms")
	workerArgs := []string{"worker", "--nats", url, "--run", "rk", "--evaluator", "sim", "--sim-mean", "0.05", "--slots", "4", "--gpus", "none"}
	background(t, workerArgs...)
	waitFor(t, time.Minute, func() bool {
		p := progressLines(first.stderr.String())
		return len(p) > 0 && atoi(p[len(p)-1][0]) >= 40
	})
	_ = first.cmd.Process.Kill()
	_ = first.wait(t, 10*time.Second)
	deadline := fieldOf(lineWith(first.stderr.String(), "controller starting"), "deadline")

	var stdout bytes.Buffer
	second := newProc(&stdout, "controller", "--dir", dir, "--listen", listen, "--run", "rk", "--json")
	second.start(t, nil)
	if err := second.wait(t, time.Minute); err != nil {
		t.Fatalf("restarted controller: %v\n%s", err, tail(second.stderr.String(), 3000))
	}
	log := second.stderr.String()
	cont := lineWith(log, "continuing the run with its recorded settings")
	for _, want := range []string{"target=5", "plateau=1000000", "time_budget=15s", "deadline=" + deadline} {
		if !strings.Contains(cont, want) {
			t.Errorf("the continuation line lacks %s:\n%s", want, cont)
		}
	}
	if got := fieldOf(lineWith(log, "controller starting"), "deadline"); got != deadline || deadline == "" {
		t.Errorf("the restarted controller's deadline %q, the first one's %q", got, deadline)
	}
	s := lastJSON(t, stdout.String())
	if s.StopReason != schema.StopTime {
		t.Fatalf("the restarted run ended with stop_reason %q, want time", s.StopReason)
	}
	checkDesigns(t, readResults(t, dir, "rk"), s.Evaluations)
}

// fieldOf is the value of key=value in a logfmt line, unquoted.
func fieldOf(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
