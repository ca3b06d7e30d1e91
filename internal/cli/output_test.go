package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/evoq/evoq/runstate"
)

// The summary's first line says over what time the rate was taken when
// the run waited for its first slot.
func TestSummaryLineWaitFirstSlot(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := &runstate.Summary{Run: "r", Evaluations: 360, OK: 360, WallS: 95, WaitFirstSlotS: 47, EvalsPerS: 7.5}
	if err := printSummary(&out, s, false); err != nil {
		t.Fatal(err)
	}
	if want := "run r: 360 evaluations (360 ok, 0 infeasible, 0 error, 0 timeout, 0 lost) in 95.0 s, 7.5/s over the 48.0 s after the first slot joined\n"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("summary begins\n%q\nwant\n%q", out.String(), want)
	}
}

// The final summary line counts the stopped designs when the run has an
// early-stopping rule, and is the line the README quotes when it has
// none.
func TestSummaryCountsStopped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sum  runstate.Summary
		want string
	}{
		{"none stopped", runstate.Summary{Run: "r", Evaluations: 200, OK: 195, Infeasible: 5, WallS: 8.3, EvalsPerS: 24.1},
			"run r: 200 evaluations (195 ok, 5 infeasible, 0 error, 0 timeout, 0 lost) in 8.3 s, 24.1/s\n"},
		{"stopped", runstate.Summary{Run: "r", Evaluations: 200, OK: 20, Infeasible: 5, Error: 1, Lost: 2, Stopped: 172,
			EarlyStop: &runstate.EarlyStopSummary{}, WallS: 8.3, EvalsPerS: 24.1},
			"run r: 200 evaluations (20 ok, 5 infeasible, 1 error, 0 timeout, 2 lost, 172 stopped) in 8.3 s, 24.1/s\n"},
		{"rule, none stopped", runstate.Summary{Run: "r", Evaluations: 3, OK: 3, EarlyStop: &runstate.EarlyStopSummary{}, WallS: 1, EvalsPerS: 3},
			"run r: 3 evaluations (3 ok, 0 infeasible, 0 error, 0 timeout, 0 lost, 0 stopped) in 1.0 s, 3.0/s\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := printSummary(&out, &tc.sum, false); err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(out.String(), "\n"); first+"\n" != tc.want {
				t.Errorf("summary line %q, want %q", first, tc.want)
			}
		})
	}
}
