package metrics

import (
	"testing"

	"github.com/evoq/evoq/controller"
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

// The front's size and hypervolume appear once a run has a front, and the
// hypervolume once its reference point is known: a run of one fitness
// shows neither, rather than a hypervolume of 0.
func TestControllerFront(t *testing.T) {
	t.Parallel()
	m := NewController("r")
	m.Observe(controller.Snapshot{SlotsLive: 2})
	got := scrape(t, m)
	for _, name := range []string{"evoq_front_size", "evoq_hypervolume"} {
		if _, ok := got[name]; ok {
			t.Errorf("%s present for a run of one fitness", name)
		}
	}
	m.Observe(controller.Snapshot{Front: 7})
	if got := scrape(t, m); got["evoq_front_size"][""] != 7 || got["evoq_hypervolume"] != nil {
		t.Errorf("front %v, hypervolume %v; want 7 and none before the reference point", got["evoq_front_size"], got["evoq_hypervolume"])
	}
	hv := 0.75
	m.Observe(controller.Snapshot{Front: 9, Hypervolume: &hv})
	if got := scrape(t, m); got["evoq_front_size"][""] != 9 || got["evoq_hypervolume"][""] != 0.75 {
		t.Errorf("front %v, hypervolume %v; want 9 and 0.75", got["evoq_front_size"], got["evoq_hypervolume"])
	}
}
