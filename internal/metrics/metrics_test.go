package metrics

import (
	"testing"

	"github.com/evoq/evoq/schema"
)

// scrape returns the value of each sample of the controller's registry,
// by metric name and status label ("" for none).
func scrape(t *testing.T, m *Controller) map[string]map[string]float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range fams {
		out[f.GetName()] = map[string]float64{}
		for _, s := range f.GetMetric() {
			status := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == "status" {
					status = l.GetValue()
				}
			}
			// The getters are nil-safe: a counter has no gauge value.
			out[f.GetName()][status] = s.GetCounter().GetValue() + s.GetGauge().GetValue()
		}
	}
	return out
}

// Every status, stopped included, has its evaluations counter from the
// start (a dashboard's rate() needs the zero), and the reports counter
// counts each Reported call.
func TestControllerCountsStoppedAndReports(t *testing.T) {
	t.Parallel()
	m := NewController("r")
	before := scrape(t, m)
	for _, s := range schema.Statuses {
		if v, ok := before["evoq_evaluations_total"][string(s)]; !ok || v != 0 {
			t.Errorf("evoq_evaluations_total{status=%q} = %v (present %v), want 0 before any result", s, v, ok)
		}
	}
	m.Counted(&schema.Result{Status: schema.StatusStopped})
	m.Counted(&schema.Result{Status: schema.StatusStopped})
	m.Counted(&schema.Result{Status: schema.StatusOK})
	for range 5 {
		m.Reported()
	}
	after := scrape(t, m)
	if got := after["evoq_evaluations_total"]; got["stopped"] != 2 || got["ok"] != 1 || got["error"] != 0 {
		t.Errorf("evaluations %v, want stopped 2, ok 1, error 0", got)
	}
	if got := after["evoq_reports_total"][""]; got != 5 {
		t.Errorf("evoq_reports_total %v, want 5", got)
	}
}
