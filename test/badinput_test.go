package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// Bad input is refused at once, exit 2, naming the flag and the cause,
// before anything starts or is written: a --config too large for the run's
// record (once exit 1 after a worker had started, "malformed message:
// *schema.Run is ... bytes"), a run ID no run can have with no broker to
// ask (once a wait for ever), a --listen host DNS does not know (once a
// trust root written, then "another evoq or NATS server" blamed).
func TestBadInputRefusedAtStart(t *testing.T) {
	t.Parallel()
	var big strings.Builder
	big.WriteString("params:\n  x: {type: int, min: 1, max: 9}\n")
	for big.Len() < 1_400_000 {
		big.WriteString("# " + strings.Repeat("padding ", 10) + "\n")
	}
	bigPath := filepath.Join(t.TempDir(), "big.yaml")
	write(t, bigPath, big.String())
	for _, tc := range []struct {
		name  string
		args  func(dir string) []string
		limit time.Duration
		want  []string
		lacks []string
	}{{
		name: "oversized config",
		args: func(dir string) []string {
			return []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--config", bigPath, "--slots", "1", "--budget", "4", "--init", "2", "--pool", "2"}
		},
		limit: time.Minute,
		want:  []string{"--config " + bigPath, fmt.Sprintf("%d bytes, over the %d-byte limit", big.Len(), schema.MaxSpaceSource)},
		lacks: []string{"malformed message", "exited abnormally"},
	}, {
		name:  "worker run ID with no broker",
		args:  func(string) []string { return []string{"worker", "--nats", "nats://127.0.0.1:1", "--run", "a b"} },
		limit: 20 * time.Second,
		want:  []string{`--run "a b": "a b" has ' '`},
	}, {
		name:  "status run ID with no broker",
		args:  func(string) []string { return []string{"status", "--nats", "nats://127.0.0.1:1", "--run", "a b"} },
		limit: 20 * time.Second,
		want:  []string{`--run "a b"`},
		lacks: []string{"connect to"},
	}, {
		name: "broker listen host unknown",
		args: func(dir string) []string {
			return []string{"broker", "--dir", dir, "--listen", "notahost.invalid:4222"}
		},
		limit: 30 * time.Second,
		want:  []string{`--listen "notahost.invalid:4222": host notahost.invalid: `},
		lacks: []string{"another evoq", "trust root"},
	}, {
		name:  "run listen host unknown",
		args:  func(dir string) []string { return []string{"run", "--dir", dir, "--listen", "notahost.invalid:4222"} },
		limit: 30 * time.Second,
		want:  []string{`--listen "notahost.invalid:4222": host notahost.invalid: `},
		lacks: []string{"another evoq"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "store")
			args := tc.args(dir)
			r, hung := runWithin(t, tc.limit, args...)
			if hung {
				t.Fatalf("evoq %s: still running after %s, want exit 2 at once\nstderr:\n%s", strings.Join(args, " "), tc.limit, tail(r.stderr, 3000))
			}
			if r.code != 2 {
				t.Errorf("exit %d, want 2 (a usage error)\nstderr:\n%s", r.code, tail(r.stderr, 3000))
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not name %q:\n%s", w, tail(r.stderr, 3000))
				}
			}
			for _, w := range tc.lacks {
				if strings.Contains(r.stderr, w) {
					t.Errorf("stderr says %q:\n%s", w, tail(r.stderr, 3000))
				}
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s was made (a store or a trust root) before the input was checked", dir)
			}
		})
	}
}

// What a worker logs, and the run fails fast with, names why an
// evaluation failed: the exception line at the end of a long Python
// traceback (the warning once showed the traceback's first 300
// characters), a fitness printed as a string or as Python's NaN (once "not
// a JSON object"), report lines with no result line after them (once "no
// output; last stdout line: \"\"").
func TestEvaluatorFailuresNamed(t *testing.T) {
	t.Parallel()
	traceback := filepath.Join(t.TempDir(), "traceback.sh")
	write(t, traceback, `#!/bin/sh
echo "Traceback (most recent call last):" >&2
i=0; while [ $i -lt 40 ]; do echo "  File \"/home/user/train.py\", line $i, in step" >&2; echo "    loss = model(batch).backward()" >&2; i=$((i+1)); done
echo "ValueError: learning rate 7 is out of range" >&2
exit 1
`)
	if err := os.Chmod(traceback, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, cmd, want string }{
		{"traceback", traceback, "ValueError: learning rate 7 is out of range"},
		{"fitness a string", `echo '{"fitness": "0.9"}'`, `fitness is a string (\"0.9\"), want a number`},
		{"fitness NaN", `echo '{"fitness": NaN}'`, "fitness is NaN, not a finite number"},
		{"reports only", `echo '{"report": {"step": 1, "fitness": 0.5}}'; echo '{"report": {"step": 2, "fitness": 0.6}}'`,
			"printed only report lines (2 of them) and no result line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := evoq(t, 2*time.Minute, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--eval-cmd", tc.cmd,
				"--slots", "2", "--budget", "10", "--init", "4", "--pool", "2", "--fail-fast", "4", "--log-level", "info")
			if r.code != 3 {
				t.Fatalf("exit %d, want 3 (the run failed fast)\nstderr:\n%s", r.code, tail(r.stderr, 3000))
			}
			if !hasLine(r.stderr, "evaluation failed", tc.want) {
				t.Errorf("no evaluation failed warning names %q:\n%s", tc.want, tail(r.stderr, 3000))
			}
		})
	}
}
