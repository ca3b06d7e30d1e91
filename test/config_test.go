package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Bad configuration fails before anything starts, with exit code 2 and a
// message naming the flag; no store is created.
func TestBadConfigFailsBeforeStart(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	write(t, bad, "params:\n  lr: {type: float, min: 1, max: 0.1}\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"pool above init", []string{"--pool", "10", "--init", "5"}, "--pool 10: is larger than --init 5"},
		{"budget below init", []string{"--budget", "3", "--init", "5", "--pool", "2"}, "--budget 3: is smaller than --init 5"},
		{"no slots", []string{"--slots", "0"}, "--slots 0"},
		{"unknown evaluator", []string{"--evaluator", "gpt"}, `--evaluator "gpt"`},
		{"malformed space", []string{"--config", bad}, "params.lr"},
		{"missing space", []string{"--config", bad + ".missing"}, "--config"},
		{"bad replace", []string{"--replace", "random"}, `--replace "random"`},
		{"more workers than slots", []string{"--workers", "3", "--slots", "2"}, "--workers 3 is more than --slots 2"},
		{"sim-fail out of range", []string{"--sim-fail", "1.5"}, "--sim-fail 1.5"},
		{"bad listen", []string{"--listen", "localhost"}, "--listen"},
		{"bad run id", []string{"--run", "a.b"}, "--run"},
		{"unknown flag", []string{"--bogus"}, "bogus"},
		{"evaluator and command", []string{"--evaluator", "sim", "--eval-cmd", "true"}, "--eval-cmd"},
		{"zero max-deliver", []string{"--max-deliver", "0"}, "--max-deliver 0"},
		{"short ack wait", []string{"--ack-wait", "2s"}, "--ack-wait 2s: need at least 3s"},
		{"zero budget", []string{"--budget", "0"}, "--budget 0: need at least 1"},
		{"tournament above pool", []string{"--tournament", "6", "--pool", "5"}, "--tournament 6: want 1..--pool (5)"},
		{"negative fail-fast", []string{"--fail-fast", "-1"}, "--fail-fast -1: must be >= 0 (0 turns the check off)"},
		{"max-step-gene alone", []string{"--max-step-gene", "epochs"}, "--max-step-gene needs --early-stop median or asha"},
		{"rung-select alone", []string{"--rung-select", "reached"}, "--rung-select needs --early-stop median or asha"},
		{"rung-select without a rule", []string{"--early-stop", "none", "--rung-select", "off"}, "--rung-select needs --early-stop median or asha, not none"},
		{"unknown rung-select", []string{"--early-stop", "asha", "--rung-select", "best"}, `--rung-select "best": want off, reached or promoted`},
		{"rung-select reached with objectives", []string{"--early-stop", "asha", "--rung-select", "reached", "--objectives", "fitness:max,params:min"},
			`--rung-select "reached": a stopped design has no measured objectives`},
		{"cost-tie with objectives", []string{"--cost-tie", "0.01", "--objectives", "fitness:max,params:min"},
			"--cost-tie 0.01: a pool ranked by several objectives or constraints compares its members by rank"},
		{"brackets alone", []string{"--brackets", "3"}, "--brackets needs --early-stop median or asha"},
		{"brackets with median", []string{"--early-stop", "median", "--brackets", "3"}, "--brackets 3 needs --early-stop asha"},
		{"zero brackets", []string{"--early-stop", "asha", "--brackets", "0"}, "--brackets 0: need at least 1"},
		{"brackets past the rungs", []string{"--early-stop", "asha", "--max-step", "27", "--eta", "3", "--brackets", "5"},
			"--brackets 5: the rungs below MaxStep 27 ([1 3 9]) make at most 4 brackets"},
		{"max-step-gene not in the space", []string{"--config", filepath.Join("testdata", "epochs", "space.yaml"), "--early-stop", "asha", "--max-step-gene", "epoch"},
			`--max-step-gene "epoch": is not a number parameter at the top of the search space`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "store")
			r := evoq(t, time.Minute, append([]string{"run", "--dir", dir, "--listen", "127.0.0.1:0"}, tc.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and a message containing %q", r.code, r.stderr, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("store %s was created before the configuration was checked", dir)
			}
		})
	}
}

// Every default is valid: the default run needs no flag and improves on
// its random designs (the README's quick start).
func TestDefaultRunImproves(t *testing.T) {
	t.Parallel()
	s, _ := runJSON(t, 5*time.Minute)
	if s.Evaluations != 200 || s.BestFitness == nil || s.BestRandomFitness == nil {
		t.Fatalf("summary %+v", s)
	}
	if *s.BestFitness <= *s.BestRandomFitness {
		t.Fatalf("best accuracy %.4f does not beat the best random design %.4f", *s.BestFitness, *s.BestRandomFitness)
	}
	if _, ok := s.Best["layers"]; !ok {
		t.Fatalf("best design has no architecture: %v", s.Best)
	}
}
