package runstate

import (
	"testing"

	"github.com/evoq/evoq/schema"
)

func TestStopRule(t *testing.T) {
	t.Parallel()
	ok := func(seq uint64, f float64) *schema.Result { return result(seq, schema.StatusOK, f) }
	fail := func(seq uint64) *schema.Result { return result(seq, schema.StatusInfeasible, 0) }
	tests := []struct {
		name    string
		rule    StopRule
		results []*schema.Result
		reason  schema.StopReason
		at      int
	}{
		{"no rule never stops", StopRule{}, []*schema.Result{ok(1, 1), ok(2, 1), ok(3, 1)}, "", 0},
		{"target reached", StopRule{Target: new(0.8)}, []*schema.Result{ok(1, 0.5), ok(2, 0.8), ok(3, 0.9)}, schema.StopTarget, 2},
		{"target not reached", StopRule{Target: new(0.95)}, []*schema.Result{ok(1, 0.5), ok(2, 0.8), ok(3, 0.9)}, "", 0},
		{"plateau of equal results", StopRule{Plateau: 2}, []*schema.Result{ok(1, 0.5), ok(2, 0.5), ok(3, 0.4), ok(4, 0.9)}, schema.StopPlateau, 3},
		{"an improvement restarts the count", StopRule{Plateau: 2}, []*schema.Result{ok(1, 0.5), ok(2, 0.4), ok(3, 0.6), ok(4, 0.1)}, "", 0},
		{"failures do not improve", StopRule{Plateau: 3}, []*schema.Result{ok(1, 0.5), fail(2), fail(3), fail(4)}, schema.StopPlateau, 4},
		{"no ok result at all", StopRule{Plateau: 2}, []*schema.Result{fail(1), fail(2)}, schema.StopPlateau, 2},
		{"duplicates are not results", StopRule{Plateau: 2}, []*schema.Result{ok(1, 0.5), ok(1, 0.5), ok(1, 0.5), ok(2, 0.9)}, "", 0},
		{"the first reason stays", StopRule{Target: new(0.9), Plateau: 1}, []*schema.Result{ok(1, 0.5), ok(2, 0.4), ok(3, 0.95)}, schema.StopPlateau, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := testFold(1, 2, ReplaceWorst)
			f.SetStopRule(tt.rule)
			for _, r := range tt.results {
				f.Apply(r, nil)
			}
			if reason, at := f.Stop(); reason != tt.reason || at != tt.at {
				t.Fatalf("Stop() = %q after %d results, want %q after %d", reason, at, tt.reason, tt.at)
			}
		})
	}
}

// TestStopRuleFromRecord checks that the state a tool builds from a
// run's record stops where the run's controller did.
func TestStopRuleFromRecord(t *testing.T) {
	t.Parallel()
	rec := &schema.Run{Run: "t", Budget: 100, Plateau: 2, Target: new(2.0)}
	s, err := NewState(rec, 1, 2, ReplaceWorst)
	if err != nil {
		t.Fatal(err)
	}
	for seq, f := range []float64{0.5, 0.7, 0.6, 0.6} {
		s.ApplyResult(result(uint64(seq+1), schema.StatusOK, f), nil)
	}
	if reason, at := s.Fold.Stop(); reason != schema.StopPlateau || at != 4 {
		t.Fatalf("Stop() = %q after %d, want plateau after 4", reason, at)
	}
	if got := s.Fold.SinceBest(); got != 2 {
		t.Fatalf("SinceBest() = %d, want 2", got)
	}
}

func TestDurationQuantile(t *testing.T) {
	t.Parallel()
	st := NewStats()
	if st.DurationQuantile(0.9) != 0 {
		t.Fatal("quantile of no durations is not 0")
	}
	for seq := uint64(1); seq <= 10; seq++ {
		st.Add(result(seq, schema.StatusOK, 1)) // one second each
	}
	if q := st.DurationQuantile(0.9).Seconds(); q < 0.98 || q > 1.02 {
		t.Fatalf("p90 = %gs, want 1s within the histogram's 2%%", q)
	}
}
