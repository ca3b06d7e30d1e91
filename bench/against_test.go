package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// exportLine is one line of `evoq export --format jsonl` with the fields
// the figures read, and one they do not.
func exportLine(status, worker string, slot int, startMs, stopMs float64) string {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(ms float64) string {
		return t0.Add(time.Duration(ms * float64(time.Millisecond))).Format(time.RFC3339Nano)
	}
	return fmt.Sprintf(`{"seq":1,"counted":true,"status":%q,"worker":%q,"slot":%d,"start":%q,"stop":%q,"gap_ns":-1,"design":{"id":"x"}}`,
		status, worker, slot, at(startMs), at(stopMs))
}

func TestExportFigures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lines  []string
		want   *Figures
		errHas string
	}{
		{name: "two slots",
			// w1/0 busy 0-100, 110-200, 200-300; w2/0 busy 0-50, 150-250.
			// Window 0..200 (last start): busy 100+90+0 + 50+50 = 290 of 400.
			lines: []string{exportLine("ok", "w1", 0, 0, 100), exportLine("ok", "w2", 0, 0, 50),
				exportLine("infeasible", "w1", 0, 110, 200), exportLine("ok", "w2", 0, 150, 250),
				exportLine("ok", "w1", 0, 200, 300)},
			want: &Figures{Evaluations: 5, Slots: 2, EvalsPerS: 16.67, UtilSteady: 0.725, GapP50Ms: 10, GapP99Ms: 100}},
		{name: "slots told apart by worker",
			lines: []string{exportLine("ok", "w1", 0, 0, 10), exportLine("ok", "w2", 0, 5, 10), exportLine("ok", "w1", 0, 20, 30)},
			want:  &Figures{Evaluations: 3, Slots: 2, EvalsPerS: 100, UtilSteady: 0.375, GapP50Ms: 10, GapP99Ms: 10}},
		{name: "lost results evaluated nowhere",
			lines: []string{exportLine("ok", "w1", 3, 0, 10), `{"status":"lost","worker":"","slot":0,"start":"0001-01-01T00:00:00Z","stop":"0001-01-01T00:00:00Z"}`,
				exportLine("ok", "w1", 3, 12, 20)},
			want: &Figures{Evaluations: 2, Slots: 1, EvalsPerS: 100, UtilSteady: 0.8333, GapP50Ms: 2, GapP99Ms: 2}},
		{name: "no result", lines: nil, errHas: "no evaluated result"},
		{name: "not JSON", lines: []string{exportLine("ok", "w1", 0, 0, 1), "run r1: 1 result"}, errHas: "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := exportFigures(strings.NewReader(strings.Join(tc.lines, "\n")))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("exportFigures = %+v, %v; want an error containing %q", got, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// The medians are taken figure by figure; the ratios are this over the
// other revision, and a zero divisor gives none; the verdicts follow the
// workload's target.
func TestComparisonMedians(t *testing.T) {
	t.Parallel()
	c := &Comparison{Workload: "noop",
		This: &Side{Runs: []*Figures{{EvalsPerS: 100, GapP99Ms: 9, LoopShare: 0.95}, {EvalsPerS: 300, GapP99Ms: 1, LoopShare: 0.5},
			{EvalsPerS: 200, GapP99Ms: 2, LoopShare: 0.92}}},
		Ref: &Side{Runs: []*Figures{{EvalsPerS: 400, GapP99Ms: 4, LoopShare: 0.8}, {EvalsPerS: 100, GapP99Ms: 0, LoopShare: 0.85},
			{EvalsPerS: 250, GapP99Ms: 0, LoopShare: 0.7}}}}
	c.This.Median, c.Ref.Median = medianFigures(c.This.Runs), medianFigures(c.Ref.Runs)
	if m := c.This.Median; m.EvalsPerS != 200 || m.GapP99Ms != 2 || m.LoopShare != 0.92 {
		t.Errorf("this median %+v", m)
	}
	c.ratios()
	if c.Ratio["evals_per_s"] != 0.8 || c.Ratio["loop_share"] != 1.15 {
		t.Errorf("ratios %v", c.Ratio)
	}
	if _, ok := c.Ratio["gap_p99_ms"]; ok {
		t.Errorf("a ratio over a zero gap: %v", c.Ratio)
	}
	c.judge()
	if !*c.Met || *c.RefMet {
		t.Errorf("noop met %v, ref met %v; want this met at 0.92 and the other missed at 0.8", *c.Met, *c.RefMet)
	}
	c.Workload = "sim"
	c.judge()
	if !*c.Met || !*c.RefMet {
		t.Errorf("sim met %v, ref met %v; want both met at gap p99 2 and 0 ms", *c.Met, *c.RefMet)
	}
}

func TestParseFlagNames(t *testing.T) {
	t.Parallel()
	usage := `Usage: evoq run [flags]

Runs a whole search.

Flags:
  -ack-wait duration
    	time without an ack (default 30s)
  -auth
    	require credentials
  -connect evoq broker --connect-file
    	connect file of an external broker
  -sim-fail float
    	share of designs  -that fail
`
	want := []string{"ack-wait", "auth", "connect", "sim-fail"}
	if got := parseFlagNames([]byte(usage)); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// A revision whose evoq run lacks a flag of the workload is refused before
// anything runs, by name.
func TestCheckFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := func(name string, flags ...string) *revision {
		script := "#!/bin/sh\necho 'Flags:' >&2\n"
		for _, f := range flags {
			script += fmt.Sprintf("echo '  -%s string' >&2\necho '    \tusage' >&2\n", f)
		}
		script += "exit 2\n"
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return &revision{label: name, bin: path}
	}
	base := []string{"dir", "listen", "log-level", "evaluator", "slots"}
	all := fake("new", append(base, "sim-fail")...)
	old := fake("old", base...)
	args := []string{"--evaluator", "sim", "--slots", "8", "--sim-fail", "0.3"}
	if err := checkFlags(context.Background(), args, all, all); err != nil {
		t.Errorf("both know every flag: %v", err)
	}
	err := checkFlags(context.Background(), args, all, old)
	if err == nil || !strings.Contains(err.Error(), "old: evoq run has no --sim-fail") {
		t.Errorf("checkFlags = %v, want old's missing --sim-fail named", err)
	}
}

func TestAgainstConfig(t *testing.T) {
	t.Parallel()
	exe := filepath.Join(t.TempDir(), "evoq")
	if err := os.WriteFile(exe, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if c := (Config{Evoq: exe, Against: "HEAD"}).withDefaults(); c.Rounds != RoundsDefault {
		t.Errorf("rounds %d, want %d", c.Rounds, RoundsDefault)
	}
	if c := (Config{Evoq: exe, Against: "HEAD", Smoke: true}).withDefaults(); c.Rounds != 1 {
		t.Errorf("smoke rounds %d, want 1", c.Rounds)
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"noop and sim", Config{Evoq: exe, Against: "HEAD~1", Workloads: []string{"noop", "sim"}}, ""},
		{"a workload without results to compare", Config{Evoq: exe, Against: "HEAD", Workloads: []string{"sim", "memory"}}, "Workloads"},
		{"with Dask", Config{Evoq: exe, Against: "HEAD", VsDask: true}, "VsDask"},
		{"no round", Config{Evoq: exe, Against: "HEAD", Rounds: -1}, "Rounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.withDefaults().validate()
			var ce *ConfigError
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("validate: %v", err)
			case tc.field != "" && (!errors.As(err, &ce) || ce.Field != tc.field):
				t.Errorf("validate = %v, want a ConfigError on %s", err, tc.field)
			}
		})
	}
}

// inRepo skips a test outside a git checkout of evoq.
func inRepo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("no git: %v", err)
	}
	if _, err := gitOut(context.Background(), "", "rev-parse", "--verify", "HEAD^{commit}"); err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
}

func TestBuildRevisionUnknown(t *testing.T) {
	t.Parallel()
	inRepo(t)
	_, err := buildRevision(context.Background(), "", "no-such-revision-of-evoq", t.TempDir(), nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Against" {
		t.Errorf("buildRevision = %v, want a ConfigError on Against", err)
	}
}

// One short round of `evoq bench --against HEAD`: HEAD is built from git,
// both binaries run noop (with the plain loop) and sim, and every figure
// comes from their exports. It times nothing.
func TestAgainstSmoke(t *testing.T) {
	t.Parallel()
	evoq := smokeEvoq(t)
	inRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Evoq: evoq, Against: "HEAD", Smoke: true, Workloads: AgainstWorkloads, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Against) != len(AgainstWorkloads) || len(rep.Rows) != 0 {
		t.Fatalf("%d comparisons and %d rows, want %d comparisons", len(rep.Against), len(rep.Rows), len(AgainstWorkloads))
	}
	for _, c := range rep.Against {
		w := findAgainst(c.Workload)
		budget, slots := argInt(w.smokeArgs, "--budget"), argInt(w.smokeArgs, "--slots")
		if c.Ref.Revision == "" || c.Ref.Label != "HEAD" || c.Met != nil {
			t.Errorf("%s: ref %+v, met %v: want HEAD's commit and no verdict", c.Workload, c.Ref, c.Met)
		}
		for _, s := range []*Side{c.This, c.Ref} {
			if len(s.Runs) != 1 || s.Median == nil {
				t.Fatalf("%s, %s: %d runs, median %v; want 1 run", c.Workload, s.Label, len(s.Runs), s.Median)
			}
			f := s.Runs[0]
			if f.Evaluations < budget || f.Slots != slots || f.EvalsPerS <= 0 || f.CPUPerEvalUs <= 0 || f.WallS <= 0 {
				t.Errorf("%s, %s: %+v; want %d evaluations or more on %d slots, a rate and CPU", c.Workload, s.Label, f, budget, slots)
			}
			if (c.Workload == "noop") != (f.LoopShare > 0) {
				t.Errorf("%s, %s: share of the plain loop %v", c.Workload, s.Label, f.LoopShare)
			}
		}
		if c.Workload == "noop" && (len(c.Loop) != 1 || c.Loop[0].Evaluations != budget) {
			t.Errorf("noop: plain loop %+v", c.Loop)
		}
		if c.Ratio["evals_per_s"] <= 0 {
			t.Errorf("%s: ratios %v", c.Workload, c.Ratio)
		}
	}
}
