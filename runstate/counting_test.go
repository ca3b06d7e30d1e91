package runstate

import (
	"errors"
	"testing"

	"github.com/evoq/evoq/schema"
)

// foreignRun is result made a result of design seq of another run.
func foreignRun(run string, seq uint64) *schema.Result {
	r := result(seq, schema.StatusOK, 0.5)
	r.Run, r.Design.Run = run, run
	r.DesignID = schema.DesignID(run, seq)
	r.Design.ID = r.DesignID
	return r
}

// TestTallyRule feeds one stream of results, in order, to a tally of run
// "t" with budget 5 and checks the verdict on each.
func TestTallyRule(t *testing.T) {
	t.Parallel()
	badID := result(4, schema.StatusOK, 1)
	badID.DesignID, badID.Design.ID = "t-04", "t-04"
	mixed := result(4, schema.StatusOK, 1)
	mixed.Design.Run = "u"         // the result says run t, its design run u
	prefix := foreignRun("t-1", 2) // ID "t-1-2": run t's prefix, not its design
	steps := []struct {
		name string
		r    *schema.Result
		err  error
		want Verdict
	}{
		{"the first result of a design", result(1, schema.StatusOK, 0.1), nil, Counted},
		{"a second result of that design", again(result(1, schema.StatusOK, 0.1), schema.StatusOK, 9), nil, Duplicate},
		{"the same result stored again", result(1, schema.StatusOK, 0.1), nil, Duplicate},
		{"a result that did not decode", nil, errors.New("msgpack: invalid code"), Malformed},
		{"a result that did not validate", result(2, schema.StatusOK, 1), schema.ErrInvalid, Malformed},
		{"another run's design", foreignRun("u", 2), nil, Foreign},
		{"a run whose ID starts with this run's", prefix, nil, Foreign},
		{"a design ID not the run's form", badID, nil, Foreign},
		{"a design of another run under this run's result", mixed, nil, Foreign},
		{"seq 0", result(0, schema.StatusOK, 1), nil, Foreign},
		{"seq beyond the budget", result(6, schema.StatusOK, 1), nil, Foreign},
		{"a seq no foreign result took", result(2, schema.StatusError, 0), nil, Counted},
		{"the last seq of the budget, out of order", result(5, schema.StatusLost, 0), nil, Counted},
		{"a lost record after the result", result(5, schema.StatusLost, 0), nil, Duplicate},
		{"a seq whose malformed result did not count", result(4, schema.StatusInfeasible, 0), nil, Counted},
	}
	tally := NewTally("t", 5, Rules{})
	for _, s := range steps {
		if got := tally.Judge(s.r, s.err); got != s.want {
			t.Errorf("%s: %s, want %s", s.name, got, s.want)
		}
	}
	if tally.Counted() != 4 {
		t.Errorf("%d counted, want 4", tally.Counted())
	}
	for seq, want := range map[uint64]bool{1: true, 2: true, 3: false, 4: true, 5: true, 6: false} {
		if tally.Has(seq) != want {
			t.Errorf("Has(%d) = %v, want %v", seq, !want, want)
		}
	}
	for seq, want := range map[uint64]int{0: 0, 1: 1, 2: 2, 3: 2, 4: 3, 5: 4, 9: 4} {
		if got := tally.CountedUpTo(seq); got != want {
			t.Errorf("CountedUpTo(%d) = %d, want %d", seq, got, want)
		}
	}
}

// TestTallyRaisedBudget pins the edge the rule documents: a result for a
// seq between an old budget and a raised one is foreign under the old
// budget and counts under the raised one.
func TestTallyRaisedBudget(t *testing.T) {
	t.Parallel()
	r := result(7, schema.StatusOK, 1)
	if v := NewTally("t", 5, Rules{}).Judge(r, nil); v != Foreign {
		t.Errorf("budget 5: %s, want foreign", v)
	}
	if v := NewTally("t", 10, Rules{}).Judge(r, nil); v != Counted {
		t.Errorf("budget 10: %s, want counted", v)
	}
}

// TestFoldIgnoresWhatDoesNotCount checks that only a counted result
// changes the fold.
func TestFoldIgnoresWhatDoesNotCount(t *testing.T) {
	t.Parallel()
	f := NewFold(NewTally("t", 3, Rules{}), 1, 2, ReplaceWorst)
	if v := f.Apply(result(1, schema.StatusOK, 0.2), nil); v != Counted {
		t.Fatalf("first result: %s", v)
	}
	digest := f.Pool().Digest()
	for _, r := range []*schema.Result{result(4, schema.StatusOK, 9), foreignRun("u", 2), nil} {
		var err error
		if r == nil {
			err = schema.ErrInvalid
		}
		f.Apply(r, err)
	}
	if f.Terminal() != 1 || f.Count(schema.StatusOK) != 1 || f.MaxSeq() != 1 || f.Pool().Digest() != digest || f.Best().Fitness != 0.2 {
		t.Errorf("terminal %d, ok %d, max seq %d, best %v: a result that does not count changed the fold",
			f.Terminal(), f.Count(schema.StatusOK), f.MaxSeq(), f.Best().Fitness)
	}
}

// TestTallyRaise checks that a raised budget owns the seqs up to it from
// the next result on, and that a smaller one changes nothing.
func TestTallyRaise(t *testing.T) {
	t.Parallel()
	tl := NewTally("t", 2, Rules{})
	if v := tl.Judge(result(3, schema.StatusOK, 1), nil); v != Foreign {
		t.Fatalf("seq 3 of a budget of 2: %s, want foreign", v)
	}
	tl.Raise(4)
	tl.Raise(3)
	if tl.Budget() != 4 {
		t.Fatalf("budget after Raise(4) and Raise(3) = %d, want 4", tl.Budget())
	}
	for seq, want := range map[uint64]Verdict{3: Counted, 4: Counted, 5: Foreign} {
		if v := tl.Judge(result(seq, schema.StatusOK, 1), nil); v != want {
			t.Errorf("seq %d after the raise: %s, want %s", seq, v, want)
		}
	}
}
