package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
)

// The warning of a rule that knows no design's end, and its absence when
// MaxStep or MaxStepGene tells it.
func TestEarlyStopWarning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule *schema.EarlyStop
		warn bool
	}{
		{nil, false},
		{&schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3}, true},
		{&schema.EarlyStop{Rule: schema.RuleMedian, MinStep: 2, Eta: 2}, true},
		{&schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, MaxStep: 27}, false},
		{&schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: "epochs"}, false},
	} {
		w := EarlyStopWarning(tc.rule)
		if (w != "") != tc.warn {
			t.Errorf("%s: warning %q, want one: %v", runstate.EarlyStopText(tc.rule), w, tc.warn)
		}
		if tc.warn && (!strings.Contains(w, "--max-step-gene") || !strings.Contains(w, `"last"`)) {
			t.Errorf("warning %q does not say what to do", w)
		}
	}
}

// The gene that holds the designs' lengths is part of the recorded rule:
// a continued run takes it, and refuses another one, or none, given.
func TestContinueMaxStepGene(t *testing.T) {
	t.Parallel()
	rule := func(gene string) *schema.EarlyStop {
		return &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: gene}
	}
	for _, tc := range []struct {
		name  string
		given *schema.EarlyStop
		ok    bool
	}{
		{"taken from the record", nil, true},
		{"the same", rule("epochs"), true},
		{"another gene", rule("batch"), false},
		{"none", rule(""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := recorded(t)
			rec.EarlyStop = rule("epochs")
			cfg, _, err := resolve(rec, Config{Run: "x", EarlyStop: tc.given}, time.Now)
			if !tc.ok {
				var se *SettingError
				if !errors.As(err, &se) || se.Field != "EarlyStop" || !strings.Contains(err.Error(), "max_step_gene=epochs") {
					t.Fatalf("resolve = %v; want a SettingError on EarlyStop naming the recorded gene", err)
				}
				return
			}
			if err != nil || cfg.EarlyStop == nil || cfg.EarlyStop.MaxStepGene != "epochs" {
				t.Fatalf("resolve = %+v, %v; want the recorded gene", cfg.EarlyStop, err)
			}
		})
	}
}

// The controller answers a stop question only into an inbox of the run's
// workers, or a plain inbox of a client without auth: never into a
// subject the asker names, nor another run's inboxes.
func TestAnswerable(t *testing.T) {
	t.Parallel()
	for reply, want := range map[string]bool{
		"_INBOX.evoq-worker-r.abc.1": true,
		"_INBOX.abc.1":               true,
		"_INBOX.evoq-worker-x.abc.1": false,
		"_INBOX.evoq-reader-r.abc":   false,
		"evoq.design.r":              false,
		"$JS.API.STREAM.PURGE.X":     false,
		"":                           false,
	} {
		if got := broker.Answerable(reply, "r"); got != want {
			t.Errorf("answerable(%q) = %v, want %v", reply, got, want)
		}
	}
}

// A run's parent selection (EarlyStop.Select) is fixed for the run: a
// restart takes it from the record, or refuses another; a run recorded
// before the field keeps its pool to designs that trained to their end,
// whatever the default of new runs; a new run without one takes
// SelectDefault.
func TestContinueSelect(t *testing.T) {
	t.Parallel()
	rule := func(sel string) *schema.EarlyStop {
		return &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, Select: sel}
	}
	for _, tc := range []struct {
		name     string
		recorded *schema.EarlyStop // nil: a new run
		given    *schema.EarlyStop
		want     string // the resolved Select; "" for a SettingError
	}{
		{"new run, default", nil, rule(""), SelectDefault},
		{"new median run, default", nil, &schema.EarlyStop{Rule: schema.RuleMedian, MinStep: 1, Eta: 3}, SelectMedianDefault},
		{"new run, reached", nil, rule(schema.SelectReached), schema.SelectReached},
		{"new run, off", nil, rule(schema.SelectOff), schema.SelectOff},
		{"new run, promoted", nil, rule(schema.SelectPromoted), schema.SelectPromoted},
		{"promoted taken from the record", rule(schema.SelectPromoted), nil, schema.SelectPromoted},
		{"taken from the record", rule(schema.SelectReached), nil, schema.SelectReached},
		{"the rule again keeps the recorded selection", rule(schema.SelectReached), rule(""), schema.SelectReached},
		{"the same selection", rule(schema.SelectReached), rule(schema.SelectReached), schema.SelectReached},
		{"another selection", rule(schema.SelectReached), rule(schema.SelectOff), ""},
		{"recorded before select, taken", rule(""), nil, schema.SelectOff},
		{"recorded before select, the rule again", rule(""), rule(""), schema.SelectOff},
		{"recorded before select, reached given", rule(""), rule(schema.SelectReached), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var rec *schema.Run
			if tc.recorded != nil {
				rec = recorded(t)
				rec.EarlyStop = tc.recorded
				// One objective: a ranked pool takes no stopped design.
				rec.Objectives, rec.Constraints, rec.HVRef = nil, nil, nil
			}
			cfg, _, err := resolve(rec, Config{Run: "x", Space: mlpSpace(t), EarlyStop: tc.given}, time.Now)
			if tc.want == "" {
				var se *SettingError
				if !errors.As(err, &se) || se.Field != "EarlyStop" {
					t.Fatalf("resolve = %v; want a SettingError on EarlyStop", err)
				}
				return
			}
			if err != nil || cfg.EarlyStop == nil || cfg.EarlyStop.Select != tc.want {
				t.Fatalf("resolve = %+v, %v; want select %q", cfg.EarlyStop, err, tc.want)
			}
			if tc.recorded != nil && tc.recorded.Select == "" && rec.EarlyStop.Select != "" {
				t.Fatalf("the record's rule was changed in place: %+v", rec.EarlyStop)
			}
		})
	}
}

// The cost tie chooses parents, so it is fixed for the run: a restart
// takes it from the record or refuses another; a run recorded before it
// was kept compares fitness alone.
func TestContinueCostTie(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		recorded *float64 // nil: a record without operators
		given    *float64
		want     float64 // -1: a SettingError
	}{
		{"recorded before operators were kept, none given", nil, nil, CostTieDefault},
		{"taken from the record", new(0.01), nil, 0.01},
		{"the same", new(0.01), new(0.01), 0.01},
		{"another", new(0.01), new(0.02), -1},
		{"off given on a run with one", new(0.01), new(0.0), -1},
		{"recorded before operators were kept", nil, new(0.01), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := recorded(t)
			rec.Objectives, rec.Constraints, rec.HVRef = nil, nil, nil
			rec.Variation = nil
			if tc.recorded != nil {
				rec.Variation = &schema.Variation{Crossover: 0.9, CostTie: *tc.recorded}
			}
			cfg, _, err := resolve(rec, Config{Run: "x", Space: mlpSpace(t), CostTie: tc.given}, time.Now)
			if tc.want < 0 {
				var se *SettingError
				if !errors.As(err, &se) || se.Field != "CostTie" {
					t.Fatalf("resolve = %v; want a SettingError on CostTie", err)
				}
				return
			}
			if err != nil || cfg.CostTie == nil || *cfg.CostTie != tc.want {
				t.Fatalf("resolve: cost tie %v, %v; want %v", cfg.CostTie, err, tc.want)
			}
		})
	}
}

// A new asha run of several objectives selects no stopped design by
// default, since its pool cannot take one, and starts rather than being
// refused; given reached, it is refused naming the setting.
func TestSelectDefaultSeveralObjectives(t *testing.T) {
	t.Parallel()
	o, err := runstate.ObjectivesOf(&schema.Run{Objectives: []string{"fitness:max", "params:min"}})
	if err != nil {
		t.Fatal(err)
	}
	rule := func(sel string) *schema.EarlyStop {
		return &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, Select: sel}
	}
	cfg, _, err := resolve(nil, Config{Run: "x", Space: mlpSpace(t), EarlyStop: rule(""), Objectives: o}, time.Now)
	if err != nil || cfg.EarlyStop.Select != schema.SelectOff {
		t.Fatalf("resolve = %+v, %v; want select off", cfg.EarlyStop, err)
	}
	_, _, err = resolve(nil, Config{Run: "x", Space: mlpSpace(t), EarlyStop: rule(schema.SelectReached), Objectives: o}, time.Now)
	var fe *schema.FieldError
	if !errors.As(err, &fe) || fe.Field != "EarlyStop.Select" {
		t.Fatalf("resolve with reached = %v; want a FieldError on EarlyStop.Select", err)
	}
}
