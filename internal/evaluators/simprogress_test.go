package evaluators

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// progressTask is attempt of design d, saving its progress in dir: the
// steps it saved are appended to saved.
func progressTask(d *schema.Design, attempt int, dir string, rec *recorder, saved *[]int64) worker.Task {
	return worker.Task{Design: d, Attempt: attempt, Reports: rec,
		ProgressOut: filepath.Join(dir, "out"), Saved: func(step int64) { *saved = append(*saved, step) }}
}

// A training with Progress on, cancelled after step k and resumed from the
// step it saved, reports the steps after k with the values of an
// uninterrupted training, and ends with its fitness; it saves every step
// but the last, each attempt its own.
func TestSimProgressResumeEqualsUninterrupted(t *testing.T) {
	t.Parallel()
	sim := Sim{Mean: 20 * time.Millisecond, Curve: true, Steps: 9, Progress: true}
	for i, g := range curveGenomes(t, 4) {
		d := newDesign(t, "resume", uint64(i+1), g)
		whole := &recorder{}
		var wholeSaved []int64
		ref := sim.Evaluate(context.Background(), progressTask(d, 1, t.TempDir(), whole, &wholeSaved))
		if ref.Status != schema.StatusOK || !slices.Equal(wholeSaved, stepsUpTo(8)) {
			t.Fatalf("uninterrupted: %+v, saved %v; want ok, steps 1 to 8 saved", ref, wholeSaved)
		}
		for _, k := range []int64{1, 4, 8} {
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			first := &recorder{cancelAt: k, cancel: cancel}
			var saved []int64
			cut := sim.Evaluate(ctx, progressTask(d, 1, dir, first, &saved))
			cancel()
			if cut.Status != schema.StatusError || len(saved) == 0 || saved[len(saved)-1] != k {
				t.Fatalf("cut at %d: %+v, saved %v; want an error, step %d saved last", k, cut, saved, k)
			}
			in := filepath.Join(dir, "in")
			if err := os.Rename(filepath.Join(dir, "out"), in); err != nil {
				t.Fatal(err)
			}
			second := &recorder{}
			task := progressTask(d, 2, dir, second, &saved)
			task.ProgressIn, task.ResumeStep = in, k
			out := sim.Evaluate(context.Background(), task)
			if got := append(slices.Clone(first.got), second.got...); !slices.EqualFunc(got, whole.got, sameProgress) {
				t.Errorf("genome %d cut at %d: reports %v then %v, want %v", i, k, first.steps(), second.steps(), whole.steps())
			}
			if out.Status != schema.StatusOK || out.Fitness != ref.Fitness || out.Metrics[worker.ProgressMetric] != nil {
				t.Errorf("genome %d cut at %d: resumed to %+v, want ok with fitness %v", i, k, out, ref.Fitness)
			}
		}
	}
}

func sameProgress(a, b worker.Progress) bool {
	return a.Step == b.Step && a.Fitness == b.Fitness && a.Last == b.Last && a.Metrics["loss"] == b.Metrics["loss"]
}

// Progress Sim cannot use starts the design from scratch and says why in
// its result, so the worker does not count it as resumed; with Progress
// off, Sim saves nothing and ignores what it is handed.
func TestSimProgressUnusable(t *testing.T) {
	t.Parallel()
	g := map[string]any{"lr": 0.02}
	d := newDesign(t, "unusable", 1, g)
	on := Sim{Mean: 10 * time.Millisecond, Curve: true, Steps: 5, Progress: true}
	for _, tc := range []struct {
		name   string
		sim    Sim
		file   string
		resume int64
		said   bool
	}{
		{"not JSON", on, "garbage", 2, true},
		{"another design", on, `{"design":"other-1","step":2}`, 2, true},
		{"another step than the worker's", on, `{"design":"` + d.ID + `","step":3}`, 2, true},
		{"past the curve", on, `{"design":"` + d.ID + `","step":5}`, 5, true},
		{"progress off", Sim{Mean: 10 * time.Millisecond, Curve: true, Steps: 5}, `{"design":"` + d.ID + `","step":2}`, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			in := filepath.Join(dir, "in")
			if err := os.WriteFile(in, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			var saved []int64
			task := progressTask(d, 2, dir, rec, &saved)
			task.ProgressIn, task.ResumeStep = in, tc.resume
			out := tc.sim.Evaluate(context.Background(), task)
			if out.Status != schema.StatusOK || !slices.Equal(rec.steps(), stepsUpTo(5)) {
				t.Fatalf("got %+v, steps %v; want ok from step 1", out, rec.steps())
			}
			if _, said := out.Metrics[worker.ProgressMetric]; said != tc.said {
				t.Errorf("metrics %v: %s said %v, want %v", out.Metrics, worker.ProgressMetric, said, tc.said)
			}
			if want := stepsUpTo(4); tc.sim.Progress != slices.Equal(saved, want) || (!tc.sim.Progress && len(saved) > 0) {
				t.Errorf("saved %v with Progress %v", saved, tc.sim.Progress)
			}
		})
	}
}

// With FixedTime every attempt of a design draws the same time and the
// same feasibility; without, the attempts draw their own.
func TestSimFixedTime(t *testing.T) {
	t.Parallel()
	differ := 0
	for seq := uint64(1); seq <= 20; seq++ {
		d := newDesign(t, "fixed", seq, map[string]any{"lr": 0.01})
		draw := func(s Sim, attempt int) (time.Duration, bool) {
			return s.Draw(worker.Task{Design: d, Attempt: attempt})
		}
		fixed := Sim{Mean: time.Second, Fail: 0.3, FixedTime: true}
		t1, inf1 := draw(fixed, 1)
		for a := 2; a <= 4; a++ {
			if ta, infa := draw(fixed, a); ta != t1 || infa != inf1 {
				t.Errorf("%s attempt %d: %s %v, attempt 1 %s %v; want the same", d.ID, a, ta, infa, t1, inf1)
			}
		}
		free := Sim{Mean: time.Second, Fail: 0.3}
		if a, _ := draw(free, 1); a != func() time.Duration { b, _ := draw(free, 2); return b }() {
			differ++
		}
	}
	if differ == 0 {
		t.Error("without FixedTime, no design drew another time for attempt 2")
	}
}
