package schema

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// A design's end is read from its gene whatever number type the genome
// holds it in; a missing or non-numeric gene gives none.
func TestEarlyStopEnd(t *testing.T) {
	t.Parallel()
	rule := &EarlyStop{Rule: RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: "epochs"}
	for _, tc := range []struct {
		name   string
		rule   *EarlyStop
		genome map[string]any
		end    float64
		ok     bool
	}{
		{"int64", rule, map[string]any{"epochs": int64(9)}, 9, true},
		{"uint64", rule, map[string]any{"epochs": uint64(3)}, 3, true},
		{"float64", rule, map[string]any{"epochs": 4.5}, 4.5, true},
		{"json number", rule, map[string]any{"epochs": json.Number("7")}, 7, true},
		{"missing", rule, map[string]any{"layers": int64(2)}, 0, false},
		{"a string", rule, map[string]any{"epochs": "9"}, 0, false},
		{"no gene named", &EarlyStop{Rule: RuleASHA, MinStep: 1, Eta: 3}, map[string]any{"epochs": int64(9)}, 0, false},
		{"no rule", nil, map[string]any{"epochs": int64(9)}, 0, false},
	} {
		if end, ok := tc.rule.End(tc.genome); end != tc.end || ok != tc.ok {
			t.Errorf("%s: End = %v, %v; want %v, %v", tc.name, end, ok, tc.end, tc.ok)
		}
	}
	if err := (&EarlyStop{Rule: RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: " epochs"}).Validate(); err == nil {
		t.Error("a gene name with a leading space validated")
	}
}

// A last report travels with its flag and is stored under its own
// message ID, so that one repeating its attempt's previous step is not
// taken for a duplicate of that report.
func TestReportLast(t *testing.T) {
	t.Parallel()
	r := &Report{Run: "r", DesignID: "r-4", Seq: 4, Attempt: 1, Step: 3, Fitness: 0.5, Worker: "w", Time: time.Unix(1, 0)}
	plain := r.MsgID()
	r.Last = true
	if r.MsgID() == plain {
		t.Errorf("a last report's message ID %q is the plain one's", r.MsgID())
	}
	b, err := EncodeReport(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeReport(b)
	if err != nil || !got.Last {
		t.Errorf("decoded %+v, %v; want last", got, err)
	}
}

func TestEarlyStopBrackets(t *testing.T) {
	t.Parallel()
	e := &EarlyStop{Rule: RuleASHA, MinStep: 3, MaxStep: 30, Eta: 3, Brackets: 4}
	if err := e.Validate(); err != nil {
		t.Fatalf("4 brackets of rungs 3, 9, 27 below 30: %v", err)
	}
	for b, want := range [][]int64{{3, 9, 27}, {9, 27}, {27}, nil} {
		if got := e.BracketRungs(b, 30); !slices.Equal(got, want) {
			t.Errorf("bracket %d's rungs %v, want %v", b, got, want)
		}
	}
	for seq, want := range map[uint64]int{0: 0, 1: 1, 4: 0, 7: 3} {
		if got := e.Bracket(seq); got != want {
			t.Errorf("design %d in bracket %d, want %d", seq, got, want)
		}
	}
	// Design 1 is in bracket 1: its first rung is 9.
	if r, ok := e.RungAt(1, 5, 0); ok {
		t.Errorf("bracket 1 decided at %d at step 5", r)
	}
	if r, ok := e.RungAt(1, 10, 0); !ok || r != 9 {
		t.Errorf("bracket 1 at step 10: rung %d %v, want 9", r, ok)
	}
	if r, ok := e.RungAt(4, 5, 0); !ok || r != 3 {
		t.Errorf("bracket 0 at step 5: rung %d %v, want 3", r, ok)
	}
	if _, ok := e.RungAt(3, 29, 0); ok {
		t.Error("bracket 3 (first rung 81, past max step 30) decided")
	}
	one := &EarlyStop{Rule: RuleASHA, MinStep: 3, MaxStep: 30, Eta: 3}
	if one.Bracket(5) != 0 || !slices.Equal(one.BracketRungs(0, 30), one.Rungs(30)) {
		t.Error("a rule of no brackets is not bracket 0's")
	}
	for _, bad := range []*EarlyStop{
		{Rule: RuleASHA, MinStep: 3, MaxStep: 30, Eta: 3, Brackets: 5},  // rungs 3, 9, 27: at most 4
		{Rule: RuleASHA, MinStep: 3, MaxStep: 30, Eta: 3, Brackets: -1}, // negative
		{Rule: RuleMedian, MinStep: 3, MaxStep: 30, Eta: 3, Brackets: 2},
		{Rule: RuleASHA, MinStep: 1, Eta: 2, Brackets: MaxBrackets + 1},
	} {
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "brackets") {
			t.Errorf("%+v: error %v, want one naming brackets", bad, err)
		}
	}
	// Huge brackets' first rungs overflow to no rungs, not to a panic.
	huge := &EarlyStop{Rule: RuleASHA, MinStep: 1 << 40, Eta: 1 << 20, Brackets: MaxBrackets}
	if got := huge.BracketRungs(MaxBrackets-1, 1<<62); got != nil {
		t.Errorf("overflowing bracket's rungs %v, want none", got)
	}
}
