package test

import (
	"context"
	"fmt"
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
	waitShowing(t, limit, cond, nil)
}

// waitShowing is waitFor that, past the limit, fails with what show says
// (the logs of the processes waited on).
func waitShowing(t *testing.T, limit time.Duration, cond func() bool, show func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			if show != nil {
				t.Fatalf("condition not met within %s\n%s", limit, show())
			}
			t.Fatalf("condition not met within %s", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A well-formed design whose genome is outside the run's search space gets
// an error result from the worker, which keeps serving; the controller,
// which never published it, ignores that result and the run spends exactly
// its budget.
func TestGenomeOutsideSpace(t *testing.T) {
	t.Parallel()
	const run, budget = "gs", 20
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "10",
		"--pool", "5", "--wait-slots", "2", "--json")
	// The controller publishes nothing until two slots are live: the
	// foreign design is first on the queue.
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "waiting for worker slots") })
	_, js := connectJS(t, url)
	data, err := schema.EncodeDesign(&schema.Design{Run: run, Seq: 9999, ID: schema.DesignID(run, 9999),
		Genome: map[string]any{"lr": 99.0}, Origin: schema.OriginRandom, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, schema.DesignSubject(run), data); err != nil {
		t.Fatalf("publish the foreign design: %v", err)
	}
	w := background(t, "worker", "--nats", url, "--run", run, "--id", "gsw", "--slots", "2",
		"--evaluator", "sim", "--sim-mean", "0.05")
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if err := w.wait(t, 30*time.Second); err != nil {
		t.Fatalf("worker: %v\n%s", err, tail(w.stderr.String(), 3000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget {
		t.Errorf("run ended with %d evaluations, want %d", s.Evaluations, budget)
	}
	if !hasLine(w.stderr.String(), "genome does not fit the run's search space", "gs-9999") {
		t.Errorf("worker log has no rejection of gs-9999:\n%s", tail(w.stderr.String(), 3000))
	}
	if !hasLine(ctl.stderr.String(), "ignoring a result for a design that is not this run's or lies beyond its budget", "gs-9999") {
		t.Errorf("controller log does not say it ignored gs-9999's result:\n%s", tail(ctl.stderr.String(), 3000))
	}
	results := storedResults(t, js, run)
	seqs := bySeq(results)
	if rs := seqs[9999]; len(rs) != 1 || rs[0].Status != schema.StatusError || !strings.Contains(rs[0].Error, "search space") {
		t.Errorf("gs-9999 has %d results, want one error result naming the search space", len(rs))
		for _, r := range rs {
			t.Logf("gs-9999: %s %q", r.Status, r.Error)
		}
	}
	served := 0
	for seq := uint64(1); seq <= budget; seq++ {
		if rs := seqs[seq]; len(rs) != 1 || rs[0].Worker != "gsw" || rs[0].Status != schema.StatusOK {
			t.Errorf("design %d: %d results; want one ok result from gsw", seq, len(rs))
		} else {
			served++
		}
	}
	if len(results) != budget+1 {
		t.Errorf("%d results stored (%d designs served after the rejection); want %d and the rejected one", len(results), served, budget)
	}
}
