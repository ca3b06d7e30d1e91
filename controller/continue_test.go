package controller

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
)

// recorded is a run's record as a controller writes it: budget 300, seed
// 7, init 30, pool 15, fail-fast 10, one retry, quarantine after 3.
func recorded(t *testing.T) *schema.Run {
	t.Helper()
	sp := mlpSpace(t)
	return &schema.Run{Run: "x", Phase: schema.PhaseRunning, Budget: 300, Space: sp.Name(), SpaceYAML: sp.Source(),
		Seed: 7, AckWait: 30 * time.Second, Init: 30, Pool: 15, Replace: "worst", Tournament: 3,
		Margin: MarginAuto, MaxDeliver: 3, FailFast: 10, ErrorRetries: new(1), QuarantineAfter: new(3),
		Checkpoints: &schema.Checkpoints{Store: schema.CheckpointDir, Dir: "/shared/ckpt", Max: 4096, Keep: schema.KeepBest, Inherit: true},
		Objectives:  []string{"fitness:max", "params:min"}, Constraints: []string{"params<=60000"}, HVRef: []float64{0, 100000},
		Variation: &schema.Variation{Crossover: 0.5, MutationRate: 0.1}}
}

func TestContinueTakesTheRecord(t *testing.T) {
	t.Parallel()
	rec := recorded(t)
	cfg, k, err := resolve(rec, Config{Run: "x"}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Budget != 300 || *cfg.Seed != 7 || cfg.Init != 30 || cfg.Pool != 15 || cfg.Tournament != 3 ||
		cfg.Replace != runstate.ReplaceWorst || cfg.Margin != MarginAuto || cfg.MaxDeliver != 3 || cfg.AckWait != 30*time.Second ||
		*cfg.ErrorRetries != 1 || *cfg.QuarantineAfter != 3 {
		t.Errorf("continued with %+v; want the record's settings", cfg)
	}
	if cfg.Space == nil || string(cfg.Space.Source()) != string(rec.SpaceYAML) {
		t.Errorf("continued without the recorded space")
	}
	if got := cfg.Objectives.String(); got != "fitness:max,params:min subject to params<=60000" || *cfg.Crossover != 0.5 || *cfg.MutationRate != 0.1 ||
		len(cfg.HVRef) != 2 || cfg.HVRef[1] != 100000 {
		t.Errorf("continued with objectives %q, hv ref %v, crossover %v, mutation rate %v; want the record's", got, cfg.HVRef, *cfg.Crossover, *cfg.MutationRate)
	}
	if len(k.Changes) != 0 || len(k.Recorded) != 0 {
		t.Errorf("changes %v, recorded now %v; want none", k.Changes, k.Recorded)
	}
	taken := strings.Join(k.Taken, " ")
	for _, want := range []string{"budget=300", "seed=7", "init=30", "pool=15", "tournament=3", "replace=worst", "space=mlp-spirals", "margin=auto", "ack_wait=30s",
		"error_retries=1", "quarantine_after=3", "checkpoint_dir=/shared/ckpt", "max_checkpoint=4096", "keep_checkpoints=best", "inherit=true",
		"objectives=fitness:max,params:min_subject_to_params<=60000", "crossover=0.5", "mutation_rate=0.1"} {
		if !strings.Contains(taken, want) {
			t.Errorf("taken %q lacks %s", taken, want)
		}
	}
}

func TestContinueGivenSettings(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	other, err := space.Parse([]byte("name: other\nparams:\n  x: {type: int, min: 1, max: 9}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		edit    func(*Config)
		field   string // of the SettingError; "" for none
		changes string // the changes made, as setting:from:to
	}{
		{"the same values", func(c *Config) {
			c.Budget, c.Seed, c.Init, c.Pool, c.Replace, c.Tournament = 300, new(uint64(7)), 30, 15, runstate.ReplaceWorst, 3
		}, "", ""},
		{"the same space", func(c *Config) { c.Space = mlpSpace(t) }, "", ""},
		{"another seed", func(c *Config) { c.Seed = new(uint64(9)) }, "Seed", ""},
		{"seed 0 is a seed", func(c *Config) { c.Seed = new(uint64(0)) }, "Seed", ""},
		{"another init", func(c *Config) { c.Init = 20 }, "Init", ""},
		{"another pool", func(c *Config) { c.Pool = 10 }, "Pool", ""},
		{"another replace", func(c *Config) { c.Replace = runstate.ReplaceOldest }, "Replace", ""},
		{"another tournament", func(c *Config) { c.Tournament = 2 }, "Tournament", ""},
		{"another space", func(c *Config) { c.Space = other }, "Space", ""},
		{"seeded from a run", func(c *Config) { c.SeedsFrom = "old" }, "SeedsFrom", ""},
		{"a smaller budget", func(c *Config) { c.Budget = 250 }, "Budget", ""},
		{"a larger budget", func(c *Config) { c.Budget = 400 }, "", "budget:300:400"},
		{"a margin", func(c *Config) { c.Margin = 8 }, "", "margin:auto:8"},
		{"an ack wait", func(c *Config) { c.AckWait = time.Minute }, "", "ack_wait:30s:1m0s"},
		{"a redelivery limit", func(c *Config) { c.MaxDeliver = 5 }, "", "max_deliver:3:5"},
		{"a fail-fast count", func(c *Config) { c.FailFast = 50 }, "", "fail_fast:10:50"},
		{"fail-fast off", func(c *Config) { c.FailFast = runstate.FailFastOff }, "", "fail_fast:10:off"},
		{"the same retries", func(c *Config) { c.ErrorRetries = new(1) }, "", ""},
		{"other retries", func(c *Config) { c.ErrorRetries = new(2) }, "ErrorRetries", ""},
		{"retries off", func(c *Config) { c.ErrorRetries = new(0) }, "ErrorRetries", ""},
		{"a quarantine threshold", func(c *Config) { c.QuarantineAfter = new(5) }, "", "quarantine_after:3:5"},
		{"quarantine off", func(c *Config) { c.QuarantineAfter = new(0) }, "", "quarantine_after:3:0"},
		{"the same objectives", func(c *Config) { c.Objectives = recordedObjectives(t) }, "", ""},
		{"other objectives", func(c *Config) {
			c.Objectives = recordedObjectives(t)
			c.Objectives.Objs = c.Objectives.Objs[:1]
		}, "Objectives", ""},
		{"no constraint", func(c *Config) {
			c.Objectives = recordedObjectives(t)
			c.Objectives.Cons = nil
		}, "Objectives", ""},
		{"another reference point", func(c *Config) { c.HVRef = []float64{0.5, 90000} }, "", "hv_ref:0,100000:0.5,90000"},
		{"the same operators", func(c *Config) { c.Crossover, c.MutationRate = new(0.5), new(0.1) }, "", ""},
		{"another crossover", func(c *Config) { c.Crossover = new(0.9) }, "Crossover", ""},
		{"another mutation rate", func(c *Config) { c.MutationRate = new(0.0) }, "MutationRate", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Run: "x"}
			tt.edit(&cfg)
			got, k, err := resolve(recorded(t), cfg, func() time.Time { return now })
			var se *SettingError
			if tt.field != "" {
				if !errors.As(err, &se) || se.Field != tt.field || !errors.Is(err, ErrConfig) {
					t.Fatalf("resolve = %v; want a SettingError on %s", err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("resolve = %v", err)
			}
			var changes []string
			for _, c := range k.Changes {
				if !c.At.Equal(now) {
					t.Errorf("change %+v not dated now", c)
				}
				changes = append(changes, c.Setting+":"+c.From+":"+c.To)
			}
			if strings.Join(changes, " ") != tt.changes {
				t.Errorf("changes %v, want %q", changes, tt.changes)
			}
			if tt.changes == "budget:300:400" && got.Budget != 400 {
				t.Errorf("budget %d after raising it to 400", got.Budget)
			}
		})
	}
}

func recordedObjectives(t *testing.T) Objectives {
	t.Helper()
	o, err := runstate.ObjectivesOf(recorded(t))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A record that predates a setting leaves it to the flags or the
// defaults, and says it is recorded from now on; except ErrorRetries,
// which says which results count: a run recorded before it counted
// without retries and goes on so.
func TestContinueOlderRecord(t *testing.T) {
	t.Parallel()
	rec := recorded(t)
	rec.Tournament, rec.Margin, rec.MaxDeliver, rec.FailFast, rec.ErrorRetries, rec.QuarantineAfter = 0, 0, 0, 0, nil, nil
	rec.Checkpoints, rec.Variation, rec.Objectives, rec.Constraints, rec.HVRef = nil, nil, nil, nil, nil
	cfg, k, err := resolve(rec, Config{Run: "x", Tournament: 5, ExpectSlots: 40}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tournament != 5 || cfg.MaxDeliver != 3 || cfg.Margin != MarginAuto || cfg.FailFast != 40 || *cfg.QuarantineAfter != QuarantineAfterDefault {
		t.Errorf("tournament %d, max deliver %d, margin %d, fail-fast %d, quarantine after %d; want the given 5 and the defaults (fail-fast: the 40 expected slots)",
			cfg.Tournament, cfg.MaxDeliver, cfg.Margin, cfg.FailFast, *cfg.QuarantineAfter)
	}
	if *cfg.ErrorRetries != 0 || cfg.Rules().ErrorRetries != 0 {
		t.Errorf("error retries %d; want 0, the rule the run's results were counted by", *cfg.ErrorRetries)
	}
	if got := strings.Join(k.Recorded, " "); got != "tournament error_retries checkpoints variation quarantine_after margin max_deliver fail_fast" {
		t.Errorf("recorded now: %q", got)
	}
	// A run recorded before operators were kept made its mutants by
	// altering one parameter of one parent, and goes on so; it ranked by
	// fitness alone.
	if *cfg.Crossover != 0 || *cfg.MutationRate != 0 || cfg.Objectives.Pareto() {
		t.Errorf("crossover %v, mutation rate %v, objectives %s; want 0, 0 (one parameter) and fitness alone", *cfg.Crossover, *cfg.MutationRate, cfg.Objectives)
	}
	if *cfg.Novel {
		t.Error("novel children for a run recorded before they were kept: its children may repeat evaluated designs, and go on so")
	}
	if _, _, err := resolve(rec, Config{Run: "x", Novel: new(true)}, time.Now); !errors.As(err, new(*SettingError)) {
		t.Errorf("--novel given for a run recorded without it: %v; want a SettingError", err)
	}
	// A run recorded with operators but before Novel was kept: the same.
	rec.Variation = &schema.Variation{Crossover: 0.9}
	if cfg, _, err := resolve(rec, Config{Run: "x"}, time.Now); err != nil || *cfg.Novel || *cfg.Crossover != 0.9 {
		t.Errorf("a record with operators and no novel: %v, novel %v; want false, crossover 0.9", err, cfg.Novel)
	}
	if cfg, _, err := resolve(rec, Config{Run: "x"}, time.Now); err != nil || cfg.Tournament != TournamentLegacy {
		t.Errorf("no tournament given: %v, tournament %d; want %d, the default when the run was recorded", err, cfg.Tournament, TournamentLegacy)
	}
	// That default was at most the pool: a run of a pool of 2 continues.
	small := *rec
	small.Pool, small.Init = 2, min(small.Init, 2)
	if cfg, _, err := resolve(&small, Config{Run: "x"}, time.Now); err != nil || cfg.Tournament != 2 {
		t.Errorf("a pool of 2 recorded before its tournament: %v, tournament %d; want 2", err, cfg.Tournament)
	}
	if _, _, err := resolve(rec, Config{Run: "x", Crossover: new(0.5)}, time.Now); !errors.As(err, new(*SettingError)) {
		t.Errorf("crossover given for a run recorded without operators: %v; want a SettingError", err)
	}
	var se *SettingError
	if _, _, err := resolve(rec, Config{Run: "x", ErrorRetries: new(1)}, time.Now); !errors.As(err, &se) || se.Field != "ErrorRetries" {
		t.Errorf("retries given for a run recorded without them: %v; want a SettingError", err)
	}
	if _, _, err := resolve(rec, Config{Run: "x", ErrorRetries: new(0)}, time.Now); err != nil {
		t.Errorf("--error-retries 0 for a run recorded without retries: %v", err)
	}
}

// Seeds are taken from the record, not picked again from the earlier run.
func TestContinueSeeds(t *testing.T) {
	t.Parallel()
	rec := recorded(t)
	sp := mlpSpace(t)
	rec.SeedsFrom = "old"
	for range 3 {
		rec.Seeds = append(rec.Seeds, sp.Random(rand.New(rand.NewPCG(1, uint64(len(rec.Seeds))))))
	}
	cfg, _, err := resolve(rec, Config{Run: "x", SeedsFrom: "old", Seeds: rec.Seeds[:1]}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Seeds) != 3 || cfg.SeedsFrom != "old" {
		t.Errorf("%d seeds from %q; want the record's 3 from old", len(cfg.Seeds), cfg.SeedsFrom)
	}
	if _, _, err := resolve(rec, Config{Run: "x", SeedsFrom: "another"}, time.Now); err == nil {
		t.Error("seeds from another run were accepted")
	}
}

func TestContinueNewRun(t *testing.T) {
	t.Parallel()
	cfg, k, err := resolve(nil, Config{Run: "x", Space: mlpSpace(t)}, time.Now)
	if err != nil || k != nil {
		t.Fatalf("resolve = %v, %v", k, err)
	}
	if cfg.Budget != BudgetDefault || *cfg.Seed != SeedDefault {
		t.Errorf("new run: budget %d seed %d; want the defaults", cfg.Budget, *cfg.Seed)
	}
	if _, _, err := resolve(nil, Config{Run: "x"}, time.Now); !errors.Is(err, ErrConfig) {
		t.Errorf("a new run without a space: %v; want ErrConfig", err)
	}
}

// RecordSettings reads back what a record holds, in the continuation's
// form.
func TestRecordSettings(t *testing.T) {
	t.Parallel()
	got := strings.Join(runstate.RecordSettings(recorded(t)), " ")
	want := "space=mlp-spirals budget=300 seed=7 init=30 pool=15 tournament=3 max_deliver=3 replace=worst margin=auto fail_fast=10 ack_wait=30s error_retries=1 quarantine_after=3" +
		" checkpoint_dir=/shared/ckpt max_checkpoint=4096 keep_checkpoints=best inherit=true" +
		" objectives=fitness:max,params:min constraint=params<=60000 hv_ref=0,100000 crossover=0.5 mutation_rate=0.1"
	if got != want {
		t.Errorf("RecordSettings = %q\nwant %q", got, want)
	}
}

// A run continued after it failed fast keeps the designs made up for the
// failed start on top of its budget: the budget given is compared with the
// one given before, and a raise keeps them too.
func TestContinueMadeUp(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		given  int
		budget int    // continued with; 0: refused
		change string // setting:from:to, or ""
	}{
		{"not given", 0, 312, ""},
		{"the budget given before", 300, 312, ""},
		{"a raise", 400, 412, "budget:300:400"},
		{"less than given before", 299, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := recorded(t)
			rec.Budget, rec.MadeUp = 312, 12
			cfg, k, err := resolve(rec, Config{Run: "x", Budget: tt.given}, func() time.Time { return now })
			if tt.budget == 0 {
				var se *SettingError
				if !errors.As(err, &se) || se.Field != "Budget" || se.Recorded != "300" {
					t.Fatalf("resolve = %v; want a SettingError on Budget naming 300", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var changes []string
			for _, c := range k.Changes {
				changes = append(changes, c.Setting+":"+c.From+":"+c.To)
			}
			if cfg.Budget != tt.budget || strings.Join(changes, " ") != tt.change {
				t.Errorf("budget %d, changes %v; want %d, %q", cfg.Budget, changes, tt.budget, tt.change)
			}
		})
	}
}

// A run recorded with seed 0 continues with seed 0, and refuses another.
func TestContinueSeedZero(t *testing.T) {
	t.Parallel()
	rec := recorded(t)
	rec.Seed = 0
	cfg, _, err := resolve(rec, Config{Run: "x"}, time.Now)
	if err != nil || cfg.Seed == nil || *cfg.Seed != 0 {
		t.Fatalf("continued with seed %v, %v; want the recorded 0", cfg.Seed, err)
	}
	var se *SettingError
	if _, _, err := resolve(rec, Config{Run: "x", Seed: new(uint64(5))}, time.Now); !errors.As(err, &se) || se.Field != "Seed" {
		t.Fatalf("seed 5 against a recorded 0: %v; want a SettingError on Seed", err)
	}
}

// The checkpoint store is fixed for the run; its limit, what it keeps and
// inheritance may change, and a change is recorded.
func TestContinueCheckpoints(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cfg, k, err := resolve(recorded(t), Config{Run: "x", Checkpoints: CheckpointConfig{Max: 8192, Inherit: new(false)}}, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Checkpoints.record()
	want := schema.Checkpoints{Store: schema.CheckpointDir, Dir: "/shared/ckpt", Max: 8192, Keep: schema.KeepBest, Inherit: false}
	if *got != want {
		t.Errorf("continued with %+v, want %+v", *got, want)
	}
	changes := map[string]string{}
	for _, c := range k.Changes {
		changes[c.Setting] = c.From + "->" + c.To
	}
	if changes["max_checkpoint"] != "4096->8192" || changes["inherit"] != "true->false" || len(changes) != 2 {
		t.Errorf("changes %v; want max_checkpoint and inherit", changes)
	}
	for _, dir := range []string{"/elsewhere"} {
		var se *SettingError
		if _, _, err := resolve(recorded(t), Config{Run: "x", Checkpoints: CheckpointConfig{Dir: dir}}, time.Now); !errors.As(err, &se) || se.Field != "Checkpoints.Dir" {
			t.Errorf("another checkpoint dir %s: %v, want a SettingError on Checkpoints.Dir", dir, err)
		}
	}
	rec := recorded(t)
	rec.Checkpoints = &schema.Checkpoints{Store: schema.CheckpointObject, Max: 4096, Keep: schema.KeepPool}
	var se *SettingError
	if _, _, err := resolve(rec, Config{Run: "x", Checkpoints: CheckpointConfig{Dir: "/shared/ckpt"}}, time.Now); !errors.As(err, &se) || !strings.Contains(se.Error(), "object store") {
		t.Errorf("a checkpoint dir for a run in the object store: %v", err)
	}
}

// The evaluator is taken from the record; another is refused, unless the
// run failed fast, where a fixed one is the way out and is recorded as a
// change; a record without one records the given one from now on.
func TestContinueEvaluator(t *testing.T) {
	t.Parallel()
	cmd := &schema.Evaluator{Cmd: "python3 ev.py", Persistent: true, Timeout: time.Minute, StopGrace: 10 * time.Second}
	other := &schema.Evaluator{Builtin: schema.EvaluatorMLP, StopGrace: 10 * time.Second}
	tests := []struct {
		name        string
		rec, given  *schema.Evaluator
		phase       schema.Phase
		want        *schema.Evaluator
		refused     bool
		change      bool
		recordedNow bool
	}{
		{"taken", cmd, nil, schema.PhaseRunning, cmd, false, false, false},
		{"the same given", cmd, cmd, schema.PhaseRunning, cmd, false, false, false},
		{"another refused", cmd, other, schema.PhaseRunning, nil, true, false, false},
		{"a failed run takes a fixed one", cmd, other, schema.PhaseFailed, other, false, true, false},
		{"none recorded, none given", nil, nil, schema.PhaseRunning, nil, false, false, false},
		{"none recorded, one given", nil, cmd, schema.PhaseRunning, cmd, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := recorded(t)
			rec.Evaluator, rec.Phase = tt.rec, tt.phase
			cfg, k, err := resolve(rec, Config{Run: "x", Evaluator: tt.given}, time.Now)
			var se *SettingError
			if tt.refused {
				if !errors.As(err, &se) || se.Field != "Evaluator" || !strings.Contains(err.Error(), "python3 ev.py") {
					t.Fatalf("err %v; want a SettingError on Evaluator naming the recorded command", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (cfg.Evaluator == nil) != (tt.want == nil) || (tt.want != nil && cfg.Evaluator.String() != tt.want.String()) {
				t.Errorf("evaluator %v, want %v", cfg.Evaluator, tt.want)
			}
			changed := len(k.Changes) == 1 && k.Changes[0].Setting == "evaluator"
			if changed != tt.change {
				t.Errorf("changes %+v; want an evaluator change: %v", k.Changes, tt.change)
			}
			if got := strings.Contains(strings.Join(k.Recorded, " "), "evaluator"); got != tt.recordedNow {
				t.Errorf("recorded now %v; want evaluator among them: %v", k.Recorded, tt.recordedNow)
			}
		})
	}
}

// A restart given the limits a run was started with keeps the ones `evoq
// run extend` raised since (a requeued job passes its first flags), while
// a budget below a raise made by a restart is still refused.
func TestContinueKeepsExtended(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	deadline := now.Add(time.Hour)
	tests := []struct {
		name       string
		via        string
		given      Config
		budget     int           // continued with; 0: refused
		timeBudget time.Duration // continued with
		deadline   time.Time
	}{
		{"the first flags after run extend", schema.ViaExtend, Config{Budget: 300, TimeBudget: time.Hour}, 400, 2 * time.Hour, deadline},
		{"a larger budget than run extend's", schema.ViaExtend, Config{Budget: 500}, 500, 2 * time.Hour, deadline},
		{"a longer time budget than run extend's", schema.ViaExtend, Config{TimeBudget: 3 * time.Hour}, 400, 3 * time.Hour, now.Add(3 * time.Hour)},
		{"the first budget after a restart's raise", "", Config{Budget: 300}, 0, 0, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := recorded(t)
			rec.Budget, rec.TimeBudget, rec.Deadline = 400, 2*time.Hour, deadline
			rec.Changes = []schema.Change{{At: now, Setting: "budget", From: "300", To: "400", Via: tt.via},
				{At: now, Setting: "time_budget", From: "1h0m0s", To: "2h0m0s", Via: tt.via}}
			given := tt.given
			given.Run = "x"
			cfg, _, err := resolve(rec, given, func() time.Time { return now })
			if tt.budget == 0 {
				var se *SettingError
				if !errors.As(err, &se) || se.Field != "Budget" {
					t.Fatalf("resolve = %v; want a SettingError on Budget", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Budget != tt.budget || cfg.TimeBudget != tt.timeBudget || !cfg.Deadline.Equal(tt.deadline) {
				t.Errorf("budget %d, time budget %s, deadline %s; want %d, %s, %s", cfg.Budget, cfg.TimeBudget, cfg.Deadline, tt.budget, tt.timeBudget, tt.deadline)
			}
		})
	}
}
