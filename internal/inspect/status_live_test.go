package inspect

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
)

// Status takes the figures of the controller's lease only from a live
// controller whose figures move; otherwise it counts the stored results,
// and its header says that the run's controller is gone.
func TestStatusControllerLive(t *testing.T) {
	t.Parallel()
	now := time.Now()
	lease := func(age, figuresAge time.Duration, pidGone bool) *broker.LeaseView {
		renewed := now.Add(-age)
		l := &schema.Lease{Run: "q", Host: "node-a", PID: 4242, Holder: "x", Since: now.Add(-time.Hour), Renewed: renewed,
			Figures: &schema.Figures{At: renewed.Add(-figuresAge), Done: 51}}
		return &broker.LeaseView{Lease: l, Renewed: renewed, Age: age, PIDGone: pidGone}
	}
	tests := []struct {
		name      string
		phase     schema.Phase
		lease     *broker.LeaseView
		floor     int
		useLease  bool
		live      bool
		header    string
		ctlSuffix string // in the controller line
	}{
		{"live", schema.PhaseRunning, lease(500*time.Millisecond, 0, false), 0, true, true, "run q: running; ", ""},
		{"draining", schema.PhaseDraining, lease(time.Second, time.Second, false), 0, true, true, "run q: draining; ", ""},
		{"no renewal for a missed renewal or two", schema.PhaseRunning, lease(broker.LeaseFresh, 0, false), 0, false, false,
			"run q: running (controller gone since ", "stopped renewing its lease at "},
		{"its process is gone from this host", schema.PhaseRunning, lease(200*time.Millisecond, 0, true), 0, false, false,
			"run q: running (controller gone since ", "pid 4242 is gone from this host"},
		{"renewed with figures that no longer move", schema.PhaseRunning, lease(time.Second, broker.LeaseFresh, false), 0, false, true,
			"run q: running; ", ""},
		{"figures behind the last redraw", schema.PhaseRunning, lease(time.Second, 0, false), 52, false, true, "run q: running; ", ""},
		{"a run done", schema.PhaseDone, lease(time.Second, 0, false), 0, false, true, "run q: done; ", ""},
		{"no controller", schema.PhaseRunning, nil, 0, false, false, "run q: running (no controller); ", ""},
		{"a run done, no controller", schema.PhaseDone, nil, 0, false, false, "run q: done; ", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &runStatus{Run: "q", Phase: tt.phase, Budget: 400, ByStatus: map[schema.Status]int{}, perWorker: map[string]*workerStatus{}}
			st.readLease(tt.lease)
			if got := st.useLease(tt.lease, tt.floor); got != tt.useLease {
				t.Errorf("useLease = %v, want %v", got, tt.useLease)
			}
			if st.ControllerLive != tt.live {
				t.Errorf("controller_live = %v, want %v", st.ControllerLive, tt.live)
			}
			if (st.ControllerGone != nil) != (tt.lease != nil && !tt.live) {
				t.Errorf("controller_gone = %+v with a lease %v live %v", st.ControllerGone, tt.lease != nil, tt.live)
			}
			st.finish(now)
			var out bytes.Buffer
			st.print(Env{Stdout: &out})
			text := out.String()
			if !strings.HasPrefix(text, tt.header) {
				t.Errorf("status begins %q, want %q", strings.SplitN(text, "\n", 2)[0], tt.header)
			}
			if tt.ctlSuffix != "" && !strings.Contains(text, tt.ctlSuffix) {
				t.Errorf("status does not say %q:\n%s", tt.ctlSuffix, text)
			}
			b, _ := json.Marshal(st)
			var j map[string]any
			if err := json.Unmarshal(b, &j); err != nil {
				t.Fatal(err)
			}
			if j["controller_live"] != tt.live {
				t.Errorf("JSON controller_live = %v, want %v", j["controller_live"], tt.live)
			}
		})
	}
}
