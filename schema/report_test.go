package schema

import (
	"encoding/json"
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
