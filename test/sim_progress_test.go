package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/schema"
)

// The built-in sim evaluator with --sim-progress, under a worker whose
// walltime ends mid-training: the worker hands its designs back after
// their progress is saved and exits, and the same worker started again,
// as a requeued batch job is, resumes each where it was saved: every
// result resumed_from > 0 on a later attempt, no resumed attempt reports a
// step at or before its resume point, the fitness is the curve's end, and
// the summary and evoq status count every design resumed.
func TestSimProgressResumesAfterWalltime(t *testing.T) {
	t.Parallel()
	const run, budget, steps = "simresume", 3, 20
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", fmt.Sprint(budget),
		"--pool", fmt.Sprint(budget), "--json", "--evaluator", "sim", "--sim-curve", "--sim-steps", fmt.Sprint(steps),
		"--sim-mean", "6", "--sim-sigma", "0.1", "--sim-progress")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "work queue ready") })
	// 6 s of training each, and the walltime's hand-back 3 s after the
	// worker starts: every design is cut short.
	worker := []string{"worker", "--nats", url, "--run", run, "--id", "w", "--slots", fmt.Sprint(budget)}
	first := background(t, append(worker, "--walltime", "5s", "--walltime-margin", "2s", "--min-eval-time", "1s")...)
	if err := first.wait(t, time.Minute); err != nil {
		t.Fatalf("worker at its walltime: %v\n%s", err, tail(first.stderr.String(), 3000))
	}
	if !strings.Contains(first.stderr.String(), "saved their progress before the hand-back") {
		t.Errorf("the worker did not see its evaluations save before the hand-back:\n%s", tail(first.stderr.String(), 3000))
	}
	background(t, worker...)
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	_, js := connectJS(t, url)
	results := storedResults(t, js, run)
	if len(results) != budget {
		t.Fatalf("%d results, want %d", len(results), budget)
	}
	for _, r := range results {
		t.Logf("%s: attempt %d, resumed_from %d after %.2f s", r.DesignID, r.Attempt, r.ResumedFrom, r.ResumedSeconds)
		switch {
		case r.Status != schema.StatusOK:
			t.Errorf("%s: %s %s", r.DesignID, r.Status, r.Error)
		case r.ResumedFrom <= 0 || r.ResumedFrom >= steps || r.Attempt < 2 || r.ResumedSeconds <= 0 || r.NoProgress:
			t.Errorf("%s: attempt %d, resumed_from %d (%.2f s), no_progress %v; want a later attempt resumed mid-curve",
				r.DesignID, r.Attempt, r.ResumedFrom, r.ResumedSeconds, r.NoProgress)
		case r.Fitness != evaluators.GenomeScore(r.Design.Genome):
			t.Errorf("%s: fitness %v, want the curve's end %v", r.DesignID, r.Fitness, evaluators.GenomeScore(r.Design.Genome))
		}
	}
	for _, r := range liveReports(t, js, run) {
		if r.ResumedFrom > 0 && r.Step <= r.ResumedFrom {
			t.Errorf("%s: attempt %d resumed from step %d reported step %d", r.DesignID, r.Attempt, r.ResumedFrom, r.Step)
		}
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Progress == nil || s.Progress.Resumed != budget || s.Progress.FromScratch != 0 {
		t.Errorf("summary's progress %+v, want %d resumed, none from scratch", s.Progress, budget)
	}
	st := evoq(t, 30*time.Second, "status", "--nats", url, "--run", run)
	if want := fmt.Sprintf("interrupted: %d designs resumed from saved progress", budget); st.code != 0 || !strings.Contains(st.stdout, want) {
		t.Errorf("evoq status: exit %d, want a line %q:\n%s%s", st.code, want, st.stdout, st.stderr)
	}
}
