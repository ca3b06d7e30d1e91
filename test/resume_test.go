package test

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// `evoq run --resume` continues a stopped run from its store: the budget
// is finished and no design is evaluated twice.
func TestResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--evaluator", "sim", "--sim-mean", "0.05",
		"--slots", "4", "--init", "10", "--pool", "5", "--budget", "300"}
	first := background(t, append(args, "--run", "again")...)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(first.stderr.String(), "evaluations=") })
	_ = first.cmd.Process.Signal(syscall.SIGINT)
	if err := first.wait(t, 30*time.Second); err == nil || !strings.Contains(first.stderr.String(), "interrupted after") {
		t.Fatalf("the first run was not interrupted (%v):\n%s", err, tail(first.stderr.String(), 2000))
	}
	r := evoq(t, 2*time.Minute, append(args, "--resume", "--json")...)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	if s := lastJSON(t, r.stdout); s.Run != "again" || s.Evaluations != 300 {
		t.Fatalf("resumed run %s ended with %d evaluations; want again and 300", s.Run, s.Evaluations)
	}
	if !strings.Contains(r.stderr, "resumed run from its results stream") {
		t.Errorf("the resumed controller did not replay:\n%s", tail(r.stderr, 2000))
	}
	results := readResults(t, dir, "again")
	checkDesigns(t, results, 300)
	if len(results) != 300 {
		t.Fatalf("%d results for 300 designs: a design was evaluated twice", len(results))
	}
	fresh := evoq(t, time.Minute, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--resume")
	if fresh.code == 0 || !strings.Contains(fresh.stderr, "--resume") {
		t.Fatalf("--resume on an empty store: exit %d, %q; want an error naming --resume", fresh.code, fresh.stderr)
	}
}
