package runstate

import (
	"testing"

	"github.com/evoq/evoq/schema"
)

// TestScratchCountsOnlyRetrainsThatSavingProgressWouldHaveSpared: a design
// delivered again is counted as retrained from scratch only when its
// evaluator could save progress and saved none; one handed back unstarted
// to a built-in evaluator, or evaluated again by an evaluator that saves
// progress (it had nothing to resume: its earlier delivery never started),
// is not, nor is a first attempt or a lost design.
func TestScratchCountsOnlyRetrainsThatSavingProgressWouldHaveSpared(t *testing.T) {
	t.Parallel()
	f := testFold(1, 8, ReplaceWorst)
	second := func(seq uint64, set func(*schema.Result)) *schema.Result {
		r := result(seq, schema.StatusOK, float64(seq))
		r.Attempt = 2
		set(r)
		// The field travels: what the fold counts is what a replay of
		// the stored result counts.
		b, err := schema.EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		d, err := schema.DecodeResult(b)
		if err != nil {
			t.Fatal(err)
		}
		if d.NoProgress != r.NoProgress {
			t.Fatalf("no_progress %v stored, %v read back", r.NoProgress, d.NoProgress)
		}
		return d
	}
	for _, tc := range []struct {
		name    string
		r       *schema.Result
		scratch bool
	}{
		{"command evaluator, interrupted, no progress saved", second(1, func(*schema.Result) {}), true},
		{"built-in evaluator handed back unstarted", second(2, func(r *schema.Result) { r.NoProgress = true }), false},
		{"saving evaluator handed back unstarted", second(3, func(r *schema.Result) { r.ProgressStep = 5 }), false},
		{"resumed", second(4, func(r *schema.Result) { r.ResumedFrom, r.ResumedSeconds = 3, 7 }), false},
		{"first attempt", result(5, schema.StatusOK, 5), false},
		{"lost", second(6, func(r *schema.Result) {
			r.Status, r.Fitness, r.Worker, r.Stop = schema.StatusLost, schema.InfeasibleFitness, "", r.Start
		}), false},
	} {
		if got := RetrainedFromScratch(tc.r); got != tc.scratch {
			t.Errorf("%s: RetrainedFromScratch = %v, want %v", tc.name, got, tc.scratch)
		}
		if v := f.Apply(tc.r, nil); v != Counted {
			t.Fatalf("%s: verdict %v, want counted", tc.name, v)
		}
	}
	g := f.Figures()
	if g.Scratch != 1 || g.ScratchS != 0.5 {
		t.Errorf("scratch %d costing %v s, want 1 costing 0.5 s (half of its 1 s evaluation)", g.Scratch, g.ScratchS)
	}
	if g.Resumed != 1 || g.ResumedS != 7 {
		t.Errorf("resumed %d sparing %v s, want 1 sparing 7 s", g.Resumed, g.ResumedS)
	}
	p := ProgressOf(g)
	if w := ScratchWarning(p); w == "" {
		t.Errorf("no warning for the design retrained from scratch (progress %+v)", p)
	}
}
