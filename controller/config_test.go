package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/mlp"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
)

func mlpSpace(t testing.TB) *space.Space {
	t.Helper()
	s, err := space.Parse(mlp.DefaultSpace)
	if err != nil {
		t.Fatalf("parse the mlp space: %v", err)
	}
	return s
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	sp := mlpSpace(t)
	tests := []struct {
		name string
		edit func(*Config)
		want string // in the error; "" for a valid config
	}{
		{"defaults", func(*Config) {}, ""},
		{"small run", func(c *Config) { c.Budget, c.Init, c.Pool, c.Tournament = 1, 1, 1, 1 }, ""},
		{"pool equal to init", func(c *Config) { c.Init, c.Pool = 8, 8 }, ""},
		{"budget equal to init", func(c *Config) { c.Budget, c.Init = 20, 20 }, ""},
		{"tournament equal to pool", func(c *Config) { c.Pool, c.Tournament = 4, 4 }, ""},
		{"replace oldest", func(c *Config) { c.Replace = runstate.ReplaceOldest }, ""},
		{"ack wait three heartbeats", func(c *Config) { c.AckWait = broker.MinAckWait }, ""},
		{"max deliver 0 is the default", func(c *Config) { c.MaxDeliver = 0 }, ""},
		{"max deliver 1", func(c *Config) { c.MaxDeliver = 1 }, ""},
		{"explicit margin", func(c *Config) { c.Margin = 7 }, ""},
		{"expect and wait slots", func(c *Config) { c.ExpectSlots, c.WaitSlots = 552, 552 }, ""},
		{"empty run", func(c *Config) { c.Run = "" }, "Run"},
		{"run with a dot", func(c *Config) { c.Run = "a.b" }, `Run "a.b"`},
		{"run with a wildcard", func(c *Config) { c.Run = ">" }, "Run"},
		{"no space", func(c *Config) { c.Space = nil }, "Space: no search space"},
		{"negative budget", func(c *Config) { c.Budget = -1 }, "Budget -1"},
		{"negative init", func(c *Config) { c.Init = -1 }, "Init -1"},
		{"negative pool", func(c *Config) { c.Pool = -2 }, "Pool -2"},
		{"pool larger than init", func(c *Config) { c.Init, c.Pool = 5, 10 }, "Pool 10: is larger than Init 5"},
		{"default pool larger than init", func(c *Config) { c.Init = 5 }, "Pool 10: is larger than Init 5"},
		{"budget smaller than init", func(c *Config) { c.Budget, c.Init = 10, 20 }, "Budget 10: is smaller than Init 20"},
		{"default budget smaller than init", func(c *Config) { c.Init, c.Pool = 500, 10 }, "Budget 200: is smaller than Init 500"},
		{"tournament larger than pool", func(c *Config) { c.Pool, c.Tournament = 4, 5 }, "Tournament 5: want 1..Pool (4)"},
		{"negative tournament", func(c *Config) { c.Tournament = -1 }, "Tournament -1"},
		{"unknown replace", func(c *Config) { c.Replace = "best" }, `Replace "best"`},
		{"margin auto", func(c *Config) { c.Margin = MarginAuto }, ""},
		{"negative margin", func(c *Config) { c.Margin = -2 }, "Margin -2"},
		{"negative expect slots", func(c *Config) { c.ExpectSlots = -1 }, "ExpectSlots -1"},
		{"negative wait slots", func(c *Config) { c.WaitSlots = -1 }, "WaitSlots -1"},
		{"ack wait under three heartbeats", func(c *Config) { c.AckWait = 2999 * time.Millisecond }, "AckWait 2.999s: need at least 3s"},
		{"negative ack wait", func(c *Config) { c.AckWait = -time.Second }, "AckWait -1s"},
		{"negative max deliver", func(c *Config) { c.MaxDeliver = -1 }, "MaxDeliver -1"},
		{"max step gene", func(c *Config) {
			c.EarlyStop = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: "epochs"}
		}, ""},
		{"max step gene of a choice of numbers", func(c *Config) {
			c.EarlyStop = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: "batch"}
		}, ""},
		{"max step gene not in the space", func(c *Config) {
			c.EarlyStop = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: "epoch"}
		}, `EarlyStop.MaxStepGene "epoch": is not a number parameter at the top of the search space`},
		{"cost tie", func(c *Config) { c.CostTie = new(0.01) }, ""},
		{"negative cost tie", func(c *Config) { c.CostTie = new(-0.01) }, "CostTie -0.01: want a fitness difference"},
		{"cost tie with several objectives", func(c *Config) {
			c.CostTie = new(0.01)
			o, err := runstate.ObjectivesOf(&schema.Run{Objectives: []string{"fitness:max", "params:min"}})
			if err != nil {
				panic(err)
			}
			c.Objectives = o
		}, "CostTie 0.01: a pool ranked by several objectives"},
		{"select reached", func(c *Config) {
			c.EarlyStop = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, Select: schema.SelectReached}
		}, ""},
		{"unknown select", func(c *Config) {
			c.EarlyStop = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, Select: "best"}
		}, `EarlyStop.Select "best": want off, reached or promoted`},
		{"select reached with several objectives", func(c *Config) {
			c.EarlyStop = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, Select: schema.SelectReached}
			o, err := runstate.ObjectivesOf(&schema.Run{Objectives: []string{"fitness:max", "params:min"}})
			if err != nil {
				panic(err)
			}
			c.Objectives = o
		}, "EarlyStop.Select"},
		{"max step gene not a number", func(c *Config) {
			c.EarlyStop = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: "layers"}
		}, "EarlyStop.MaxStepGene"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Config{Run: "run-1", Space: sp}
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var fe *schema.FieldError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a FieldError matching ErrConfig", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	sp := mlpSpace(t)
	tests := []struct {
		name  string
		in    Config
		check func(Config) bool
		want  string
	}{
		{"budget", Config{}, func(c Config) bool { return c.Budget == BudgetDefault }, "Budget 200"},
		{"init", Config{}, func(c Config) bool { return c.Init == InitDefault }, "Init 20"},
		{"pool", Config{}, func(c Config) bool { return c.Pool == PoolDefault }, "Pool 10"},
		{"tournament", Config{}, func(c Config) bool { return c.Tournament == TournamentDefault }, "Tournament 3"},
		{"tournament follows a small pool", Config{Init: 2, Pool: 2}, func(c Config) bool { return c.Tournament == 2 }, "Tournament 2"},
		{"replace", Config{}, func(c Config) bool { return c.Replace == runstate.ReplaceWorst }, "Replace worst"},
		{"expect slots", Config{}, func(c Config) bool { return c.ExpectSlots == 1 }, "ExpectSlots 1"},
		{"ack wait", Config{}, func(c Config) bool { return c.AckWait == broker.AckWaitDefault }, "AckWait 30s"},
		{"max deliver", Config{}, func(c Config) bool { return c.MaxDeliver == broker.MaxDeliverDefault }, "MaxDeliver 3"},
		{"negative max deliver kept", Config{MaxDeliver: -1}, func(c Config) bool { return c.MaxDeliver == -1 }, "MaxDeliver -1"},
		{"wait slots timeout", Config{}, func(c Config) bool { return c.WaitSlotsTimeout == WaitSlotsTimeoutDefault }, "WaitSlotsTimeout 1m"},
		{"progress", Config{}, func(c Config) bool { return c.Progress == ProgressDefault }, "Progress 5s"},
		{"margin auto", Config{}, func(c Config) bool { return c.Margin == MarginAuto }, "Margin MarginAuto"},
		{"seed", Config{}, func(c Config) bool { return c.Seed != nil && *c.Seed == SeedDefault }, "Seed 1"},
		{"wait slots stay off", Config{}, func(c Config) bool { return c.WaitSlots == 0 }, "WaitSlots 0"},
		{"clock", Config{}, func(c Config) bool { return c.Now != nil && time.Since(c.Now()) < time.Minute }, "Now time.Now"},
		{"logger", Config{}, func(c Config) bool { return c.Logger != nil }, "a Logger"},
		{"set values kept", Config{Budget: 7, Init: 3, Pool: 2, Tournament: 1, Replace: runstate.ReplaceOldest, AckWait: 2 * time.Second},
			func(c Config) bool {
				return c.Budget == 7 && c.Init == 3 && c.Pool == 2 && c.Tournament == 1 && c.Replace == runstate.ReplaceOldest && c.AckWait == 2*time.Second
			}, "the values set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := tt.in
			in.Run, in.Space = "run-1", sp
			if got := in.withDefaults(); !tt.check(got) {
				t.Errorf("withDefaults = %+v, want %s", got, tt.want)
			}
		})
	}
}

func TestMarginFor(t *testing.T) {
	t.Parallel()
	tests := []struct{ slots, want int }{
		{0, 2}, {1, 2}, {8, 2}, {40, 2}, {41, 3}, {60, 3}, {61, 4}, {100, 5}, {552, 28}, {1000, 50},
	}
	for _, tt := range tests {
		if got := runstate.MarginFor(tt.slots); got != tt.want {
			t.Errorf("MarginFor(%d) = %d, want %d", tt.slots, got, tt.want)
		}
	}
}

func TestConfigFields(t *testing.T) {
	t.Parallel()
	c := Config{Run: "run-1", Space: mlpSpace(t)}.withDefaults()
	f := c.Fields()
	if f["run"] != "run-1" || f["space"] != "mlp-spirals" || f["budget"] != BudgetDefault || f["pool"] != PoolDefault {
		t.Errorf("Fields = %v", f)
	}
	if m := f["margin"]; m != "auto (5% of live slots, >= 2)" {
		t.Errorf("margin field = %v, want the auto text", m)
	}
	c.Margin = 4
	if m := c.Fields()["margin"]; m != "4" {
		t.Errorf("margin field = %v, want 4", m)
	}
}
