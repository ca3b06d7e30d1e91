package test

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// A run with --cost-tie, SIGKILLed and continued with --resume and no
// other flag, keeps its tie: the record holds it, the resume says it took
// it, and a resume given another tie is refused, naming the flag.
func TestCostTieResume(t *testing.T) {
	t.Parallel()
	store := t.TempDir() + "/store"
	const budget = 3000
	first := background(t, "run", "--run", "ct", "--dir", store, "--listen", "127.0.0.1:0", "--evaluator", "sim",
		"--sim-mean", "0.005", "--cost-tie", "0.01", "--budget", "3000", "--slots", "2", "--progress", "200ms", "--log-level", "info")
	waitShowing(t, time.Minute, func() bool { return evaluationsSoFar(first.stderr.String()) >= 100 },
		func() string { return first.stderr.String() })
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.wait(t, 30*time.Second)
	if n := evaluationsSoFar(first.stderr.String()); n >= budget {
		t.Fatalf("the first run finished its %d designs before it was killed", n)
	}

	other := evoq(t, time.Minute, "run", "--resume", "--run", "ct", "--dir", store, "--listen", "127.0.0.1:0", "--cost-tie", "0.02")
	if other.code != 2 || !strings.Contains(other.stderr, "--cost-tie") || !strings.Contains(other.stderr, "0.01") {
		t.Errorf("resume with another tie: exit %d, want 2 naming --cost-tie and the recorded 0.01\n%s", other.code, tail(other.stderr, 2000))
	}
	r := evoq(t, 5*time.Minute, "run", "--resume", "--run", "ct", "--dir", store, "--listen", "127.0.0.1:0", "--json", "--log-level", "info")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, tail(r.stderr, 4000))
	}
	if s := lastJSON(t, r.stdout); s.Evaluations != budget {
		t.Fatalf("resumed run: %d evaluations, want %d", s.Evaluations, budget)
	}
	if line := lineWith(r.stderr, "continuing the run"); !strings.Contains(line, "cost_tie=0.01") {
		t.Errorf("the resume did not say it took the recorded tie:\n%s", line)
	}
	if rec := readRecord(t, store, "ct"); rec.Variation == nil || rec.Variation.CostTie != 0.01 {
		t.Errorf("record after the resume: variation %+v, want cost_tie 0.01", rec.Variation)
	}
	checkDesigns(t, readResults(t, store, "ct"), budget)
}
