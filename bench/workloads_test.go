package bench

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/evoq/evoq/runstate"
)

// flagValue is the value after name in args, "" when absent.
func flagValue(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func TestWorkloadTable(t *testing.T) {
	t.Parallel()
	if got, want := Names(), []string{"noop", "sim", "scale", "exascale", "growth", "memory", "replay", "fidelity", "inherit", "preempt", "stoplatency", "zdt", "nb201", "train20"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v (replay must follow memory)", got, want)
	}
	for _, w := range workloads {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			if w.about == "" || w.target == "" {
				t.Errorf("about %q, target %q: both are printed", w.about, w.target)
			}
			if (w.dask == nil) != (w.smokeDask == nil) {
				t.Errorf("dask %v, smoke dask %v: a smoke run would skip or invent a Dask run", w.dask, w.smokeDask)
			}
			if own := []string{"exascale", "growth", "memory", "replay", "fidelity", "inherit", "preempt", "stoplatency", "zdt", "nb201", "train20"}; slices.Contains(own, w.name) {
				if w.args != nil || w.dask != nil {
					t.Errorf("%s starts its own processes; it has no evoq run flags", w.name)
				}
				return
			}
			for _, args := range [][]string{w.args, w.smokeArgs} {
				if flagValue(args, "--evaluator") == "" || flagValue(args, "--slots") == "" {
					t.Errorf("flags %v lack --evaluator or --slots", args)
				}
			}
			full, _ := strconv.Atoi(flagValue(w.args, "--budget"))
			smoke, _ := strconv.Atoi(flagValue(w.smokeArgs, "--budget"))
			if smoke <= 0 || smoke >= full {
				t.Errorf("smoke budget %d, full budget %d: a smoke run is one short iteration", smoke, full)
			}
			if ws := flagValue(w.args, "--wait-slots"); ws != "" && ws != flagValue(w.args, "--slots") {
				t.Errorf("--wait-slots %s but --slots %s: utilization would count a start-up ramp", ws, flagValue(w.args, "--slots"))
			}
			if w.dask != nil && flagValue(w.dask, "--slots") != flagValue(w.args, "--slots") {
				t.Errorf("Dask runs %s slots, evoq %s: the ratios compare unlike runs", flagValue(w.dask, "--slots"), flagValue(w.args, "--slots"))
			}
		})
	}
}

// The baseline script knows every flag the table hands it.
func TestDaskFlagsKnownToScript(t *testing.T) {
	t.Parallel()
	script := string(DaskBaseline)
	for _, w := range workloads {
		for _, a := range append(slices.Clone(w.dask), w.smokeDask...) {
			if strings.HasPrefix(a, "--") && !strings.Contains(script, `"`+a+`"`) {
				t.Errorf("%s: dask_baseline.py has no flag %s", w.name, a)
			}
		}
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		names []string
		want  []string
		field string // of the ConfigError; "" for none
	}{
		{"default pair", []string{"noop", "sim"}, []string{"noop", "sim"}, ""},
		{"order kept", []string{"scale", "noop"}, []string{"scale", "noop"}, ""},
		{"duplicates once", []string{"sim", "noop", "sim"}, []string{"sim", "noop"}, ""},
		{"all", Names(), Names(), ""},
		{"memory then replay", []string{"memory", "replay"}, []string{"memory", "replay"}, ""},
		{"unknown", []string{"noop", "nope"}, nil, "Workloads"},
		{"empty name", []string{""}, nil, "Workloads"},
		{"none", nil, nil, "Workloads"},
		{"replay alone", []string{"replay"}, nil, "Workloads"},
		{"replay before memory", []string{"replay", "memory"}, nil, "Workloads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := choose(tc.names)
			var ce *ConfigError
			if tc.field != "" {
				if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, ErrConfig) {
					t.Fatalf("choose(%v) = %v, %v; want a ConfigError on %s", tc.names, got, err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("choose(%v): %v", tc.names, err)
			}
			names := make([]string, len(got))
			for i, w := range got {
				names[i] = w.name
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("choose(%v) = %v, want %v", tc.names, names, tc.want)
			}
		})
	}
}

func TestRatios(t *testing.T) {
	t.Parallel()
	evoq := &runstate.Summary{EvalsPerS: 8000, UtilSteady: 0.99, GapP50Ms: 0.5, GapP99Ms: 2}
	for _, tc := range []struct {
		name string
		evoq *runstate.Summary
		dask map[string]any
		want map[string]float64
	}{
		{"every figure", evoq,
			map[string]any{"evals_per_s": 400.0, "util_steady": 0.33, "gap_p50_ms": 20.0, "gap_p99_ms": 100.0},
			map[string]float64{"evals_per_s": 20, "util_steady": 3, "gap_p50_ms (dask/evoq)": 40, "gap_p99_ms (dask/evoq)": 50}},
		{"Dask figure missing", evoq, map[string]any{"evals_per_s": 400.0}, map[string]float64{"evals_per_s": 20}},
		{"Dask figure not a number", evoq, map[string]any{"evals_per_s": "fast"}, map[string]float64{}},
		{"Dask figure zero", evoq, map[string]any{"evals_per_s": 0.0, "gap_p99_ms": 0.0},
			map[string]float64{"gap_p99_ms (dask/evoq)": 0}},
		{"evoq gap zero", &runstate.Summary{EvalsPerS: 10}, map[string]any{"evals_per_s": 3.0, "gap_p50_ms": 1.0},
			map[string]float64{"evals_per_s": 3.333}},
		{"no Dask figures", evoq, nil, map[string]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ratios(tc.evoq, tc.dask)
			if len(got) != len(tc.want) {
				t.Fatalf("ratios = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
				}
			}
		})
	}
}

func TestMet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		row  *Row
		want bool
	}{
		{"noop at target, no Dask", &Row{Workload: "noop", Evoq: &runstate.Summary{EvalsPerS: 10000}}, true},
		{"noop slow", &Row{Workload: "noop", Evoq: &runstate.Summary{EvalsPerS: 9999}}, false},
		{"noop fast but under 50x Dask", &Row{Workload: "noop", Evoq: &runstate.Summary{EvalsPerS: 20000},
			Ratios: map[string]float64{"evals_per_s": 49}}, false},
		{"noop 50x Dask", &Row{Workload: "noop", Evoq: &runstate.Summary{EvalsPerS: 20000},
			Ratios: map[string]float64{"evals_per_s": 50}}, true},
		{"sim at target", &Row{Workload: "sim", Evoq: &runstate.Summary{UtilSteady: 0.98, GapP99Ms: 5}}, true},
		{"sim idle slots", &Row{Workload: "sim", Evoq: &runstate.Summary{UtilSteady: 0.97, GapP99Ms: 1}}, false},
		{"sim slow gap", &Row{Workload: "sim", Evoq: &runstate.Summary{UtilSteady: 0.99, GapP99Ms: 5.1}}, false},
		{"scale every slot", &Row{Workload: "scale", Evoq: &runstate.Summary{Slots: 10000, SlotsUsed: 10000, UtilSteady: 0.97}}, true},
		{"scale a slot unused", &Row{Workload: "scale", Evoq: &runstate.Summary{Slots: 10000, SlotsUsed: 9999, UtilSteady: 0.99}}, false},
		{"memory doubled", &Row{Workload: "memory", Memory: &Memory{Ratio: 2}}, true},
		{"memory grew", &Row{Workload: "memory", Memory: &Memory{Ratio: 2.01}}, false},
		{"replay fast", &Row{Workload: "replay", Replay: &runstate.Replay{ResultsPerS: 100000}}, true},
		{"replay slow", &Row{Workload: "replay", Replay: &runstate.Replay{ResultsPerS: 99999}}, false},
		{"fidelity both halves", &Row{Workload: "fidelity", Fidelity: &Fidelity{ReachMet: true, EqualMet: true}}, true},
		{"fidelity slow to reach", &Row{Workload: "fidelity", Fidelity: &Fidelity{EqualMet: true}}, false},
		{"fidelity worse at equal", &Row{Workload: "fidelity", Fidelity: &Fidelity{ReachMet: true}}, false},
		{"inherit fast enough", &Row{Workload: "inherit", Inherit: &Inherit{Met: true}}, true},
		{"inherit too slow", &Row{Workload: "inherit", Inherit: &Inherit{}}, false},
		{"stoplatency at target", &Row{Workload: "stoplatency", StopLatency: &StopLatency{
			Rung: &Quantiles{N: 100, P99: 50}, Stop: &Quantiles{N: 60, P99: 50}}}, true},
		{"stoplatency stop answers slow", &Row{Workload: "stoplatency", StopLatency: &StopLatency{
			Rung: &Quantiles{N: 100, P99: 12}, Stop: &Quantiles{N: 60, P99: 50.1}}}, false},
		{"stoplatency rung answers slow", &Row{Workload: "stoplatency", StopLatency: &StopLatency{
			Rung: &Quantiles{N: 100, P99: 51}, Stop: &Quantiles{N: 60, P99: 3}}}, false},
		{"stoplatency no stop answers", &Row{Workload: "stoplatency", StopLatency: &StopLatency{
			Rung: &Quantiles{N: 100, P99: 3}}}, false},
		{"train20 all three", &Row{Workload: "train20", Train20: &Train20{Met: true, EqualMet: true, VsOptunaMet: true, ReachMet: true}}, true},
		{"train20 one missed", &Row{Workload: "train20", Train20: &Train20{EqualMet: true, VsOptunaMet: true}}, false},
		{"unknown workload", &Row{Workload: "other"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := met(tc.row); got != tc.want {
				t.Errorf("met = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSig4(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want float64 }{
		{20.0, 20}, {3.33333, 3.333}, {133641.7, 133600}, {0.0012345, 0.001234}, {0, 0},
	} {
		if got := sig4(tc.in); got != tc.want {
			t.Errorf("sig4(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
