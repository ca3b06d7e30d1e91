package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
)

// TestExtendRefused checks which requests to raise a run's limits the
// controller refuses, and that each refusal names the flag and the run's
// value, or what to do instead.
func TestExtendRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		stopping schema.StopReason
		failed   bool
		timeB    time.Duration
		e        schema.Extend
		want     []string // in the refusal; none: accepted
	}{
		{"a larger budget", "", false, 0, schema.Extend{Budget: 120}, nil},
		{"the same budget", "", false, 0, schema.Extend{Budget: 100}, []string{"--budget 100", "budget is 100", "give more than 100"}},
		{"a smaller budget", "", false, 0, schema.Extend{Budget: 50}, []string{"--budget 50", "budget is 100"}},
		{"a budget below the made-up designs' total", "", false, 0, schema.Extend{Budget: 105}, nil},
		{"a time budget for a run without one", "", false, 0, schema.Extend{TimeBudget: time.Hour}, []string{"--time-budget 1h0m0s", "no time budget"}},
		{"a longer time budget", "", false, time.Hour, schema.Extend{TimeBudget: 2 * time.Hour}, nil},
		{"a shorter time budget", "", false, time.Hour, schema.Extend{TimeBudget: 30 * time.Minute}, []string{"--time-budget 30m0s", "time budget is 1h0m0s"}},
		{"a larger budget with a shorter time budget", "", false, time.Hour, schema.Extend{Budget: 200, TimeBudget: time.Minute}, []string{"--time-budget 1m0s"}},
		{"a run ending on time, given more time", schema.StopTime, false, time.Hour, schema.Extend{TimeBudget: 2 * time.Hour}, nil},
		{"a run ending on time, given more designs", schema.StopTime, false, time.Hour, schema.Extend{Budget: 200}, []string{"ending (stop reason time)", "raising --budget does not change that"}},
		{"a run ending on its plateau", schema.StopPlateau, false, 0, schema.Extend{Budget: 200}, []string{"ending (stop reason plateau)", "evoq controller --run r"}},
		{"a failed run", "", true, 0, schema.Extend{Budget: 200}, []string{"has failed", "--resume"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A budget of 100 of the user's, with 3 designs made up for a
			// failed start on top.
			c := &Controller{cfg: Config{Run: "r", Budget: 103, TimeBudget: tt.timeB}, madeUp: 3, stopping: tt.stopping}
			if tt.failed {
				c.failure = &schema.Failure{}
			}
			e := tt.e
			e.Run = "r"
			got := c.extendRefused(&e)
			if len(tt.want) == 0 && got != "" {
				t.Fatalf("refused: %s", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("refusal %q lacks %q", got, w)
				}
			}
		})
	}
}

// A request that waited in the controller past ExtendStale, whose sender
// has given up and said that nothing was raised, raises nothing.
func TestExtendStaleRefused(t *testing.T) {
	t.Parallel()
	c := &Controller{cfg: Config{Run: "r", Budget: 103, Now: time.Now}, madeUp: 3, log: testutil.Logger(t)}
	c.onExtend(context.Background(), extendReq{msg: &nats.Msg{Subject: "x", Reply: "y"}, e: &schema.Extend{Run: "r", Budget: 200},
		at: time.Now().Add(-ExtendStale - time.Second)})
	if c.cfg.Budget != 103 || len(c.changes) != 0 {
		t.Errorf("a stale request raised the budget to %d (changes %v); want 103 and none", c.cfg.Budget, c.changes)
	}
}
