package worker

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// resultLineOf is a result line of exactly n bytes, padded out by one
// metrics entry.
func resultLineOf(n int) (line string, blob int) {
	head, foot := `{"fitness": 0.5, "metrics": {"blob": "`, `"}}`
	blob = n - len(head) - len(foot)
	return head + strings.Repeat("x", blob) + foot, blob
}

// A result line may be as long as schema.MaxResultLine, one-shot or
// persistent, and its result then fits in a message; a longer line is an
// error result that names its size and the limit. (A 70 KB metrics entry
// once failed every design: one-shot stdout was cut at 64 KiB.)
func TestResultLineLimit(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name string
		eval func(file string) Evaluator
	}{
		{"one-shot", func(file string) Evaluator { return Command{Cmd: "cat " + file} }},
		{"persistent", func(file string) Evaluator {
			return &Persistent{Cmd: "while read -r line; do cat " + file + "; done"}
		}},
	}
	sizes := []struct {
		name string
		n    int
		ok   bool
	}{
		{"70 KB of metrics", 70_000, true},
		{"at the limit", schema.MaxResultLine, true},
		{"one byte over", schema.MaxResultLine + 1, false},
		{"2 MiB", 2 << 20, false},
	}
	for _, m := range modes {
		for _, sz := range sizes {
			t.Run(m.name+"/"+sz.name, func(t *testing.T) {
				t.Parallel()
				line, blob := resultLineOf(sz.n)
				file := filepath.Join(t.TempDir(), "result")
				if err := os.WriteFile(file, []byte(line+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				ev := m.eval(file)
				if c, ok := ev.(io.Closer); ok {
					defer c.Close()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				task := persistentTask(1, 0)
				out := ev.Evaluate(ctx, task)
				if !sz.ok {
					checkTooLong(t, out, sz.n)
					return
				}
				if out.Status != schema.StatusOK || out.Fitness != 0.5 {
					t.Fatalf("got %s, fitness %v (%s); want ok, 0.5", out.Status, out.Fitness, clip(out.Error, 300))
				}
				if got, _ := out.Metrics["blob"].(string); len(got) != blob {
					t.Fatalf("metrics entry of %d bytes, want %d", len(got), blob)
				}
				now := time.Now()
				_, err := schema.EncodeResult(&schema.Result{Run: task.Design.Run, DesignID: task.Design.ID,
					Design: *task.Design, Status: out.Status, Fitness: out.Fitness, Metrics: out.Metrics,
					Worker: "w", Host: "a-host-name", Slot: 0, Attempt: 1, Start: now, Stop: now, Gap: -1})
				if err != nil {
					t.Errorf("the result of a %d-byte line does not fit in a message: %v", sz.n, err)
				}
			})
		}
	}
}

// checkTooLong checks the error result of an n-byte result line.
func checkTooLong(t *testing.T, out Outcome, n int) {
	t.Helper()
	if out.Status != schema.StatusError {
		t.Fatalf("got %s (%s), want an error result", out.Status, clip(out.Error, 300))
	}
	for _, want := range []string{fmt.Sprintf("%d bytes", n), fmt.Sprintf("%d-byte limit", schema.MaxResultLine), `{\"fitness\": 0.5`} {
		if !strings.Contains(out.Error, want) {
			t.Errorf("error %q does not name %q", clip(out.Error, 500), want)
		}
	}
	if len(out.Error) > 1000 {
		t.Errorf("error is %d bytes, want it short", len(out.Error))
	}
}
