package test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The incident's shape on purpose: a worker registers 8 slots that never
// ask for a design. The controller feeds them anyway (in flight follows
// the live slots), sees them idle while designs wait, and says so, naming
// the worker and the diagnosis; `evoq status` flags the worker too.
func TestIdleAlarmNamesTheIncident(t *testing.T) {
	t.Parallel()
	const run = "incident"
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", "150", "--init", "10", "--pool", "5",
		"--idle-alarm", "2s", "--json")
	background(t, "worker", "--nats", url, "--run", run, "--id", "real", "--slots", "1", "--evaluator", "sim", "--sim-mean", "0.1")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ghost(ctx, t, js, run)
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "slots idle while the budget has work") })
	var alarm string
	for _, l := range strings.Split(ctl.stderr.String(), "\n") {
		if strings.Contains(l, "slots idle while the budget has work") {
			alarm = l
			break
		}
	}
	for _, want := range []string{"idle_workers=ghost", "idle_slots=8", "queued but not pulled", "advice="} {
		if !strings.Contains(alarm, want) {
			t.Errorf("alarm lacks %q: %s", want, alarm)
		}
	}
	t.Logf("alarm: %s", alarm)
	st := evoq(t, 30*time.Second, "status", "--nats", url, "--run", run)
	for _, want := range []string{"run incident: running", "ghost", "! worker ghost registered 8 slots but never got a design"} {
		if st.code != 0 || !strings.Contains(st.stdout, want) {
			t.Errorf("status (exit %d) lacks %q:\n%s%s", st.code, want, st.stdout, st.stderr)
		}
	}
	t.Logf("status:\n%s", st.stdout)
	// The report's Gantt chart shows the ghost's slots, alive and idle.
	out := t.TempDir() + "/incident.html"
	if rep := evoq(t, 30*time.Second, "report", "--nats", url, "--run", run, "--out", out); rep.code != 0 {
		t.Errorf("report: exit %d\n%s", rep.code, rep.stderr)
	} else if page, err := os.ReadFile(out); err != nil || !strings.Contains(string(page),
		"9 slots on 2 workers, 1 of them evaluated at least one design; 8 slots never got a design") {
		t.Errorf("report does not show the 8 idle slots (%v)", err)
	}
	cancel()
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != 150 || s.SlotsUsed != 1 {
		t.Fatalf("evaluations %d slots used %d; want 150 and 1", s.Evaluations, s.SlotsUsed)
	}
}

// ghost heartbeats a worker with 8 slots that pulls nothing.
func ghost(ctx context.Context, t *testing.T, js jetstream.JetStream, run string) {
	kv, err := js.KeyValue(ctx, schema.PresenceBucket)
	for err != nil && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		kv, err = js.KeyValue(ctx, schema.PresenceBucket)
	}
	started := time.Now()
	for ctx.Err() == nil {
		p := &schema.Presence{Run: run, Worker: "ghost", Host: "nowhere", Slots: 8, Started: started,
			Heartbeat: time.Now(), Interval: time.Second}
		if data, err := schema.EncodePresence(p); err == nil && kv != nil {
			_, _ = kv.Put(ctx, schema.PresenceKey(run, "ghost"), data)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	if kv != nil {
		_ = kv.Delete(context.Background(), schema.PresenceKey(run, "ghost"))
	}
}
