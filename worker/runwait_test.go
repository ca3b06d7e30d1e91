package worker

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A waiting worker warns after RunWaitWarn, then at doubling intervals up
// to RunWaitRepeatMax.
func TestWaitWarnings(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	ww := NewWaitWarnings(t0)
	var at []int
	for s := 0; s <= 1000; s++ {
		if ww.Due(t0.Add(time.Duration(s) * time.Second)) {
			at = append(at, s)
		}
	}
	// 5 s, then gaps of 10, 20, 40, 80, 160 s, then 300 s (the cap).
	if want := []int{5, 15, 35, 75, 155, 315, 615, 915}; !reflect.DeepEqual(at, want) {
		t.Fatalf("warnings at %v s, want %v", at, want)
	}
}

func TestRunSighting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		s      RunSighting
		absent bool
		says   []string
		fields map[string]any
	}{
		{name: "mistyped", s: RunSighting{Run: "raal", InProgress: []string{"a", "real"}}, absent: true,
			says:   []string{"run raal is not on the broker", "runs in progress on the broker: a, real"},
			fields: map[string]any{"phase": "none", "runs_in_progress": "a,real"}},
		{name: "nothing on the broker", s: RunSighting{Run: "raal"}, absent: true,
			says:   []string{"run raal is not on the broker", "no run is in progress on the broker"},
			fields: map[string]any{"runs_in_progress": "none"}},
		{name: "done", s: RunSighting{Run: "old", Phase: schema.PhaseDone, InProgress: []string{"new"}}, absent: true,
			says:   []string{"run old is done", "runs in progress on the broker: new"},
			fields: map[string]any{"phase": "done", "runs_in_progress": "new"}},
		{name: "failed", s: RunSighting{Run: "broken", Phase: schema.PhaseFailed},
			says: []string{"run broken failed (none of its first evaluations worked) and no controller has continued it"}},
		{name: "starting", s: RunSighting{Run: "real", Phase: schema.PhaseStarting},
			says: []string{"run real is starting; its work queue is not there yet"}},
		{name: "a run's credential", s: RunSighting{Run: "raal", Unlisted: true}, absent: true,
			says:   []string{"run raal is not on the broker", "this worker's credential cannot list the runs"},
			fields: map[string]any{"runs_in_progress": "unknown: this credential cannot list them"}},
		{name: "listing failed", s: RunSighting{Run: "raal", ListErr: errors.New("timeout")}, absent: true,
			says:   []string{"the runs on the broker cannot be listed (timeout)"},
			fields: map[string]any{"runs_in_progress": "unknown: timeout"}},
		{name: "state unreadable", s: RunSighting{Run: "raal", Err: errors.New("timeout"), Unlisted: true},
			says: []string{"the state of run raal cannot be read (timeout)"}, fields: map[string]any{"error": "timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.s.Absent() != tc.absent {
				t.Errorf("Absent = %v, want %v", tc.s.Absent(), tc.absent)
			}
			for _, want := range tc.says {
				if !strings.Contains(tc.s.String(), want) {
					t.Errorf("%q lacks %q", tc.s.String(), want)
				}
			}
			f := tc.s.Fields()
			for k, want := range tc.fields {
				if f[k] != want {
					t.Errorf("field %s = %v, want %v", k, f[k], want)
				}
			}
		})
	}
}

// A worker that gives up waiting for a mistyped run says which runs are in
// progress (not the done ones), or that its credential cannot list them.
func TestJoinTimeoutNamesTheRunsInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.putRun(t, "real", schema.PhaseRunning)
	b.putRun(t, "old", schema.PhaseDone)
	for _, tc := range []struct {
		name     string
		unlisted bool
		want     string
	}{
		{"listed", false, "run raal is not on the broker: no controller has started it; runs in progress on the broker: real"},
		{"unlisted", true, "run raal is not on the broker: no controller has started it; this worker's credential cannot list the runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := New(b.JS, Config{Run: "raal", ID: "typo", Evaluator: noop, Logger: testutil.Logger(t),
				JoinTimeout: 300 * time.Millisecond, RunsUnlisted: tc.unlisted})
			if err != nil {
				t.Fatal(err)
			}
			err = w.Start(b.ctx)
			if !errors.Is(err, ErrNoRun) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v\nwant ErrNoRun saying %q", err, tc.want)
			}
		})
	}
}

// With a worker credential, which reads its own run's entry and nothing
// else of the run bucket, the run's phase is read and the listing, which
// the broker refuses, fails in bounded time instead of hanging.
func TestSightRunWithAWorkerCredential(t *testing.T) {
	t.Parallel()
	e, err := broker.Start(broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Auth: true, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	ctx := testutil.Context(t, time.Minute)
	admin := connectJS(t, e.ClientURL(), e.AdminCredential())
	if err := broker.Declare(ctx, admin); err != nil {
		t.Fatal(err)
	}
	(&bundle{Broker: &testutil.Broker{Embedded: e, JS: admin}, ctx: ctx}).putRun(t, "real", schema.PhaseRunning)
	cred, err := e.Mint(broker.RoleWorker, "real")
	if err != nil {
		t.Fatal(err)
	}
	js := connectJS(t, e.ClientURL(), cred)
	if s := SightRun(ctx, js, "real", true); s.Err != nil || s.Phase != schema.PhaseRunning || s.Absent() {
		t.Fatalf("unlisted sighting of its own run: %+v", s)
	}
	began := time.Now()
	s := SightRun(ctx, js, "real", false)
	if s.Phase != schema.PhaseRunning || s.ListErr == nil || time.Since(began) > 10*time.Second {
		t.Fatalf("listed sighting with a worker credential: %+v after %s; want the phase and a listing error", s, time.Since(began))
	}
}

func connectJS(t *testing.T, url string, c broker.Credential) jetstream.JetStream {
	t.Helper()
	// The broker refuses the listing on purpose: no need to print it.
	quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	nc, err := nats.Connect(url, append(c.Options(), quiet)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
