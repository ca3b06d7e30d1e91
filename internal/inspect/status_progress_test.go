package inspect

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// evoq status says how many interrupted designs resumed from saved
// progress and how many were retrained from scratch, with the
// slot-seconds, counted from the results and from the controller's lease
// alike; a part that is zero is left out, and a run none of whose designs
// was interrupted has no such line.
func TestStatusProgress(t *testing.T) {
	t.Parallel()
	now := time.Now()
	resumed := func(seq uint64) *schema.Result {
		r := attempt(seq, "w", schema.StatusOK, now)
		r.Attempt, r.ResumedFrom, r.ResumedSeconds, r.ProgressStep = 2, 5, 12.5, 9
		return r
	}
	scratch := func(seq uint64) *schema.Result {
		r := attempt(seq, "w", schema.StatusOK, now)
		r.Attempt, r.Start = 3, now.Add(-10*time.Second) // about half of 10 s per earlier attempt: 10 slot-s
		return r
	}
	builtin := func(seq uint64) *schema.Result {
		r := scratch(seq)
		r.NoProgress = true // a built-in evaluator, which saves no progress
		return r
	}
	for _, tc := range []struct {
		name    string
		results []*schema.Result
		want    string // "" for no line
	}{
		{"both", []*schema.Result{resumed(1), resumed(2), scratch(3)},
			"interrupted: 2 designs resumed from saved progress (25.0 slot-s not repeated); 1 retrained from scratch (about 10.0 slot-s)"},
		{"resumed only", []*schema.Result{resumed(1), attempt(2, "w", schema.StatusOK, now)},
			"interrupted: 1 design resumed from saved progress (12.5 slot-s not repeated)\n"},
		{"none interrupted", []*schema.Result{attempt(1, "w", schema.StatusOK, now), builtin(2)}, ""},
	} {
		for _, via := range []string{"results", "controller"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				t.Parallel()
				tally, fig := runstate.NewTally("q", 10, runstate.RulesOf(&schema.Run{Run: "q", Budget: 10})), runstate.NewFigures()
				for _, r := range tc.results {
					fig.Add(tally.Judge(r, nil), r)
				}
				st := &runStatus{Run: "q", Phase: schema.PhaseRunning, Budget: 10, perWorker: map[string]*workerStatus{}}
				if via == "controller" {
					b, err := schema.EncodeLease(&schema.Lease{Run: "q", Host: "h", PID: 1, Holder: "x", Since: now, Renewed: now,
						Figures: fig.Snapshot(tally, now)})
					if err != nil {
						t.Fatal(err)
					}
					l, err := schema.DecodeLease(b)
					if err != nil {
						t.Fatal(err)
					}
					fig = runstate.FiguresOf(l.Figures)
				}
				st.take(fig)
				var out bytes.Buffer
				st.print(Env{Stdout: &out})
				got := out.String()
				if tc.want == "" && strings.Contains(got, "interrupted:") || tc.want != "" && !strings.Contains(got, tc.want) {
					t.Errorf("status:\n%s\nwant the line %q", got, tc.want)
				}
			})
		}
	}
}
