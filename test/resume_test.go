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
	s := lastJSON(t, r.stdout)
	if s.Run != "again" || s.Evaluations != 300 {
		t.Fatalf("resumed run %s ended with %d evaluations; want again and 300", s.Run, s.Evaluations)
	}
	if s.WallS <= 0 || s.EvalsPerS <= 0 {
		t.Errorf("resumed run: wall_s %v, evals_per_s %v; want the resumed controller's own time and rate", s.WallS, s.EvalsPerS)
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

// `--from-run` seeds a new run's initial population with the best designs
// of an earlier one in the same store.
func TestFromRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--evaluator", "sim", "--sim-mean", "0.01",
		"--slots", "2", "--init", "10", "--pool", "5", "--json"}
	r1 := evoq(t, time.Minute, append(base, "--run", "first", "--budget", "60")...)
	if r1.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r1.code, tail(r1.stderr, 2000))
	}
	best := lastJSON(t, r1.stdout)
	r2 := evoq(t, time.Minute, append(base, "--run", "second", "--budget", "30", "--from-run", "first")...)
	if r2.code != 0 {
		t.Fatalf("second run: exit %d\n%s", r2.code, tail(r2.stderr, 2000))
	}
	if s := lastJSON(t, r2.stdout); s.Evaluations != 30 || s.BestFitness == nil || *s.BestFitness < *best.BestFitness {
		t.Fatalf("second run: %d evaluations, best %v; want 30 and at least the first run's best %v", s.Evaluations, s.BestFitness, *best.BestFitness)
	}
	seeds := 0
	for _, r := range readResults(t, dir, "second") {
		if r.Design.Origin == "seed" {
			seeds++
			if r.Design.Seq == 1 && r.Fitness != *best.BestFitness {
				t.Errorf("the first seed scored %v; want the first run's best %v", r.Fitness, *best.BestFitness)
			}
		}
	}
	if seeds != 10 {
		t.Fatalf("%d seeded designs, want the first run's best 10 (--init)", seeds)
	}
}
