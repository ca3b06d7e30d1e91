package bench

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// The preempt figures from a made-up record: a design resumed from the
// step its interrupted attempt saved loses only that attempt's time after
// the step; one trained again from step 1 loses its interrupted attempt
// whole and counts as retrained; one never finished loses its attempts but
// was not retrained. An interrupted attempt's time runs from its first
// report less one step to its last report plus one step (the step's time
// read from the design's result, else its reports, else the mean's share),
// cut at its worker process's exit; the worker processes' held time is cut
// at the last result stored, a lost design's too.
func TestPreemptFigures(t *testing.T) {
	t.Parallel()
	s := PreemptSettings{Steps: 4, SimMeanS: 1, Slots: 2, Workers: 1}
	t0 := time.Unix(1000, 0)
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	rep := func(design string, attempt int, stepN int64, sec float64, resumed int64) *schema.Report {
		return &schema.Report{DesignID: design, Attempt: attempt, Step: stepN, Time: at(sec), Worker: "w1", ResumedFrom: resumed}
	}
	res := func(design string, attempt int, start, stop float64, resumed int64, resumedS float64, fitness float64) *schema.Result {
		return &schema.Result{DesignID: design, Design: schema.Design{ID: design}, Attempt: attempt, Status: schema.StatusOK,
			Fitness: fitness, Worker: "w1", Start: at(start), Stop: at(stop), ResumedFrom: resumed, ResumedSeconds: resumedS}
	}
	lives := []workerLife{{id: "w1", slots: 2, start: at(0), stop: at(5)}, {id: "w1", slots: 2, start: at(5.5), stop: at(20)},
		{id: "w1", slots: 2, start: at(30), stop: at(40)}} // the last started after the last result: not counted
	rec := &preemptRecord{
		results: []*schema.Result{
			res("r-1", 2, 6, 8, 2, 1.5, 0.5),
			res("r-2", 2, 6, 10, 0, 0, 0.7),
			{DesignID: "r-3", Design: schema.Design{ID: "r-3"}, Attempt: 10, Status: schema.StatusLost},
		},
		verdicts: []runstate.Verdict{runstate.Counted, runstate.Counted, runstate.Counted},
		stored:   []time.Time{at(8.01), at(10.01), at(12)}, // the lost design's result ends the budget
		reports: []*schema.Report{
			rep("r-1", 1, 1, 1, 0), rep("r-1", 1, 2, 2, 0), rep("r-1", 2, 3, 7, 2), rep("r-1", 2, 4, 8, 2),
			rep("r-2", 1, 1, 3, 0), rep("r-2", 1, 2, 4.9, 0), rep("r-2", 2, 1, 7, 0),
			rep("r-3", 1, 1, 11, 0),
		},
	}
	got := preemptFigures(s, modeProgress, rec, lives, at(-1))
	// Steps of 1 s: r-1's result trained 2 steps in 2 s, r-2's 4 in
	// 4 s. r-3 reported once and never finished: the mean's share, 0.25 s.
	r1 := 3 - (1 - 1.0)
	r1lost := 3 - 2.0
	r2 := 5 - (3 - 1.0) // cut at the worker's exit at 5 s
	r3 := 0.25 + 0.25
	near := func(a, b float64) bool { return math.Abs(a-b) <= 2e-3*math.Max(1, math.Abs(b)) }
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"slot_s", got.SlotS, 2 + 4 + r1 + r2 + r3},
		{"interrupted_slot_s", got.InterruptedS, r1 + r2 + r3},
		{"resumed_s", got.ResumedS, 1.5},
		{"retrained_slot_s", got.ScratchS, r2},
		{"lost_slot_s", got.LostS, r1lost + r2 + r3},
		{"held_slot_s", got.HeldSlotS, 2*5 + 2*(12-5.5)},
		{"finish_s", got.FinishS, 13},
		{"best", got.Best, 0.7},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if got.Interrupted != 3 || got.Resumed != 1 || got.Scratch != 1 || got.Unfinished != 1 || got.OK != 2 || got.Starts != 2 {
		t.Errorf("interrupted %d, resumed %d, retrained %d, unfinished %d, ok %d, worker starts %d; want 3, 1, 1, 1, 2, 2",
			got.Interrupted, got.Resumed, got.Scratch, got.Unfinished, got.OK, got.Starts)
	}
}

// The preempt workload runs end to end in its smoke form, with the evoq
// binary built here: both runs finish their budget on requeued workers,
// the run with progress checkpoints resumes designs and the one without
// retrains them, and the figures from the record agree with the
// controllers' summaries.
func TestPreemptSmoke(t *testing.T) {
	t.Parallel()
	bin := smokeEvoq(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Evoq: bin, Workloads: []string{"preempt"}, Smoke: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Preempt == nil || rep.Rows[0].Met != nil {
		t.Fatalf("rows %+v", rep.Rows)
	}
	p := rep.Rows[0].Preempt
	if p.Settings != preemptSettings(true, 0) || len(p.Seeds) != 1 || len(p.Medians) != 2 {
		t.Fatalf("preempt %+v, want the smoke settings, one seed and two medians", p)
	}
	checkPreemptSmoke(t, p.Settings, p.Seeds[0])
}

func checkPreemptSmoke(t *testing.T, s PreemptSettings, ps *PreemptSeed) {
	t.Helper()
	for _, r := range ps.Runs {
		t.Logf("%+v", *r)
		if r.OK+r.Unfinished != s.Budget || r.Starts <= s.Workers || r.SlotS <= 0 || r.HeldSlotS < r.SlotS-r.InterruptedS || r.FinishS <= 0 {
			t.Errorf("%s run: %d ok and %d unfinished of %d, %d worker starts, %v slot-s, %v held: want the budget done on requeued workers",
				r.Mode, r.OK, r.Unfinished, s.Budget, r.Starts, r.SlotS, r.HeldSlotS)
		}
		sum := r.Summary
		switch r.Mode {
		case modeProgress:
			if r.Resumed == 0 || sum == nil || sum.Resumed != r.Resumed || math.Abs(sum.ResumedSavedS-r.ResumedS) > 0.01 {
				t.Errorf("progress run: %d resumed (%v s), summary %+v: want some, as the summary says", r.Resumed, r.ResumedS, sum)
			}
		case modeNoProg:
			if r.Resumed != 0 || r.Scratch == 0 || r.ScratchS <= 0 || (sum != nil && sum.Resumed != 0) {
				t.Errorf("run without progress: %d resumed, %d retrained (%v s), summary %+v: want none resumed, some retrained",
					r.Resumed, r.Scratch, r.ScratchS, sum)
			}
		}
	}
}
