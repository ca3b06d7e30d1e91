package bench

import (
	"context"
	"testing"
	"time"
)

// Each variant of the plain loop runs its budget on a real broker with
// real worker processes, each design counted once, in as many messages as
// it says.
func TestLoopVariants(t *testing.T) {
	evoq := smokeEvoq(t)
	const slots, workers, budget = 4, 2, 300
	for _, v := range LoopVariants {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			r := &runner{cfg: Config{Evoq: evoq}.withDefaults()}
			loop, err := r.runLoop(ctx, t.TempDir(), v, slots, workers, budget)
			if err != nil {
				t.Fatal(err)
			}
			if loop.Evaluations != budget || loop.EvalsPerS <= 0 || loop.CPUPerEvalUs <= 0 {
				t.Errorf("%+v: want %d evaluations, a rate and a CPU time", loop, budget)
			}
			if loop.ResultBytes != loopResultSize(v) {
				t.Errorf("results of %d bytes, want %d", loop.ResultBytes, loopResultSize(v))
			}
			switch v {
			case LoopBatched: // as many results as the slots had ready: one to all of a process's
				if loop.ResultMsgs < budget/(slots/workers) || loop.ResultMsgs > budget {
					t.Errorf("%d results in %d messages, want %d to %d", budget, loop.ResultMsgs, budget/(slots/workers), budget)
				}
			default:
				if loop.ResultMsgs != budget {
					t.Errorf("%d results in %d messages, want one each", budget, loop.ResultMsgs)
				}
			}
		})
	}
}

// The target is judged against the plain loop only.
func TestBoundMet(t *testing.T) {
	for _, tc := range []struct {
		variant string
		share   float64
		met     bool
	}{
		{LoopPlain, 0.9, true},
		{LoopPlain, 0.89, false},
		{LoopBatched, 1.5, false},
		{LoopSmall, 1.5, false},
	} {
		if got := (&Bound{Variant: tc.variant, Share: tc.share}).Met(); got != tc.met {
			t.Errorf("%s at %v: met %v, want %v", tc.variant, tc.share, got, tc.met)
		}
	}
}
