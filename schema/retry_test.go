package schema_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

func TestControl(t *testing.T) {
	t.Parallel()
	c := schema.Control{Run: "r", Worker: "w", Quarantine: []int{0, 2}, Reason: "failed", Sent: t0}
	data, err := schema.EncodeControl(&c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := schema.DecodeControl(data); err != nil || !slices.Equal(got.Quarantine, []int{0, 2}) || got.V != schema.Version || !got.Sent.Equal(t0) {
		t.Errorf("round trip: %+v %v", got, err)
	}
	for name, c := range map[string]schema.Control{
		"no slot":    {Run: "r", Worker: "w"},
		"a bad slot": {Run: "r", Worker: "w", Quarantine: []int{-1}},
		"a bad run":  {Run: "r.x", Worker: "w", Quarantine: []int{0}},
		"no worker":  {Run: "r", Quarantine: []int{0}},
	} {
		if _, err := schema.EncodeControl(&c); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := schema.DecodeControl([]byte("x")); !errors.Is(err, schema.ErrMalformed) {
		t.Errorf("garbage: %v, want ErrMalformed", err)
	}
	if s := schema.ControlSubject("r1", "w-3"); s != "evoq.control.r1.w-3" {
		t.Errorf("ControlSubject = %q", s)
	}
}

// retryDesign is design 42 of r1 published for its retry n.
func retryDesign(n int, hosts, workers []string) *schema.Design {
	return &schema.Design{V: schema.Version, Run: "r1", ID: "r1-42", Seq: 42, Genome: map[string]any{"x": int64(1)},
		Origin: schema.OriginRandom, Created: t0, Retry: n, AvoidHosts: hosts, AvoidWorkers: workers}
}

func TestDesignRetry(t *testing.T) {
	t.Parallel()
	d := retryDesign(2, []string{"node-1"}, []string{"w1", "w2"})
	data, err := schema.EncodeDesign(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeDesign(data)
	if err != nil || got.Retry != 2 || !slices.Equal(got.AvoidHosts, d.AvoidHosts) || !slices.Equal(got.AvoidWorkers, d.AvoidWorkers) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, tc := range []struct {
		worker, host string
		want         bool
	}{{"w1", "node-9", true}, {"w3", "node-1", true}, {"w3", "node-9", false}} {
		if got.Avoids(tc.worker, tc.host) != tc.want {
			t.Errorf("Avoids(%s, %s) = %v", tc.worker, tc.host, !tc.want)
		}
	}
	for name, bad := range map[string]*schema.Design{
		"a negative retry":             retryDesign(-1, nil, nil),
		"avoiding on a first attempt":  retryDesign(0, []string{"node-1"}, nil),
		"an empty host":                retryDesign(1, []string{""}, nil),
		"a worker ID that is no token": retryDesign(1, nil, []string{"w 1"}),
	} {
		if _, err := schema.EncodeDesign(bad); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	first := retryDesign(0, nil, nil)
	for _, tc := range []struct{ got, want string }{
		{schema.DesignMsgID(first), "r1-42"},
		{schema.DesignMsgID(d), "r1-42/retry2"},
		{schema.AttemptMsgID("r1-42", 0, 3), "r1-42/3"},
		{schema.AttemptMsgID("r1-42", 2, 3), "r1-42/retry2/3"},
		{schema.AttemptMsgID("r1-42", 2, 0), "r1-42/retry2/0"},
		{(&schema.Result{DesignID: "r1-42", Design: *d, Attempt: 1}).MsgID(), "r1-42/retry2/1"},
	} {
		if tc.got != tc.want {
			t.Errorf("message ID %q, want %q", tc.got, tc.want)
		}
	}
}

func TestPresenceQuarantined(t *testing.T) {
	t.Parallel()
	p := schema.Presence{Run: "r", Worker: "w", Slots: 2, Heartbeat: t0, Interval: time.Second, Quarantined: []int{1}}
	data, err := schema.EncodePresence(&p)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := schema.DecodePresence(data); err != nil || !slices.Equal(got.Quarantined, []int{1}) {
		t.Errorf("round trip: %+v %v", got, err)
	}
	p.Quarantined = []int{2}
	if _, err := schema.EncodePresence(&p); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("slot 2 of 2 quarantined: %v, want ErrInvalid", err)
	}
}

// A run's rules tell "not recorded" (an older record) from 0.
func TestRunRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		retries *int
	}{{"not recorded", nil}, {"recorded 0", new(0)}, {"recorded 2", new(2)}} {
		r := schema.Run{Run: "r", Phase: schema.PhaseRunning, Budget: 10, ErrorRetries: tc.retries, QuarantineAfter: tc.retries}
		data, err := schema.EncodeRun(&r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := schema.DecodeRun(data)
		if err != nil {
			t.Fatal(err)
		}
		if (got.ErrorRetries == nil) != (tc.retries == nil) || (tc.retries != nil && *got.ErrorRetries != *tc.retries) ||
			(got.QuarantineAfter == nil) != (tc.retries == nil) {
			t.Errorf("%s: decoded error_retries %v, quarantine_after %v", tc.name, got.ErrorRetries, got.QuarantineAfter)
		}
	}
	r := schema.Run{Run: "r", Phase: schema.PhaseRunning, Budget: 10, ErrorRetries: new(-1)}
	if _, err := schema.EncodeRun(&r); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("negative error_retries: %v, want ErrInvalid", err)
	}
}
