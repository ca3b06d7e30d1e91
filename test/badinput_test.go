package test

import (
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// Garbage, a wrong schema version and a large garbage message published on
// the designs subject by a plain NATS client are rejected and logged by the
// worker, which keeps serving: the run completes its budget. A message over
// the 1 MiB limit is refused by the broker itself.
func TestWorkerRejectsBadDesigns(t *testing.T) {
	t.Parallel()
	_, url := startBroker(t, t.TempDir())
	w := background(t, "worker", "--nats", url, "--run", "bad", "--evaluator", "sim", "--sim-mean", "0.05", "--slots", "2")
	ctl := background(t, "controller", "--nats", url, "--run", "bad", "--budget", "40", "--init", "10", "--pool", "5", "--json")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(w.stderr.String(), "worker joined run") })
	wrongVersion, _ := msgpack.Marshal(map[string]any{"v": 99, "run": "bad", "id": "bad-7", "seq": 7})
	for _, payload := range [][]byte{[]byte("\x00\xffnot msgpack at all"), wrongVersion, []byte(strings.Repeat("x", 900_000))} {
		if err := nc.Publish(schema.DesignSubject("bad"), payload); err != nil {
			t.Fatal(err)
		}
	}
	// Over the broker's 1 MiB payload limit a message never reaches the queue.
	if err := nc.Publish(schema.DesignSubject("bad"), make([]byte, 2<<20)); err != nats.ErrMaxPayload {
		t.Errorf("publishing 2 MiB: %v, want %v", err, nats.ErrMaxPayload)
	}
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if err := w.wait(t, 30*time.Second); err != nil {
		t.Fatalf("worker: %v", err)
	}
	log := w.stderr.String()
	for _, want := range []string{"malformed message", "unsupported schema version", "bytes=900000"} {
		if !strings.Contains(log, want) {
			t.Errorf("worker log lacks %q:\n%s", want, tail(log, 3000))
		}
	}
	if n := strings.Count(log, "rejected a malformed design"); n != 3 {
		t.Errorf("%d rejections logged, want 3", n)
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != 40 {
		t.Errorf("run ended with %d evaluations, want 40", s.Evaluations)
	}
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
