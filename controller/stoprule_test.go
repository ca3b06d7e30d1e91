package controller

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A continuing run keeps its target, plateau and deadline when none is
// given; given other values are changes, and a time budget given again
// keeps the deadline only while it is ahead.
func TestContinueStopRule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	deadline := now.Add(time.Hour)
	tests := []struct {
		name         string
		deadline     time.Time
		given        Config
		target       float64
		plateau      int
		wantDeadline time.Time
		changes      []string
	}{
		{"none given", deadline, Config{}, 0.9, 50, deadline, nil},
		{"the same time budget, deadline ahead", deadline, Config{TimeBudget: 2 * time.Hour}, 0.9, 50, deadline, nil},
		{"the same time budget, deadline past", now.Add(-time.Minute), Config{TimeBudget: 2 * time.Hour}, 0.9, 50, now.Add(2 * time.Hour), []string{"deadline"}},
		{"another time budget", deadline, Config{TimeBudget: 30 * time.Minute}, 0.9, 50, now.Add(30 * time.Minute), []string{"deadline"}},
		{"a larger plateau, another target", deadline, Config{Plateau: 200, Target: new(0.95)}, 0.95, 200, deadline, []string{"target", "plateau"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := recorded(t)
			rec.Target, rec.Plateau, rec.TimeBudget, rec.Deadline = new(0.9), 50, 2*time.Hour, tt.deadline
			given := tt.given
			given.Run = "x"
			cfg, k, err := resolve(rec, given, func() time.Time { return now })
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Target == nil || *cfg.Target != tt.target || cfg.Plateau != tt.plateau || !cfg.Deadline.Equal(tt.wantDeadline) {
				t.Fatalf("target %v, plateau %d, deadline %s; want %g, %d, %s", cfg.Target, cfg.Plateau, cfg.Deadline, tt.target, tt.plateau, tt.wantDeadline)
			}
			var changed []string
			for _, c := range k.Changes {
				changed = append(changed, c.Setting)
			}
			if len(changed) != len(tt.changes) {
				t.Fatalf("changes %v, want %v", changed, tt.changes)
			}
			for i := range changed {
				if changed[i] != tt.changes[i] {
					t.Fatalf("changes %v, want %v", changed, tt.changes)
				}
			}
		})
	}
}

// A new run's time budget starts with it.
func TestNewRunDeadline(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg, _, err := resolve(nil, Config{Run: "x", Space: mlpSpace(t), TimeBudget: time.Hour}, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Deadline.Equal(now.Add(time.Hour)) {
		t.Fatalf("deadline %s, want an hour from the start", cfg.Deadline)
	}
}

func TestValidateStopRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"target NaN", Config{Target: new(math.NaN())}, "Target"},
		{"target infinite", Config{Target: new(math.Inf(1))}, "Target"},
		{"negative plateau", Config{Plateau: -1}, "Plateau"},
		{"negative time budget", Config{TimeBudget: -time.Second}, "TimeBudget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Run = "x"
			var fe *schema.FieldError
			if err := tt.cfg.ValidateGiven(); !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("ValidateGiven() = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}
