package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

func persistentTask(seq uint64, slot int) Task {
	d := &schema.Design{Run: "p", ID: schema.DesignID("p", seq), Seq: seq, Genome: map[string]any{"x": 1.0},
		Origin: schema.OriginRandom, Created: time.Now()}
	return Task{Design: d, Slot: slot, Attempt: 1, Worker: "w"}
}

// One process serves many designs; log lines are skipped; a result line
// that is not valid JSON (Python's NaN) is an error, not a hang; a dying
// process hands its design back and the next design gets a fresh process.
func TestPersistentEvaluator(t *testing.T) {
	t.Parallel()
	p := &Persistent{Cmd: `n=0; while read -r line; do n=$((n+1)); echo "log line $n"
case "$line" in
  *'"seq":3'*) echo '{"fitness": NaN, "metrics": {}}';;
  *'"seq":4'*) echo "bye" >&2; exit 7;;
  *) echo "{\"fitness\": 0.$n, \"metrics\": {\"pid\": $$}}";;
esac; done`}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var pids []any
	for seq, want := range map[uint64]schema.Status{1: schema.StatusOK, 2: schema.StatusOK} {
		out := p.Evaluate(ctx, persistentTask(seq, 0))
		if out.Status != want || out.Exit != nil || out.Signal != "" {
			t.Fatalf("design %d: %+v; want %s from a process that lives on: no exit, no signal", seq, out, want)
		}
		pids = append(pids, out.Metrics["pid"])
	}
	if pids[0] != pids[1] {
		t.Fatalf("two designs ran in processes %v and %v, want one", pids[0], pids[1])
	}
	if out := p.Evaluate(ctx, persistentTask(3, 0)); out.Status != schema.StatusError || !strings.Contains(out.Error, "NaN") {
		t.Fatalf("NaN line: %+v, want an error quoting it", out)
	}
	if out := p.Evaluate(ctx, persistentTask(4, 0)); !out.HandBack || !strings.Contains(out.Error, "bye") || out.Exit == nil || *out.Exit != 7 {
		t.Fatalf("dying process: %+v, want a hand-back with its stderr and exit code 7", out)
	}
	out := p.Evaluate(ctx, persistentTask(5, 0))
	if out.Status != schema.StatusOK || out.Metrics["pid"] == pids[0] {
		t.Fatalf("after the death: %+v, want ok from a new process", out)
	}
}

// A timeout kills the slot's process and the next design starts another.
func TestPersistentTimeout(t *testing.T) {
	t.Parallel()
	p := &Persistent{Cmd: `while read -r line; do case "$line" in *'"seq":1'*) sleep 1000;; esac; echo '{"fitness": 1}'; done`}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	out := p.Evaluate(ctx, persistentTask(1, 0))
	cancel()
	if out.Status != schema.StatusTimeout || out.Signal != "SIGKILL" || out.Exit != nil {
		t.Fatalf("got %+v, want a timeout whose process the worker killed (SIGKILL)", out)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if out := p.Evaluate(ctx2, persistentTask(2, 0)); out.Status != schema.StatusOK {
		t.Fatalf("after the timeout: %+v", out)
	}
}

// A process killed in the middle of a design (the OOM killer, a driver
// fault) hands the design back, naming the signal.
func TestPersistentKilledMidRun(t *testing.T) {
	t.Parallel()
	p := &Persistent{Cmd: `while read -r line; do case "$line" in *'"seq":2'*) echo "loading weights" >&2; kill -KILL $$;; esac; echo '{"fitness": 1}'; done`}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out := p.Evaluate(ctx, persistentTask(1, 0)); out.Status != schema.StatusOK {
		t.Fatalf("design 1: %+v", out)
	}
	out := p.Evaluate(ctx, persistentTask(2, 0))
	if !out.HandBack || out.Signal != "SIGKILL" || out.Exit != nil || !strings.Contains(out.Error, "loading weights") {
		t.Fatalf("killed process: %+v, want a hand-back naming SIGKILL, with its stderr", out)
	}
}
