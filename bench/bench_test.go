package bench

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/evoq/evoq/runstate"
)

func TestParseSummary(t *testing.T) {
	t.Parallel()
	best := 0.75
	want := &runstate.Summary{Run: "r1", Evaluations: 300, OK: 290, Infeasible: 10, BestFitness: &best,
		Best: map[string]any{"lr": 0.1}, EvalsPerS: 812.5, Slots: 8, SlotsUsed: 8, UtilSteady: 0.99,
		GapP50Ms: 0.8, GapP99Ms: 3.1, PoolSize: 5, PoolDigest: "abc",
		Replay: &runstate.Replay{Results: 300, Published: 300, Seconds: 0.01, ResultsPerS: 30000}}
	line, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		out    string
		errHas string // "" for a parsed summary
	}{
		{"alone", string(line), ""},
		{"after the person's lines", "run r1: 300 evaluations\nbest: 0.75\n" + string(line) + "\n\n", ""},
		{"empty", "", "no JSON summary"},
		{"text last", string(line) + "\nrun r1: 300 evaluations\n", "no JSON summary"},
		{"cut short", string(line[:len(line)/2]), "no JSON summary"},
		{"another object", `{"level":"warning","msg":"slots idle"}`, "no run summary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseSummary(tc.out)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("parseSummary = %+v, %v; want an error containing %q", got, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseSummary: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("parseSummary = %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParseDask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		out  string
		want float64 // evals_per_s; -1 for an error
	}{
		{"figures last", "dask_baseline: warming up\n{\"evaluations\": 100, \"evals_per_s\": 197.5}\n", 197.5},
		{"no JSON", "Traceback (most recent call last):\n", -1},
		{"null", "null\n", -1},
		{"empty", "", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fig, err := parseDask(tc.out)
			if tc.want < 0 {
				if err == nil {
					t.Fatalf("parseDask = %v, want an error", fig)
				}
				return
			}
			if err != nil || fig["evals_per_s"] != tc.want {
				t.Errorf("parseDask = %v, %v; want evals_per_s %v", fig, err, tc.want)
			}
		})
	}
}

func TestMemorySample(t *testing.T) {
	t.Parallel()
	const first = 1000
	for _, tc := range []struct {
		name    string
		samples [][2]float64 // rss MB, results stored
		want    Memory
	}{
		{"grows then settles", [][2]float64{{20, 10}, {25, 900}, {28, 1005}, {40, 5000}, {34, 9000}},
			Memory{Sampled: 1005, RSSFirstMB: 28, RSSEndMB: 34, RSSPeakMB: 40, Ratio: 1.214}},
		{"unknown sizes skipped", [][2]float64{{0, 1200}, {30, 1300}, {0, 2000}},
			Memory{Sampled: 1300, RSSFirstMB: 30, RSSEndMB: 30, RSSPeakMB: 30, Ratio: 1}},
		{"broker not answering", [][2]float64{{30, -1}, {31, 1500}, {33, -1}},
			Memory{Sampled: 1500, RSSFirstMB: 31, RSSEndMB: 31, RSSPeakMB: 33, Ratio: 1}},
		{"never reached first", [][2]float64{{20, 10}, {22, 999}},
			Memory{RSSPeakMB: 22}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var m Memory
			for _, s := range tc.samples {
				m.sample(s[0], int(s[1]), first)
			}
			m.finish()
			if m != tc.want {
				t.Errorf("got %+v\nwant %+v", m, tc.want)
			}
		})
	}
}

func TestResidentMB(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc on this system")
	}
	if rss := residentMB(os.Getpid()); rss <= 0 || rss > 1<<20 {
		t.Errorf("own resident size %v MB", rss)
	}
	if rss := residentMB(-1); rss != 0 {
		t.Errorf("resident size of no process: %v, want 0", rss)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	exe := filepath.Join(t.TempDir(), "evoq")
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	d := Config{Evoq: exe}.withDefaults()
	if !reflect.DeepEqual(d.Workloads, []string{"noop", "sim"}) || d.Python != PythonDefault || d.Log == nil || d.Loop != LoopPlain {
		t.Errorf("defaults %+v", d)
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string // of the ConfigError; "" for a valid config
	}{
		{"defaults", Config{Evoq: exe}, ""},
		{"no binary", Config{}, "Evoq"},
		{"missing binary", Config{Evoq: exe + ".gone"}, "Evoq"},
		{"missing script", Config{Evoq: exe, DaskScript: exe + ".py"}, "DaskScript"},
		{"unknown workload", Config{Evoq: exe, Workloads: []string{"noop", "fast"}}, "Workloads"},
		{"negative seeds", Config{Evoq: exe, Seeds: -1}, "Seeds"},
		{"batched loop", Config{Evoq: exe, Loop: LoopBatched}, ""},
		{"unknown loop", Config{Evoq: exe, Loop: "fast"}, "Loop"},
		{"fidelity rules", Config{Evoq: exe, FidelityRules: []string{"asha"}}, ""},
		{"unknown fidelity rule", Config{Evoq: exe, FidelityRules: []string{"asha", "hyperband"}}, "FidelityRules"},
		{"helper directory without the helper", Config{Evoq: exe, EvalHelper: t.TempDir()}, "EvalHelper"},
		{"train20 rule settings", Config{Evoq: exe, Train20Rules: []string{"asha"}, Train20MinStep: 9, Train20RuleArgs: []string{"--brackets", "3"}}, ""},
		{"unknown train20 rule", Config{Evoq: exe, Train20Rules: []string{"hyperband"}}, "Train20Rules"},
		{"train20 first rung at the end", Config{Evoq: exe, Train20MinStep: 30}, "Train20MinStep"},
		{"negative train20 first rung", Config{Evoq: exe, Train20MinStep: -1}, "Train20MinStep"},
		{"train20 rule flag the workload sets", Config{Evoq: exe, Train20RuleArgs: []string{"--eta", "2"}}, "Train20RuleArgs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.withDefaults().validate()
			var ce *ConfigError
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("validate: %v", err)
			case tc.field != "" && (!errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, ErrConfig)):
				t.Errorf("validate = %v, want a ConfigError on %s", err, tc.field)
			}
		})
	}
}

// Run checks its Config before it starts anything.
func TestRunRejectsConfig(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "stores")
	rep, err := Run(context.Background(), Config{Evoq: "", Dir: dir})
	if !errors.Is(err, ErrConfig) || rep != nil {
		t.Fatalf("Run = %v, %v; want ErrConfig and no report", rep, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Run made %s before its config was checked (%v)", dir, err)
	}
}
