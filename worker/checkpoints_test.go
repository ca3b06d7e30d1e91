package worker

import (
	"context"
	"testing"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// A task gets a file to write its checkpoint to unless its evaluator
// says it never writes one; either way a mutant still has its parent's
// checkpoint looked up.
func TestPrepareSkipsOutForNoCheckpoints(t *testing.T) {
	t.Parallel()
	store, err := checkpoint.OpenDir(t.TempDir(), "r")
	if err != nil {
		t.Fatal(err)
	}
	d := &schema.Design{ID: "r-2", Run: "r", Origin: schema.OriginMutant, Parents: []string{"r-1"}}
	cfg := schema.Checkpoints{Store: schema.CheckpointDir, Inherit: true}
	for _, none := range []bool{false, true} {
		c := &ckpts{store: store, cfg: cfg, none: none}
		f := c.prepare(context.Background(), logrus.New(), d, "w1-0-0-1", false)
		if got := f.out != ""; got == none {
			t.Errorf("none=%v: out %q", none, f.out)
		}
		if f.note == nil {
			t.Errorf("none=%v: a mutant with no parent's checkpoint got no note on why it trains from scratch", none)
		}
	}
}

// A built-in evaluator that writes no files cannot save progress: its
// results say so (no_progress), so that a design it evaluates again is not
// counted as retrained from scratch; an evaluator that writes files could
// have, and its results do not.
func TestSettleSaysNoProgressForBuiltins(t *testing.T) {
	t.Parallel()
	store, err := checkpoint.OpenDir(t.TempDir(), "r")
	if err != nil {
		t.Fatal(err)
	}
	d := &schema.Design{ID: "r-2", Run: "r", Origin: schema.OriginRandom}
	cfg := schema.Checkpoints{Store: schema.CheckpointDir, Max: 1 << 20}
	for _, none := range []bool{false, true} {
		c := &ckpts{store: store, cfg: cfg, none: none, noProgress: none, progDir: t.TempDir()}
		a := c.progressFor(context.Background(), logrus.New(), d, design{}, "w1-0-0-2")
		res := &schema.Result{DesignID: d.ID, Attempt: 2}
		a.settle(res)
		if res.NoProgress != none {
			t.Errorf("none=%v: no_progress %v", none, res.NoProgress)
		}
	}
}

// progressEvaluator is an evaluator that says whether it writes
// checkpoints and whether it saves progress.
type progressEvaluator struct{ none, saves bool }

func (progressEvaluator) Evaluate(context.Context, Task) Outcome {
	return Outcome{Status: schema.StatusOK}
}
func (progressEvaluator) Name() string { return "progress" }

func (e progressEvaluator) NoCheckpoints() bool { return e.none }
func (e progressEvaluator) SavesProgress() bool { return e.saves }

// A NoCheckpoints evaluator gets progress files only when it says it
// saves progress; any other evaluator gets them whatever it says, and a
// task of an evaluator without them has no saved progress looked up.
func TestEvaluatorFilesProgress(t *testing.T) {
	t.Parallel()
	store, err := checkpoint.OpenDir(t.TempDir(), "r")
	if err != nil {
		t.Fatal(err)
	}
	d := &schema.Design{ID: "r-2", Run: "r", Origin: schema.OriginRandom}
	for _, tc := range []struct {
		name           string
		e              Evaluator
		none, progress bool
	}{
		{"writes checkpoints", progressEvaluator{}, false, true},
		{"writes checkpoints, says it saves no progress", progressEvaluator{saves: false}, false, true},
		{"no checkpoints", progressEvaluator{none: true}, true, false},
		{"no checkpoints, saves progress", progressEvaluator{none: true, saves: true}, true, true},
		{"says nothing", Command{Cmd: "true"}, false, true},
	} {
		none, noProgress := evaluatorFiles(tc.e)
		if none != tc.none || noProgress == tc.progress {
			t.Errorf("%s: none %v, no progress %v; want %v, %v", tc.name, none, noProgress, tc.none, !tc.progress)
		}
		c := &ckpts{store: store, cfg: schema.Checkpoints{Store: schema.CheckpointDir, Max: 1 << 20}, none: none,
			noProgress: noProgress, progDir: t.TempDir()}
		a := c.progressFor(context.Background(), logrus.New(), d, design{}, "w1-0-0-1")
		if got := a != nil && a.out != ""; got != tc.progress {
			t.Errorf("%s: progress file given %v, want %v", tc.name, got, tc.progress)
		}
	}
}
