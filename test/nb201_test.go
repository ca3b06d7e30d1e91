package test

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/nb201"
	"github.com/evoq/evoq/runstate"
)

// A run of the nb201 lookup with noise, SIGKILLed and continued with
// --resume and no other flag, keeps the recorded noise: every design of
// both halves scores its cell's accuracy plus noise, never the bare
// table value, and the noise has the spread asked for. --nb201-noise
// with another evaluator is refused, naming the flag. The record keeps
// the search's defaults through the resume.
func TestNB201ResumeKeepsNoise(t *testing.T) {
	t.Parallel()
	bad := evoq(t, time.Minute, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--evaluator", "sim", "--nb201-noise", "0.5")
	if bad.code == 0 || !strings.Contains(bad.stderr, "--nb201-noise goes with --evaluator nb201") {
		t.Errorf("--nb201-noise with the sim evaluator: exit %d\n%s", bad.code, tail(bad.stderr, 2000))
	}

	store := filepath.Join(t.TempDir(), "store")
	const budget = 20000
	first := background(t, "run", "--run", "nb", "--dir", store, "--listen", "127.0.0.1:0", "--evaluator", "nb201",
		"--nb201-noise", "0.5", "--budget", "20000", "--slots", "2", "--progress", "200ms", "--log-level", "info")
	waitShowing(t, time.Minute, func() bool { return evaluationsSoFar(first.stderr.String()) >= 50 },
		func() string { return first.stderr.String() })
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.wait(t, 30*time.Second)
	before := evaluationsSoFar(first.stderr.String())
	if before >= budget {
		t.Fatalf("the first run finished its %d designs before it was killed", budget)
	}

	r := evoq(t, 5*time.Minute, "run", "--resume", "--run", "nb", "--dir", store, "--listen", "127.0.0.1:0", "--json")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, tail(r.stderr, 4000))
	}
	if s := lastJSON(t, r.stdout); s.Evaluations != budget || s.OK != budget {
		t.Fatalf("resumed run: %d evaluations, %d ok; want %d", s.Evaluations, s.OK, budget)
	}
	results := readResults(t, store, "nb")
	checkDesigns(t, results, budget)
	// The search's defaults of the day are recorded and kept through the
	// resume: novel children and tournament 4.
	if rec := readRecord(t, store, "nb"); rec.Variation == nil || !rec.Variation.Novel || rec.Tournament != 4 ||
		rec.Evaluator == nil || rec.Evaluator.NB201 == nil || rec.Evaluator.NB201.Noise != 0.5 {
		t.Errorf("record after the resume: variation %+v, tournament %d, evaluator %v; want novel, 4, nb201 noise 0.5",
			rec.Variation, rec.Tournament, rec.Evaluator)
	}
	var sq float64
	n := 0
	for _, res := range results {
		acc, err := nb201.GenomeAccuracy(res.Design.Genome)
		if err != nil {
			t.Fatalf("design %s: %v", res.DesignID, err)
		}
		if res.Fitness == acc {
			t.Fatalf("design %s (seq %d; the first run evaluated about %d) scored its cell's bare accuracy %v: the noise was dropped",
				res.DesignID, res.Design.Seq, before, acc)
		}
		sq += (res.Fitness - acc) * (res.Fitness - acc)
		n++
	}
	if sd := math.Sqrt(sq / float64(n)); sd < 0.45 || sd > 0.55 {
		t.Errorf("noise spread %.3f over %d results, want about 0.5", sd, n)
	}
}

// On the nb201 space, 5^6 cells, a run's children repeat cells it has
// measured unless they are made novel: with the default (--novel) at most
// a few of 300 evaluations repeat a cell, where --novel=false repeats
// dozens; each run records its choice.
func TestNovelChildren(t *testing.T) {
	t.Parallel()
	repeats := func(name string, extra ...string) (int, bool) {
		store := filepath.Join(t.TempDir(), "store")
		args := append([]string{"run", "--run", name, "--dir", store, "--listen", "127.0.0.1:0", "--evaluator", "nb201",
			"--budget", "300", "--slots", "4", "--seed", "3", "--json"}, extra...)
		r := evoq(t, 3*time.Minute, args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, r.code, tail(r.stderr, 3000))
		}
		results := readResults(t, store, name)
		checkDesigns(t, results, 300)
		seen, n := map[string]bool{}, 0
		for _, res := range results {
			arch, err := nb201.Arch(res.Design.Genome)
			if err != nil {
				t.Fatal(err)
			}
			if seen[arch] {
				n++
			}
			seen[arch] = true
		}
		rec := readRecord(t, store, name)
		return n, rec.Variation != nil && rec.Variation.Novel
	}
	novel, recorded := repeats("novel")
	if novel > 5 || !recorded {
		t.Errorf("default: %d of 300 evaluations repeat a cell, want at most 5; novel recorded %v", novel, recorded)
	}
	old, recorded := repeats("old", "--novel=false")
	if old < 30 || recorded {
		t.Errorf("--novel=false: %d of 300 evaluations repeat a cell, want 30 or more (the search repeats without the rule); novel recorded %v", old, recorded)
	}
}

// A novel run whose space is exhausted says so: on a space of 3 designs,
// a budget of 12 must repeat, and the summary, the log and the record's
// warnings name the converged search; --novel=false repeats silently, as
// asked.
func TestNovelExhaustedWarns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sp := filepath.Join(dir, "space.yaml")
	if err := os.WriteFile(sp, []byte("name: tiny\nparams:\n  act: {type: choice, values: [relu, tanh, sigmoid]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, extra ...string) (*runstate.Summary, string) {
		args := append([]string{"run", "--run", name, "--dir", filepath.Join(dir, name), "--listen", "127.0.0.1:0", "--config", sp,
			"--evaluator", "sim", "--sim-mean", "0.001", "--budget", "12", "--init", "2", "--pool", "2", "--slots", "1", "--json"}, extra...)
		r := evoq(t, 2*time.Minute, args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, r.code, tail(r.stderr, 3000))
		}
		return lastJSON(t, r.stdout), r.stderr
	}
	s, log := run("novel")
	if !slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.Contains(w, "novel children") }) ||
		!strings.Contains(log, "novel children") {
		t.Errorf("an exhausted novel run: warnings %q\n%s", s.Warnings, tail(log, 2000))
	}
	if rec := readRecord(t, filepath.Join(dir, "novel"), "novel"); !slices.ContainsFunc(rec.Warnings, func(w string) bool { return strings.Contains(w, "novel children") }) {
		t.Errorf("the record's warnings %q lack the novel one", rec.Warnings)
	}
	s, _ = run("old", "--novel=false")
	if slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.Contains(w, "novel") }) {
		t.Errorf("--novel=false warned: %q", s.Warnings)
	}
}
