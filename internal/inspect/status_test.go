package inspect

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// attempt is a result of design seq of run "q" on worker's slot 0.
func attempt(seq uint64, worker string, status schema.Status, stop time.Time) *schema.Result {
	d := schema.Design{V: schema.Version, Run: "q", ID: schema.DesignID("q", seq), Seq: seq,
		Genome: map[string]any{"x": int64(seq)}, Origin: schema.OriginRandom, Created: stop}
	r := &schema.Result{V: schema.Version, Run: "q", DesignID: d.ID, Design: d, Status: status, Fitness: 0.5,
		Worker: worker, Host: "node-" + worker, GPU: "3", Attempt: 1, Start: stop, Stop: stop}
	if status != schema.StatusOK {
		r.Fitness, r.Error = schema.InfeasibleFitness, "RuntimeError: CUDA error: uncorrectable ECC error encountered"
	}
	return r
}

// evoq status shows a worker whose slot the results quarantine as
// quarantined, names the slot, its GPU and last error under the problems,
// and counts the retried attempts; a worker restarted since (its
// heartbeat's start after the failures) is not held to it.
func TestStatusQuarantined(t *testing.T) {
	t.Parallel()
	now := time.Now()
	type testCase struct {
		name    string
		started time.Time
		want    string
		via     string // where the figures come from: results, or the controller's lease
	}
	var cases []testCase
	for _, via := range []string{"results", "controller"} {
		cases = append(cases, testCase{"gone/" + via, time.Time{}, "quarantined", via},
			testCase{"restarted since/" + via, now.Add(time.Minute), "live", via})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &schema.Run{Run: "q", Phase: schema.PhaseRunning, Budget: 10, ErrorRetries: new(1), QuarantineAfter: new(3)}
			st := &runStatus{Run: "q", Phase: rec.Phase, Budget: 10, ByStatus: map[schema.Status]int{},
				perWorker: map[string]*workerStatus{}}
			tally, fig := runstate.NewTally("q", 10, runstate.RulesOf(rec)), runstate.NewFigures()
			add := func(r *schema.Result) { fig.Add(tally.Judge(r, nil), r) }
			add(attempt(1, "good", schema.StatusOK, now))
			for seq := uint64(2); seq <= 4; seq++ {
				add(attempt(seq, "bad", schema.StatusError, now))
			}
			if tc.via == "controller" {
				// Through the lease's wire form, as status reads it.
				b, err := schema.EncodeLease(&schema.Lease{Run: "q", Host: "h", PID: 1, Holder: "x", Since: now, Renewed: now,
					Figures: fig.Snapshot(tally, now)})
				if err != nil {
					t.Fatal(err)
				}
				l, err := schema.DecodeLease(b)
				if err != nil {
					t.Fatal(err)
				}
				st.take(runstate.FiguresOf(l.Figures))
				st.quarantined = l.Figures.Quarantined
			} else {
				st.take(fig)
				st.quarantined = runstate.QuarantinedOf(tally)
			}
			if !tc.started.IsZero() {
				w := st.worker("bad")
				w.Slots, w.Live, w.presence = 1, true, &schema.Presence{Run: "q", Worker: "bad", Slots: 1, Started: tc.started}
			}
			st.finish(now)
			var bad workerStatus
			for _, w := range st.Workers {
				if w.Worker == "bad" {
					bad = w
				}
			}
			if bad.State != tc.want || st.Retried != 3 || bad.Failures != 3 {
				t.Errorf("bad: state %q, %d failures; %d retried; want %s, 3, 3", bad.State, bad.Failures, st.Retried, tc.want)
			}
			held := tc.want == "quarantined"
			if slices.Equal(bad.Quarantined, []int{0}) != held {
				t.Errorf("quarantined slots %v", bad.Quarantined)
			}
			problem := strings.Join(st.Problems, "\n")
			if strings.Contains(problem, "worker bad slot 0 on host node-bad is quarantined (GPU 3) after 3 failed designs in a row; last error: RuntimeError") != held {
				t.Errorf("problems %q", st.Problems)
			}
			var out bytes.Buffer
			st.print(Env{Stdout: &out})
			if !strings.Contains(out.String(), "not counted: 3 retried") || strings.Contains(out.String(), " quarantined ") != held {
				t.Errorf("status:\n%s", out.String())
			}
		})
	}
}
