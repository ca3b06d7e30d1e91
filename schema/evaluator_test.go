package schema

import (
	"strings"
	"testing"
	"time"
)

func TestEvaluatorValidate(t *testing.T) {
	t.Parallel()
	sim := &SimEvaluator{Mean: time.Second, Sigma: 0.8, Fail: 0.1}
	tests := []struct {
		name string
		e    Evaluator
		bad  string // "" : valid; else a word of the error
	}{
		{"built-in", Evaluator{Builtin: EvaluatorMLP}, ""},
		{"command", Evaluator{Cmd: "python3 ev.py", Persistent: true, Timeout: time.Minute}, ""},
		{"sim", Evaluator{Builtin: EvaluatorSim, Sim: sim}, ""},
		{"both", Evaluator{Builtin: EvaluatorMLP, Cmd: "x"}, "one or the other"},
		{"neither", Evaluator{}, "neither"},
		{"persistent built-in", Evaluator{Builtin: EvaluatorNoop, Persistent: true}, "needs a command"},
		{"unknown built-in", Evaluator{Builtin: "gpt"}, "not mlp"},
		{"sim without settings", Evaluator{Builtin: EvaluatorSim}, "sim"},
		{"settings without sim", Evaluator{Builtin: EvaluatorMLP, Sim: sim}, "sim"},
		{"negative timeout", Evaluator{Cmd: "x", Timeout: -1}, "timeout"},
		{"nb201", Evaluator{Builtin: EvaluatorNB201, NB201: &NB201Evaluator{Noise: 0.5}}, ""},
		{"nb201 without settings", Evaluator{Builtin: EvaluatorNB201}, "nb201"},
		{"nb201 settings without nb201", Evaluator{Builtin: EvaluatorSim, Sim: sim, NB201: &NB201Evaluator{}}, "nb201"},
		{"nb201 negative noise", Evaluator{Builtin: EvaluatorNB201, NB201: &NB201Evaluator{Noise: -1}}, "noise"},
	}
	for _, tt := range tests {
		err := tt.e.Validate()
		switch {
		case tt.bad == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
			t.Errorf("%s: err %v; want one saying %q", tt.name, err, tt.bad)
		}
	}
}

// A run's record keeps its evaluator through the wire, and Diff names
// every setting that differs, recorded value first.
func TestEvaluatorRecordAndDiff(t *testing.T) {
	t.Parallel()
	rec := &Evaluator{Builtin: EvaluatorSim, StopGrace: 10 * time.Second, Sim: &SimEvaluator{Mean: 200 * time.Millisecond, Sigma: 0.8, Curve: true, Steps: 9}}
	r := &Run{Run: "r", Phase: PhaseRunning, Budget: 10, Evaluator: rec}
	data, err := EncodeRun(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRun(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Evaluator.String() != rec.String() || len(rec.Diff(back.Evaluator)) != 0 {
		t.Fatalf("decoded %v, want %v (diff %v)", back.Evaluator, rec, rec.Diff(back.Evaluator))
	}
	got := &Evaluator{Cmd: "python3 ev.py", Persistent: true, StopGrace: 10 * time.Second}
	diff := strings.Join(rec.Diff(got), "; ")
	for _, want := range []string{`evaluator: built-in sim -> command "python3 ev.py"`, "persistent: false -> true", "sim: --sim-mean 0.2"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff %q lacks %q", diff, want)
		}
	}
	if strings.Contains(diff, "stop-grace") {
		t.Errorf("diff %q names an equal setting", diff)
	}
	nb := &Evaluator{Builtin: EvaluatorNB201, NB201: &NB201Evaluator{Noise: 0.5}}
	if d := strings.Join(nb.Diff(&Evaluator{Builtin: EvaluatorNB201, NB201: &NB201Evaluator{}}), "; "); d != "nb201: --nb201-noise 0.5 -> " {
		t.Errorf("nb201 noise diff %q", d)
	}
	if got := nb.String(); got != "--evaluator nb201 --nb201-noise 0.5" {
		t.Errorf("nb201 evaluator says %q", got)
	}
	bad := &Run{Run: "r", Phase: PhaseRunning, Budget: 10, Evaluator: &Evaluator{}}
	if _, err := EncodeRun(bad); err == nil {
		t.Errorf("a record with an empty evaluator encoded")
	}
}
