package runstate

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// result makes a terminal result of the random design seq of run "t",
// evaluated on slot seq%4 from second seq to seq+1.
func result(seq uint64, status schema.Status, fitness float64) *schema.Result {
	d := schema.Design{V: schema.Version, Run: "t", ID: schema.DesignID("t", seq), Seq: seq,
		Genome: map[string]any{"x": int64(seq)}, Origin: schema.OriginRandom, Created: epoch}
	r := &schema.Result{V: schema.Version, Run: "t", DesignID: d.ID, Design: d, Status: status,
		Fitness: fitness, Worker: "w", Slot: int(seq % 4), Attempt: 1,
		Start: epoch.Add(time.Duration(seq) * time.Second), Gap: -1}
	r.Stop = r.Start.Add(time.Second)
	if status == schema.StatusLost {
		r.Worker, r.Slot, r.Start, r.Stop = "", 0, time.Time{}, time.Time{}
	}
	if status != schema.StatusOK {
		r.Fitness = schema.InfeasibleFitness
	}
	return r
}

// testFold is a fold of run "t" with a budget no test reaches.
func testFold(init, pool int, replace Replace) *Fold {
	return NewFold(NewTally("t", 1<<30, Rules{}), init, pool, replace)
}

func mutant(r *schema.Result) *schema.Result {
	r.Design.Origin, r.Design.Parents = schema.OriginMutant, []string{"t-1"}
	return r
}

// again is a second result for the same design: another attempt on
// another worker, with another outcome.
func again(r *schema.Result, status schema.Status, fitness float64) *schema.Result {
	c := *r
	c.Attempt, c.Worker, c.Slot, c.Status, c.Fitness = r.Attempt+1, "other", 9, status, fitness
	return &c
}

func TestFoldDedupe(t *testing.T) {
	t.Parallel()
	first := result(1, schema.StatusOK, 0.5)
	tests := []struct {
		name string
		dup  *schema.Result
	}{
		{"same result again", first},
		{"another attempt, another worker", again(first, schema.StatusOK, 0.9)},
		{"a later failure", again(first, schema.StatusError, 0)},
		{"a lost record", again(first, schema.StatusLost, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := testFold(5, 5, ReplaceWorst)
			if f.Apply(first, nil) != Counted {
				t.Fatal("first result not applied")
			}
			digest := f.Pool().Digest()
			if f.Apply(tt.dup, nil) != Duplicate {
				t.Error("duplicate result applied")
			}
			if f.Terminal() != 1 || f.Count(schema.StatusOK) != 1 || f.Count(tt.dup.Status) != btoi(tt.dup.Status == schema.StatusOK) {
				t.Errorf("terminal %d, ok %d, %s %d; want the first result counted once",
					f.Terminal(), f.Count(schema.StatusOK), tt.dup.Status, f.Count(tt.dup.Status))
			}
			if f.Pool().Len() != 1 || f.Pool().Digest() != digest {
				t.Errorf("pool changed by a duplicate: %d members, digest %s, want %s", f.Pool().Len(), f.Pool().Digest(), digest)
			}
			if b := f.Best(); b == nil || b.Fitness != 0.5 {
				t.Errorf("best = %+v, want fitness 0.5 of the first result", b)
			}
			if got := f.Stats().SlotsUsed(); got != 1 {
				t.Errorf("slots used = %d, want 1: a duplicate's slot is not counted", got)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestFoldCounts(t *testing.T) {
	t.Parallel()
	f := testFold(3, 2, ReplaceWorst)
	statuses := []schema.Status{
		schema.StatusOK, schema.StatusInfeasible, schema.StatusOK, schema.StatusError,
		schema.StatusTimeout, schema.StatusLost, schema.StatusOK, schema.StatusInfeasible, schema.StatusLost,
	}
	for i, s := range statuses {
		f.Apply(result(uint64(i+1), s, float64(i)), nil)
	}
	want := map[schema.Status]int{schema.StatusOK: 3, schema.StatusInfeasible: 2, schema.StatusError: 1,
		schema.StatusTimeout: 1, schema.StatusLost: 2}
	for _, s := range schema.Statuses {
		if got := f.Count(s); got != want[s] {
			t.Errorf("Count(%s) = %d, want %d", s, got, want[s])
		}
	}
	if f.Terminal() != len(statuses) || f.MaxSeq() != uint64(len(statuses)) {
		t.Errorf("terminal %d, max seq %d; want %d both", f.Terminal(), f.MaxSeq(), len(statuses))
	}
	// Only ok results join the pool: seqs 1, 3, 7 with pool 2 keep 3 and 7.
	if got := ids(f.Pool().Members()); !reflect.DeepEqual(got, []string{"t-3", "t-7"}) {
		t.Errorf("pool = %v, want [t-3 t-7]", got)
	}
	// Lost results have no timing.
	if got := f.Stats().evaluations; got != len(statuses)-2 {
		t.Errorf("stats evaluations = %d, want %d (lost excluded)", got, len(statuses)-2)
	}
}

func TestFoldRandom(t *testing.T) {
	t.Parallel()
	type step struct {
		status schema.Status
		want   bool // Random() after the step
	}
	tests := []struct {
		name  string
		init  int
		steps []step
	}{
		{"random until init results", 3, []step{
			{schema.StatusOK, true}, {schema.StatusOK, true}, {schema.StatusOK, false}, {schema.StatusOK, false},
		}},
		{"failures count toward init", 2, []step{
			{schema.StatusInfeasible, true}, {schema.StatusOK, false},
		}},
		{"random while the pool is empty", 2, []step{
			{schema.StatusError, true}, {schema.StatusInfeasible, true}, {schema.StatusTimeout, true},
			{schema.StatusLost, true}, {schema.StatusOK, false}, {schema.StatusError, false},
		}},
		{"init 1", 1, []step{{schema.StatusOK, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := testFold(tt.init, tt.init, ReplaceWorst)
			if !f.Random() {
				t.Fatal("an empty fold is not random")
			}
			for i, s := range tt.steps {
				f.Apply(result(uint64(i+1), s.status, 1), nil)
				if got := f.Random(); got != s.want {
					t.Fatalf("after %d results (last %s), Random() = %v, want %v", i+1, s.status, got, s.want)
				}
			}
		})
	}
}

func TestFoldBest(t *testing.T) {
	t.Parallel()
	f := testFold(3, 2, ReplaceOldest)
	if f.Best() != nil || f.BestRandom() != nil {
		t.Fatal("best of an empty fold is not nil")
	}
	f.Apply(result(1, schema.StatusOK, 0.3), nil)
	f.Apply(result(2, schema.StatusOK, 0.6), nil)
	f.Apply(result(3, schema.StatusOK, 0.6), nil) // a tie: the first stays best
	f.Apply(result(4, schema.StatusInfeasible, 0), nil)
	f.Apply(mutant(result(5, schema.StatusOK, 0.9)), nil)
	f.Apply(mutant(result(6, schema.StatusOK, 0.1)), nil)
	f.Apply(mutant(result(7, schema.StatusOK, 0.2)), nil)
	f.Apply(mutant(result(8, schema.StatusError, 0)), nil)
	if b := f.Best(); b == nil || b.Design.ID != "t-5" || b.Fitness != 0.9 {
		t.Errorf("Best = %+v, want t-5 at 0.9", b)
	}
	if b := f.BestRandom(); b == nil || b.Design.ID != "t-2" || b.Fitness != 0.6 {
		t.Errorf("BestRandom = %+v, want t-2 at 0.6", b)
	}
	// The best outlives its eviction from an aging pool.
	if got := ids(f.Pool().Members()); !reflect.DeepEqual(got, []string{"t-6", "t-7"}) {
		t.Errorf("pool = %v, want [t-6 t-7]", got)
	}
	if f.Has(9) || !f.Has(8) || !f.Has(1) {
		t.Errorf("Has(1, 8, 9) = %v %v %v, want true true false", f.Has(1), f.Has(8), f.Has(9))
	}
}

// TestFoldBestNegative checks that a best fitness below zero is found: the
// search may maximise a negative loss.
func TestFoldBestNegative(t *testing.T) {
	t.Parallel()
	f := testFold(2, 2, ReplaceWorst)
	f.Apply(result(1, schema.StatusOK, -5), nil)
	f.Apply(result(2, schema.StatusOK, -2), nil)
	f.Apply(result(3, schema.StatusOK, -9), nil)
	if b := f.Best(); b == nil || b.Fitness != -2 {
		t.Errorf("Best = %+v, want -2", b)
	}
}

// windowed returns 1..n shuffled within consecutive windows of w, the
// order in which results of w concurrent designs arrive.
func windowed(n, w int, r *rand.Rand) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	for lo := 0; lo < n; lo += w {
		hi := min(lo+w, n)
		r.Shuffle(hi-lo, func(i, j int) { out[lo+i], out[lo+j] = out[lo+j], out[lo+i] })
	}
	return out
}

func TestDoneSetMemory(t *testing.T) {
	t.Parallel()
	const n, w = 100000, 64
	f := testFold(10, 10, ReplaceWorst)
	seqs := windowed(n, w, rand.New(rand.NewPCG(11, 12)))
	maxAbove := 0
	for i, seq := range seqs {
		r := result(seq, schema.StatusOK, float64(seq%1000))
		r.Start, r.Stop = time.Time{}, time.Time{} // no timing: only the done set is measured
		if f.Apply(r, nil) != Counted {
			t.Fatalf("result %d (seq %d) not applied", i, seq)
		}
		maxAbove = max(maxAbove, len(f.tally.done.above))
		if i%997 == 0 && f.Apply(r, nil) != Duplicate {
			t.Fatalf("seq %d applied twice", seq)
		}
	}
	if maxAbove >= w {
		t.Errorf("done set held %d seqs above its floor, want < %d (the window)", maxAbove, w)
	}
	if len(f.tally.done.above) != 0 || f.tally.done.low != n {
		t.Errorf("after every seq: %d above, low %d; want 0 above, low %d", len(f.tally.done.above), f.tally.done.low, n)
	}
	if f.Terminal() != n || f.MaxSeq() != n {
		t.Errorf("terminal %d, max seq %d; want %d", f.Terminal(), f.MaxSeq(), n)
	}
}

func TestDoneSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		add       []uint64
		wantLow   uint64
		wantAbove int
		has       []uint64
		hasNot    []uint64
	}{
		{"in order", []uint64{1, 2, 3}, 3, 0, []uint64{1, 2, 3}, []uint64{4, 5}},
		{"a hole", []uint64{1, 3, 4}, 1, 2, []uint64{1, 3, 4}, []uint64{2, 5}},
		{"hole filled", []uint64{3, 2, 4, 1}, 4, 0, []uint64{1, 2, 3, 4}, []uint64{5}},
		{"far ahead", []uint64{1000}, 0, 1, []uint64{1000}, []uint64{1, 999, 1001}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := doneSet{above: map[uint64]struct{}{}}
			for _, s := range tt.add {
				if !d.add(s) {
					t.Fatalf("add(%d) = false for a new seq", s)
				}
			}
			for _, s := range tt.add {
				if d.add(s) {
					t.Errorf("add(%d) = true for a seq already done", s)
				}
			}
			if d.low != tt.wantLow || len(d.above) != tt.wantAbove {
				t.Errorf("low %d, %d above; want low %d, %d above", d.low, len(d.above), tt.wantLow, tt.wantAbove)
			}
			for _, s := range tt.has {
				if !d.has(s) {
					t.Errorf("has(%d) = false", s)
				}
			}
			for _, s := range tt.hasNot {
				if d.has(s) {
					t.Errorf("has(%d) = true", s)
				}
			}
		})
	}
}

// history makes n results in a windowed order with every status and
// duplicates, as a results stream holds them.
func history(n int, seed uint64) []*schema.Result {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []*schema.Result
	for _, seq := range windowed(n, 16, r) {
		s := schema.Statuses[r.IntN(len(schema.Statuses))]
		if r.IntN(2) == 0 {
			s = schema.StatusOK
		}
		res := result(seq, s, float64(r.IntN(50))/10)
		if seq > 20 && s != schema.StatusLost {
			mutant(res)
		}
		out = append(out, res)
		if r.IntN(10) == 0 {
			out = append(out, again(res, schema.StatusOK, 100)) // a redelivered design's second result
		}
	}
	return out
}

func TestFoldReplay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		replace Replace
	}{
		{"replace worst", ReplaceWorst},
		{"replace oldest", ReplaceOldest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := history(2000, 42)
			fold := func() *Fold {
				f := testFold(20, 10, tt.replace)
				for _, r := range h {
					f.Apply(r, nil)
				}
				return f
			}
			a, b := fold(), fold()
			if a.Pool().Digest() != b.Pool().Digest() {
				t.Errorf("replay digest %s != %s", b.Pool().Digest(), a.Pool().Digest())
			}
			if !reflect.DeepEqual(ids(a.Pool().Members()), ids(b.Pool().Members())) {
				t.Errorf("replay pool %v != %v", ids(b.Pool().Members()), ids(a.Pool().Members()))
			}
			if a.Terminal() != 2000 || b.Terminal() != 2000 {
				t.Errorf("terminal %d and %d, want 2000: duplicates must count once", a.Terminal(), b.Terminal())
			}
			for _, s := range schema.Statuses {
				if a.Count(s) != b.Count(s) {
					t.Errorf("Count(%s) %d != %d", s, a.Count(s), b.Count(s))
				}
			}
			if a.Best().Design.ID != b.Best().Design.ID || a.Best().Fitness >= 100 {
				t.Errorf("best %s (%v) vs %s: a duplicate's fitness must not count",
					a.Best().Design.ID, a.Best().Fitness, b.Best().Design.ID)
			}
			if a.Stats().GapQuantile(0.5) != b.Stats().GapQuantile(0.5) || a.Stats().Utilization() != b.Stats().Utilization() {
				t.Error("replayed statistics differ")
			}
			// A different order of the same results gives a different pool.
			c := testFold(20, 10, tt.replace)
			for i := len(h) - 1; i >= 0; i-- {
				c.Apply(h[i], nil)
			}
			if c.Pool().Digest() == a.Pool().Digest() {
				t.Error("reversed history gave the same pool digest")
			}
		})
	}
}
