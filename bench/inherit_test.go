package bench

import (
	"context"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

func TestReachedInStream(t *testing.T) {
	t.Parallel()
	// In stream order: the 0.9 that ends first is stored second; the
	// infeasible design's fitness is no fitness of a trained one.
	spans := []span{okSp(0, 3, 0.5), okSp(1, 2, 0.9), {start: 2, stop: 2.5, fitness: 0.99}, okSp(2.5, 6, 0.95)}
	for _, tc := range []struct {
		name   string
		target float64
		slotS  float64
		n      int
		ok     bool
	}{
		{"the first result", 0.5, 3, 1, true},
		{"equal counts", 0.9, 3 + 1, 2, true},
		{"past a result that is not ok", 0.95, 3 + 1 + 0.5 + 3.5, 4, true},
		{"never: all the spans", 0.99, 8, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			slotS, n, ok := reachedInStream(spans, tc.target)
			if math.Abs(slotS-tc.slotS) > 1e-12 || n != tc.n || ok != tc.ok {
				t.Errorf("reachedInStream(%v) = %v, %d, %v; want %v, %d, %v", tc.target, slotS, n, ok, tc.slotS, tc.n, tc.ok)
			}
		})
	}
	if got := streamSlotSeconds(spans); got != 8 {
		t.Errorf("streamSlotSeconds = %v, want 8", got)
	}
	if slotS, n, ok := reachedInStream(nil, 0); slotS != 0 || n != 0 || ok {
		t.Errorf("reachedInStream(none) = %v, %d, %v", slotS, n, ok)
	}
}

func TestCompareInherit(t *testing.T) {
	t.Parallel()
	scratch := InheritRun{Mode: modeScratch, Best: 0.9, BestSlotS: 10}
	spans := []span{okSp(0, 2, 0.8), okSp(0, 3, 0.95), okSp(2, 10, 0.97)}
	for _, tc := range []struct {
		name    string
		scratch InheritRun
		best    float64
		want    InheritSeed
	}{
		{"reached", scratch, 0.97, InheritSeed{Reached: true, ReachedSlotS: 5, ReachedResults: 2, Share: 0.5}},
		{"never reached", InheritRun{Mode: modeScratch, Best: 0.99, BestSlotS: 4}, 0.97, InheritSeed{TotalShare: 3.25}},
		{"no slot-seconds to compare with", InheritRun{Mode: modeScratch}, 0.97, InheritSeed{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inherit := InheritRun{Mode: modeInherit, Best: tc.best}
			got := compareInherit(3, tc.scratch, inherit, spans)
			tc.want.Seed, tc.want.Scratch, tc.want.Inherit = 3, tc.scratch, inherit
			tc.want.BestDelta = tc.best - tc.scratch.Best
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("compareInherit =\n %+v\nwant\n %+v", *got, tc.want)
			}
		})
	}
}

// inheritSeedWith is a seed whose inheriting run reached the from-scratch
// run's best at share of its slot-seconds; share < 0: it never did.
func inheritSeedWith(share, delta, inherited float64) *InheritSeed {
	return &InheritSeed{Scratch: InheritRun{Best: 0.9, CPUShare: 0.5},
		Inherit: InheritRun{Best: 0.9 + delta, InheritedShare: inherited, CPUShare: 0.7},
		Reached: share >= 0, Share: max(share, 0), BestDelta: delta}
}

func TestInheritSummarize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		seeds       []*InheritSeed
		wantShare   *float64
		wantReached int
		wantDelta   float64
		wantMet     bool
	}{
		{"met", []*InheritSeed{inheritSeedWith(0.3, 0.01, 1), inheritSeedWith(0.9, 0, 1), inheritSeedWith(0.5, 0.02, 0.9)},
			ptr(0.5), 3, 0.01, true},
		{"at the target", []*InheritSeed{inheritSeedWith(0.6, 0, 1)}, ptr(0.6), 1, 0, true},
		{"just past it", []*InheritSeed{inheritSeedWith(0.6001, 0, 1)}, ptr(0.6001), 1, 0, false},
		{"a seed never reached counts as infinite", []*InheritSeed{inheritSeedWith(0.2, -0.01, 1),
			inheritSeedWith(-1, -0.02, 1), inheritSeedWith(0.7, 0, 1)}, ptr(0.7), 2, -0.01, false},
		{"most never reached", []*InheritSeed{inheritSeedWith(0.1, 0, 1), inheritSeedWith(-1, -0.01, 1),
			inheritSeedWith(-1, -0.01, 1)}, nil, 1, -0.01, false},
		{"even count: mean of the middle two", []*InheritSeed{inheritSeedWith(0.2, 0, 1), inheritSeedWith(0.8, 0.02, 1)},
			ptr(0.5), 2, 0.01, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &Inherit{Seeds: tc.seeds}
			f.summarize()
			if !reflect.DeepEqual(f.Share, tc.wantShare) || f.Reached != tc.wantReached ||
				math.Abs(f.BestDelta-tc.wantDelta) > 1e-12 || f.Met != tc.wantMet {
				t.Errorf("summary share %v, reached %d, delta %v, met %v; want %v, %d, %v, %v", deref(f.Share), f.Reached,
					f.BestDelta, f.Met, deref(tc.wantShare), tc.wantReached, tc.wantDelta, tc.wantMet)
			}
			if f.ScratchBest != 0.9 || f.CPUShareMax != 0.7 {
				t.Errorf("scratch best %v, CPU share max %v; want 0.9, 0.7", f.ScratchBest, f.CPUShareMax)
			}
		})
	}
	f := &Inherit{Seeds: []*InheritSeed{inheritSeedWith(0.1, 0, 1), inheritSeedWith(0.1, 0, 0.5), inheritSeedWith(0.1, 0, 0.8)}}
	if f.summarize(); f.InheritedShare != 0.8 {
		t.Errorf("inherited share median %v, want 0.8", f.InheritedShare)
	}
}

// The two runs of a seed differ in --inherit alone.
func TestInheritArgs(t *testing.T) {
	t.Parallel()
	for _, smoke := range []bool{false, true} {
		s := inheritSettings(smoke, 0)
		if want := map[bool]int{false: 5, true: 1}[smoke]; s.Seeds != want || s.Pool > s.Init || s.Budget <= s.Init {
			t.Errorf("smoke %v: %+v: want %d seeds, a pool within --init and mutants after it", smoke, s, want)
		}
		scratch, inherit := s.args(2, modeScratch), s.args(2, modeInherit)
		if slices.Contains(scratch, "--inherit") || !slices.Equal(append(slices.Clone(scratch), "--inherit"), inherit) {
			t.Errorf("smoke %v: scratch %v, inherit %v", smoke, scratch, inherit)
		}
		if flagValue(scratch, "--evaluator") != "mlp" || flagValue(scratch, "--run") != inheritRunID(2) ||
			flagValue(scratch, "--wait-slots") != flagValue(scratch, "--slots") {
			t.Errorf("smoke %v: %v", smoke, scratch)
		}
	}
	if s := inheritSettings(true, 3); s.Seeds != 3 {
		t.Errorf("Seeds 3 gives %d seeds", s.Seeds)
	}
}

func TestEpochsTrained(t *testing.T) {
	t.Parallel()
	res := func(status schema.Status, epochs any) *schema.Result {
		return &schema.Result{Status: status, Metrics: map[string]any{"epochs": epochs}}
	}
	results := []*schema.Result{res(schema.StatusOK, int64(120)), res(schema.StatusOK, int8(20)),
		res(schema.StatusOK, float64(35)), res(schema.StatusOK, uint16(200)), // four encodings: 375
		res(schema.StatusOK, int64(999)),        // a duplicate
		res(schema.StatusInfeasible, int64(50)), // not trained
		{Status: schema.StatusOK}, nil,          // no metric; malformed
		res(schema.StatusOK, "forty"), // not a number
	}
	verdicts := []runstate.Verdict{runstate.Counted, runstate.Counted, runstate.Counted, runstate.Counted,
		runstate.Duplicate, runstate.Counted, runstate.Counted, runstate.Malformed, runstate.Counted}
	if got := epochsTrained(results, verdicts); got != 375 {
		t.Errorf("epochsTrained = %d, want 375", got)
	}
}

// The inherit workload runs end to end in its smoke form, with the evoq
// binary built here: both runs' results are read back from their stores,
// and the figures agree with each other.
func TestInheritSmoke(t *testing.T) {
	t.Parallel()
	bin := smokeEvoq(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Evoq: bin, Workloads: []string{"inherit"}, Smoke: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Inherit == nil || rep.Rows[0].Met != nil {
		t.Fatalf("rows %+v", rep.Rows)
	}
	f := rep.Rows[0].Inherit
	s := inheritSettings(true, 0)
	if f.Settings != s || len(f.Seeds) != 1 {
		t.Fatalf("inherit %+v, want settings %+v and one seed", f, s)
	}
	is := f.Seeds[0]
	checkInheritRun(t, s, is.Scratch)
	checkInheritRun(t, s, is.Inherit)
	if is.Scratch.Mutants != 0 || is.Inherit.Inherited == 0 {
		t.Errorf("scratch run %d mutants; inheriting run %d of %d inherited: want none without --inherit, some with it",
			is.Scratch.Mutants, is.Inherit.Inherited, is.Inherit.Mutants)
	}
	checkInheritSeed(t, s, is)
	want := &Inherit{Settings: s, Seeds: f.Seeds}
	want.summarize()
	if !reflect.DeepEqual(f, want) || f.ScratchBest != is.Scratch.Best || f.InheritedShare != is.Inherit.InheritedShare {
		t.Errorf("medians of one seed %+v, want that seed's figures %+v", f, want)
	}
}

// checkInheritRun checks one run's figures against its settings and each
// other.
func checkInheritRun(t *testing.T, s InheritSettings, r InheritRun) {
	t.Helper()
	if r.OK+r.Infeasible != s.Budget || r.OK == 0 || r.Best <= 0 || r.Best > 1 {
		t.Errorf("%s run %+v: want %d designs, some ok, an accuracy as best", r.Mode, r, s.Budget)
	}
	if r.BestSlotS <= 0 || r.BestSlotS > r.SlotS || r.BestResults < 1 || r.BestResults > s.Budget {
		t.Errorf("%s run best at %v slot-s, result %d, of %v slot-s", r.Mode, r.BestSlotS, r.BestResults, r.SlotS)
	}
	// Every ok design trains between one epoch (diverged) and the space's
	// most, 200.
	if r.Epochs < r.OK || r.Epochs > 200*r.OK {
		t.Errorf("%s run trained %d epochs in %d ok designs", r.Mode, r.Epochs, r.OK)
	}
	if r.Mutants > r.OK || r.Inherited > r.Mutants || (r.Mutants > 0 && r.InheritedShare != sig4(float64(r.Inherited)/float64(r.Mutants))) {
		t.Errorf("%s run %d of %d mutants inherited (%v), %d ok", r.Mode, r.Inherited, r.Mutants, r.InheritedShare, r.OK)
	}
}

// checkInheritSeed checks the comparison of a seed's two runs.
func checkInheritSeed(t *testing.T, s InheritSettings, is *InheritSeed) {
	t.Helper()
	sc, in := is.Scratch, is.Inherit
	if math.Abs(is.BestDelta-(in.Best-sc.Best)) > 1e-12 || is.Reached != (in.Best >= sc.Best) {
		t.Errorf("seed %+v: best %v against %v", is, in.Best, sc.Best)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-3*math.Abs(want) }
	if is.Reached {
		if is.ReachedSlotS <= 0 || is.ReachedSlotS > in.SlotS || is.ReachedResults < 1 || is.ReachedResults > s.Budget ||
			!near(is.Share, is.ReachedSlotS/sc.BestSlotS) || is.TotalShare != 0 {
			t.Errorf("reached: %+v", is)
		}
		return
	}
	if is.Share != 0 || is.ReachedSlotS != 0 || !near(is.TotalShare, in.SlotS/sc.BestSlotS) {
		t.Errorf("not reached: %+v", is)
	}
}
