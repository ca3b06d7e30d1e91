package evaluators

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/mlp"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// mutant makes a valid mutant of parent; with ckpt it inherits that
// checkpoint, as a run with inheritance would hand it out.
func mutant(t testing.TB, parent *schema.Design, seq uint64, genome map[string]any, ckpt []byte) *schema.Design {
	t.Helper()
	d := &schema.Design{Run: parent.Run, ID: schema.DesignID(parent.Run, seq), Seq: seq, Genome: genome,
		Origin: schema.OriginMutant, Parents: []string{parent.ID}, Created: time.Now()}
	if ckpt != nil {
		sum := sha256.Sum256(ckpt)
		d.Inherit = &schema.CheckpointRef{Design: parent.ID, Size: int64(len(ckpt)), Digest: schema.DigestPrefix + hex.EncodeToString(sum[:])}
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("test design: %v", err)
	}
	return d
}

// writeFile writes b to name in dir and returns its path.
func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readFile returns the file's bytes, failing the test if it cannot.
func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// absent fails the test unless nothing is at path.
func absent(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: %v, want no file", path, err)
	}
}

// noInheritance fails the test if m reports on inheritance: the worker
// does for a design it handed no parent checkpoint.
func noInheritance(t testing.TB, m map[string]any) {
	t.Helper()
	for _, k := range []string{MetricInherited, MetricInheritReason, MetricInheritedParams, MetricParentBytes} {
		if v, ok := m[k]; ok {
			t.Errorf("metric %s = %v without a parent checkpoint", k, v)
		}
	}
}

// inherited checks the inheritance metrics of m: inherited as want, and
// a reason containing reason exactly when it did not.
func inherited(t testing.TB, m map[string]any, want bool, reason string) {
	t.Helper()
	if got, ok := m[MetricInherited].(bool); !ok || got != want {
		t.Errorf("inherited %v (%T), want %v", m[MetricInherited], m[MetricInherited], want)
	}
	r, has := m[MetricInheritReason].(string)
	switch {
	case want && has:
		t.Errorf("inherited with reason %q", r)
	case !want && (!has || !strings.Contains(r, reason)):
		t.Errorf("reason %q, want one containing %q", r, reason)
	}
}

func TestMLPCheckpoints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := mlpGenome([]int{8, 8}, 10)
	parent := newDesign(t, "mlpckpt", 1, g)
	out := MLP{}.Evaluate(context.Background(), worker.Task{Design: parent, Attempt: 1, CheckpointOut: filepath.Join(dir, "1.ckpt")})
	if out.Status != schema.StatusOK {
		t.Fatalf("parent: %+v", out)
	}
	noInheritance(t, out.Metrics)
	ckpt := readFile(t, filepath.Join(dir, "1.ckpt"))
	want, wantCkpt, err := mlp.EvaluateFrom(context.Background(), g, nil)
	if err != nil || out.Fitness != want.Accuracy || !bytes.Equal(ckpt, wantCkpt) {
		t.Fatalf("parent: fitness %v and %d bytes, want the model's %v and its %d bytes (%v)", out.Fitness, len(ckpt), want.Accuracy, len(wantCkpt), err)
	}

	childGenome := mlpGenome([]int{8, 8}, 5)
	childGenome["lr"] = 0.1
	child := mutant(t, parent, 2, childGenome, ckpt)
	out = MLP{}.Evaluate(context.Background(), worker.Task{Design: child, Attempt: 1,
		ParentCheckpoint: filepath.Join(dir, "1.ckpt"), CheckpointOut: filepath.Join(dir, "2.ckpt")})
	if out.Status != schema.StatusOK {
		t.Fatalf("child: %+v", out)
	}
	inherited(t, out.Metrics, true, "")
	if out.Metrics[MetricInheritedParams] != out.Metrics["params"] {
		t.Errorf("inherited %v of %v parameters, want all", out.Metrics[MetricInheritedParams], out.Metrics["params"])
	}
	want, wantCkpt, err = mlp.EvaluateFrom(context.Background(), childGenome, ckpt)
	if err != nil || out.Fitness != want.Accuracy || !bytes.Equal(readFile(t, filepath.Join(dir, "2.ckpt")), wantCkpt) {
		t.Errorf("child: fitness %v, want the model's from its parent %v (%v), and its checkpoint", out.Fitness, want.Accuracy, err)
	}
	if scratch, _ := mlp.Evaluate(context.Background(), childGenome); scratch.Accuracy == out.Fitness && scratch.Loss == out.Metrics["loss"] {
		t.Error("child trained as from scratch")
	}

	// The worker could not hand this mutant its parent's checkpoint: it
	// says so itself, and the evaluator must not contradict it.
	out = MLP{}.Evaluate(context.Background(), worker.Task{Design: mutant(t, parent, 3, childGenome, ckpt), Attempt: 1})
	noInheritance(t, out.Metrics)
}

func TestMLPBadParent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := mlpGenome([]int{8}, 5)
	scratch, err := mlp.Evaluate(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	parent := newDesign(t, "mlpbad", 1, mlpGenome([]int{6}, 2))
	otherShape := readFileOf(t, MLP{}, parent, dir)
	for _, tc := range []struct {
		name   string
		path   string
		reason string
	}{
		{"missing", filepath.Join(dir, "missing.ckpt"), "read parent checkpoint"},
		{"empty", writeFile(t, dir, "empty", nil), "parent checkpoint is empty"},
		{"garbage", writeFile(t, dir, "garbage", []byte("not a checkpoint at all")), "no magic header"},
		{"cut short", writeFile(t, dir, "short", otherShape[:len(otherShape)/2]), "checksum"},
		{"too large", writeFile(t, dir, "large", make([]byte, mlp.MaxCheckpointSize+1)), "over 1048576 bytes"},
		{"a sim checkpoint", writeFile(t, dir, "sim", SimCheckpoint(parent.ID, 500)), "no magic header"},
		{"another shape", writeFile(t, dir, "other", otherShape), "no layer"},
		{"a directory", dir, "read parent checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := mutant(t, parent, 2, g, nil)
			out := MLP{}.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 1, ParentCheckpoint: tc.path})
			if out.Status != schema.StatusOK || out.Fitness != scratch.Accuracy {
				t.Fatalf("got %s with fitness %v (%s), want ok and from scratch %v", out.Status, out.Fitness, out.Error, scratch.Accuracy)
			}
			inherited(t, out.Metrics, false, tc.reason)
			if out.Metrics[MetricInheritedParams] != int64(0) {
				t.Errorf("inherited_params %v (%T), want int64 0", out.Metrics[MetricInheritedParams], out.Metrics[MetricInheritedParams])
			}
		})
	}
}

// readFileOf evaluates d with ev and returns the checkpoint it wrote.
func readFileOf(t *testing.T, ev worker.Evaluator, d *schema.Design, dir string) []byte {
	t.Helper()
	path := filepath.Join(dir, d.ID+".ckpt")
	if out := ev.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 1, CheckpointOut: path}); out.Status != schema.StatusOK {
		t.Fatalf("%s: %+v", d.ID, out)
	}
	return readFile(t, path)
}

func TestMLPCheckpointWriteError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		path string
	}{
		{"no such directory", filepath.Join(dir, "gone", "1.ckpt")},
		{"a directory", dir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDesign(t, "mlpwrite", 1, mlpGenome([]int{4}, 2))
			out := MLP{}.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 1, CheckpointOut: tc.path})
			if out.Status != schema.StatusOK || out.Fitness <= 0 {
				t.Fatalf("got %+v, want ok", out)
			}
			if e, _ := out.Metrics[MetricCheckpointWriteError].(string); !strings.Contains(e, "write checkpoint") {
				t.Errorf("checkpoint_write_error %q", e)
			}
		})
	}
}

func TestMLPDivergedWritesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "1.ckpt")
	g := mlpGenome([]int{64, 32}, 50)
	g["lr"], g["momentum"], g["batch"] = 1e6, 0.99, int64(8)
	for _, l := range g["layers"].([]any) {
		l.(map[string]any)["activation"] = "relu" // tanh saturates rather than diverge
	}
	out := MLP{}.Evaluate(context.Background(), worker.Task{Design: newDesign(t, "mlpdiv", 1, g), Attempt: 1, CheckpointOut: path})
	if out.Status != schema.StatusOK || out.Metrics["epochs"].(int64) >= 50 {
		t.Fatalf("got %+v, want a diverged training", out)
	}
	absent(t, path)
}

func TestSimCheckpointContent(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", simChunk+5)
	for _, tc := range []struct {
		name   string
		design string
		size   int64
		want   string
	}{
		{"none", "run-7", 0, ""},
		{"shorter than the ID", "run-7", 3, "run"},
		{"cut short", "run-7", 12, "run-7run-7ru"},
		{"whole repetitions", "ab", 6, "ababab"},
		{"over a chunk", "run-12", simChunk + 7, strings.Repeat("run-12", simChunk/6+2)[:simChunk+7]},
		{"chunks unaligned", "r-123", 3*simChunk + 1, strings.Repeat("r-123", 3*simChunk/5+1)[:3*simChunk+1]},
		{"ID over a chunk", long, 2*int64(len(long)) + 1, long + long + "x"},
		{"empty ID", "", 4, "\x00\x00\x00\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := SimCheckpoint(tc.design, tc.size); string(got) != tc.want {
				t.Fatalf("%d bytes %.20q..., want %d bytes %.20q...", len(got), got, len(tc.want), tc.want)
			}
		})
	}
}

// simBundle is a Sim that writes checkpoints, a parent it evaluated and
// the checkpoint file it wrote.
type simBundle struct {
	sim    Sim
	dir    string
	parent *schema.Design
	ckpt   string
}

func setupSim(t *testing.T, sim Sim) simBundle {
	t.Helper()
	b := simBundle{sim: sim, dir: t.TempDir(), parent: newDesign(t, "simckpt", 1, map[string]any{"a": 0.3})}
	b.ckpt = filepath.Join(b.dir, "parent.ckpt")
	out := sim.Evaluate(context.Background(), worker.Task{Design: b.parent, Attempt: 1, CheckpointOut: b.ckpt})
	if out.Status != schema.StatusOK {
		t.Fatalf("parent: %+v", out)
	}
	noInheritance(t, out.Metrics)
	if _, ok := out.Metrics[MetricCheckpointWriteError]; ok {
		t.Fatalf("parent: %v", out.Metrics)
	}
	if got := readFile(t, b.ckpt); !bytes.Equal(got, SimCheckpoint(b.parent.ID, sim.Checkpoint)) {
		t.Fatalf("parent wrote %d bytes %.20q, want SimCheckpoint(%s, %d)", len(got), got, b.parent.ID, sim.Checkpoint)
	}
	return b
}

func TestSimInherits(t *testing.T) {
	t.Parallel()
	b := setupSim(t, Sim{Mean: time.Millisecond, Checkpoint: 1000})
	parentBytes := readFile(t, b.ckpt)
	for _, tc := range []struct {
		name string
		ref  []byte // the Inherit reference's bytes; nil: the design has none
	}{{"with Inherit", parentBytes}, {"first parent", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			child := mutant(t, b.parent, 2, map[string]any{"a": 0.4}, tc.ref)
			out := filepath.Join(t.TempDir(), "child.ckpt")
			got := b.sim.Evaluate(context.Background(), worker.Task{Design: child, Attempt: 1, ParentCheckpoint: b.ckpt, CheckpointOut: out})
			if got.Status != schema.StatusOK || got.Fitness != GenomeScore(child.Genome) {
				t.Fatalf("got %+v", got)
			}
			inherited(t, got.Metrics, true, "")
			if got.Metrics[MetricParentBytes] != int64(1000) {
				t.Errorf("parent_bytes %v (%T), want int64 1000", got.Metrics[MetricParentBytes], got.Metrics[MetricParentBytes])
			}
			if !bytes.Equal(readFile(t, out), SimCheckpoint(child.ID, 1000)) {
				t.Error("the child did not write its own checkpoint")
			}
		})
	}
}

func TestSimBadParent(t *testing.T) {
	t.Parallel()
	b := setupSim(t, Sim{Mean: time.Millisecond, Checkpoint: 3*simChunk + 100})
	other := SimCheckpoint(schema.DesignID(b.parent.Run, 9), b.sim.Checkpoint) // an ID of the same length
	late := SimCheckpoint(b.parent.ID, b.sim.Checkpoint)
	late[2*simChunk+50] ^= 1
	orphan := newDesign(t, "simckpt", 5, map[string]any{"a": 0.5})
	for _, tc := range []struct {
		name   string
		design *schema.Design
		path   string
		bytes  int64
		reason string
	}{
		{"missing", nil, filepath.Join(b.dir, "missing"), 0, "read parent checkpoint"},
		{"cut short", nil, writeFile(t, b.dir, "short", readFile(t, b.ckpt)[:100]), 100, "is 100 bytes, want 196708"},
		{"too long", nil, writeFile(t, b.dir, "long", append(readFile(t, b.ckpt), 'x')), b.sim.Checkpoint + 1, "want 196708"},
		{"another design's", nil, writeFile(t, b.dir, "other", other), b.sim.Checkpoint, "does not hold design simckpt-1's bytes (from byte 8)"},
		{"one byte wrong late on", nil, writeFile(t, b.dir, "late", late), b.sim.Checkpoint, "(from byte 131122)"},
		{"no parent to expect", orphan, b.ckpt, 0, "no parent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tc.design
			if d == nil {
				d = mutant(t, b.parent, 2, map[string]any{"a": 0.4}, nil)
			}
			got := b.sim.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 1, ParentCheckpoint: tc.path})
			if got.Status != schema.StatusOK || got.Fitness != GenomeScore(d.Genome) {
				t.Fatalf("got %+v, want ok", got)
			}
			inherited(t, got.Metrics, false, tc.reason)
			if got.Metrics[MetricParentBytes] != tc.bytes {
				t.Errorf("parent_bytes %v, want %d", got.Metrics[MetricParentBytes], tc.bytes)
			}
		})
	}
}

func TestSimCheckpointStopped(t *testing.T) {
	t.Parallel()
	b := setupSim(t, Sim{Mean: time.Millisecond, Curve: true, Steps: 9, Checkpoint: 64})
	child := mutant(t, b.parent, 2, map[string]any{"a": 0.4}, nil)
	out := filepath.Join(b.dir, "child.ckpt")
	got := b.sim.Evaluate(context.Background(), worker.Task{Design: child, Attempt: 1,
		Reports: &recorder{stopAt: 3}, ParentCheckpoint: b.ckpt, CheckpointOut: out})
	if got.Status != schema.StatusStopped || got.Metrics["stopped_at"] != int64(3) {
		t.Fatalf("got %+v, want stopped at 3", got)
	}
	inherited(t, got.Metrics, true, "")
	if !bytes.Equal(readFile(t, out), SimCheckpoint(child.ID, 64)) {
		t.Error("a stopped design wrote no checkpoint")
	}
}

func TestSimCheckpointFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := newDesign(t, "simfailckpt", 1, map[string]any{"a": 0.1})
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, tc := range []struct {
		name   string
		sim    Sim
		ctx    context.Context
		status schema.Status
	}{
		{"negative size", Sim{Checkpoint: -1}, context.Background(), schema.StatusError},
		{"timed out", Sim{Mean: time.Hour, Checkpoint: 10}, expired, schema.StatusTimeout},
		{"infeasible", Sim{Fail: 1, Checkpoint: 10}, context.Background(), schema.StatusInfeasible},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if got := tc.sim.Evaluate(tc.ctx, worker.Task{Design: d, Attempt: 1, CheckpointOut: path}); got.Status != tc.status {
				t.Fatalf("got %+v, want %s", got, tc.status)
			}
			absent(t, path)
		})
	}
	got := Sim{Checkpoint: 10}.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 1, CheckpointOut: dir})
	if e, _ := got.Metrics[MetricCheckpointWriteError].(string); got.Status != schema.StatusOK || !strings.Contains(e, "write checkpoint") {
		t.Errorf("writing to a directory: %+v", got)
	}
	got = Sim{}.Evaluate(context.Background(), worker.Task{Design: d, Attempt: 1, CheckpointOut: filepath.Join(dir, "none")})
	absent(t, filepath.Join(dir, "none"))
	if got.Status != schema.StatusOK || got.Metrics != nil {
		t.Errorf("a Sim without Checkpoint: %+v", got)
	}
}
