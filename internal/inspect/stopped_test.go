package inspect

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// evoq status counts the stopped designs; a run without early stopping
// keeps its results line as it was.
func TestStatusCountsStopped(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name    string
		rule    *schema.EarlyStop
		stopped int
		want    string // the results line
	}{
		{"no rule", nil, 0, "results: 2 ok, 0 infeasible, 1 error, 0 timeout, 0 lost\n"},
		{"rule, none stopped yet", curvesRule, 0, "results: 2 ok, 0 infeasible, 1 error, 0 timeout, 0 lost, 0 stopped\n"},
		{"rule", curvesRule, 3, "results: 2 ok, 0 infeasible, 1 error, 0 timeout, 0 lost, 3 stopped\n"},
		// A record that lost its rule (written by an older controller on
		// restart) still shows the stopped designs its results hold.
		{"stopped without a rule", nil, 1, "results: 2 ok, 0 infeasible, 1 error, 0 timeout, 0 lost, 1 stopped\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &runStatus{Run: "q", Phase: schema.PhaseRunning, Budget: 10, ByStatus: map[schema.Status]int{}, EarlyStop: tc.rule,
				perWorker: map[string]*workerStatus{}}
			tally, fig := runstate.NewTally("q", 10, runstate.Rules{}), runstate.NewFigures()
			seq := uint64(0)
			add := func(s schema.Status) {
				seq++
				r := attempt(seq, "w", s, now)
				if s == schema.StatusStopped {
					r.Fitness, r.Error = 0.25, "stopped at rung 3"
				}
				fig.Add(tally.Judge(r, nil), r)
			}
			for _, s := range []schema.Status{schema.StatusOK, schema.StatusOK, schema.StatusError} {
				add(s)
			}
			for range tc.stopped {
				add(schema.StatusStopped)
			}
			st.take(fig)
			st.finish(now)
			if st.Done != 3+tc.stopped || st.ByStatus[schema.StatusStopped] != tc.stopped {
				t.Errorf("done %d, %d stopped; want %d, %d", st.Done, st.ByStatus[schema.StatusStopped], 3+tc.stopped, tc.stopped)
			}
			if w := st.Workers[0]; w.Failures != 1 || w.Evaluations != 3+tc.stopped {
				t.Errorf("worker: %d evaluations, %d failures; want %d, 1 (a stopped design is no failure)", w.Evaluations, w.Failures, 3+tc.stopped)
			}
			var out bytes.Buffer
			st.print(Env{Stdout: &out})
			if !strings.Contains(out.String(), "\n"+tc.want) {
				t.Errorf("status lacks %q:\n%s", tc.want, out.String())
			}
		})
	}
}

// evoq status --json on a stored run gives the stopped count and the
// rule, read from the run's record.
func TestStatusJSONStopped(t *testing.T) {
	t.Parallel()
	cb := setupCurves(t)
	var st runStatus
	decodeJSON(t, "status", cliOut(t, 0, append([]string{"status", "--json"}, cb.src...)...), &st)
	if st.ByStatus[schema.StatusStopped] != cb.stopped || st.ByStatus[schema.StatusOK] != cb.completed || st.Done != curvesBudget || st.Retried != 1 {
		t.Errorf("status: done %d, by status %v, %d retried; want %d, %d stopped and %d ok, 1", st.Done, st.ByStatus, st.Retried,
			curvesBudget, cb.stopped, cb.completed)
	}
	if st.EarlyStop == nil || *st.EarlyStop != *curvesRule {
		t.Errorf("early stop %+v, want %+v", st.EarlyStop, curvesRule)
	}
}
