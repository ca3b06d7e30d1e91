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
	"unicode/utf8"

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

// A result line that is not one is an error whose message names what is
// wrong with it (a fitness printed as a string once read "not a JSON
// object"), quoting the line; an infeasible line still wins over a
// fitness or metrics that cannot be read.
func TestResultLineMessages(t *testing.T) {
	t.Parallel()
	deep := `{"fitness": 1, "metrics": {"m": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`
	for _, tc := range []struct {
		name   string
		line   string
		status schema.Status
		errHas []string
	}{
		{"fitness a string", `{"fitness": "0.9"}`, schema.StatusError, []string{`fitness is a string ("0.9"), want a number`}},
		{"fitness a boolean", `{"fitness": true}`, schema.StatusError, []string{"fitness is a boolean, want a number"}},
		{"fitness an object", `{"fitness": {"acc": 0.9}}`, schema.StatusError, []string{"fitness is an object, want a number"}},
		{"fitness over range", `{"fitness": 1e400}`, schema.StatusError, []string{"fitness 1e400 is out of range for a 64-bit float: not finite"}},
		{"fitness under range", `{"fitness": -1e999, "metrics": {}}`, schema.StatusError, []string{"fitness -1e999 is out of range"}},
		{"fitness NaN", `{"fitness": NaN}`, schema.StatusError, []string{"fitness is NaN, not a finite number", "json.dumps", `{"infeasible": "reason"}`}},
		{"fitness Infinity", `{"fitness": Infinity, "metrics": {"loss": 0.1}}`, schema.StatusError, []string{"fitness is Infinity, not a finite number"}},
		{"fitness -Infinity", `{"fitness":-Infinity}`, schema.StatusError, []string{"fitness is -Infinity, not a finite number"}},
		{"NaN inside a string is text", `{"fitness": "NaN"}`, schema.StatusError, []string{`fitness is a string ("NaN"), want a number`}},
		{"metric NaN", `{"fitness": 0.5, "metrics": {"acc": 0.5, "loss": NaN}}`, schema.StatusError, []string{"metrics.loss is NaN, which JSON cannot carry", "or null"}},
		{"metric Infinity in an array", `{"fitness": 0.5, "metrics": {"curve": [0.1, Infinity]}}`, schema.StatusError, []string{"metrics.curve[1] is Infinity"}},
		{"nested metric over range", `{"fitness": 0.5, "metrics": {"a": {"b": 2e308}}}`, schema.StatusError, []string{"metrics.a.b 2e308 is out of range for a 64-bit float"}},
		{"metrics not an object", `{"fitness": 0.5, "metrics": [1, 2]}`, schema.StatusError, []string{"metrics is an array, want an object"}},
		{"metrics a string", `{"fitness": 0.5, "metrics": "loss=0.1"}`, schema.StatusError, []string{"metrics is a string, want an object"}},
		{"metrics too deep", deep, schema.StatusError, []string{"nested too deeply", "10000 levels"}},
		{"another key NaN", `{"fitness": 0.5, "note": NaN}`, schema.StatusError, []string{"note is NaN"}},
		{"infeasible not a string", `{"infeasible": true}`, schema.StatusError, []string{"infeasible is a boolean, want a string"}},
		{"infeasible wins over a NaN fitness", `{"fitness": NaN, "infeasible": "diverged"}`, schema.StatusInfeasible, []string{"diverged"}},
		{"infeasible wins over a string fitness", `{"fitness": "x", "infeasible": "oom"}`, schema.StatusInfeasible, []string{"oom"}},
		{"Python dict", `{'fitness': 0.9}`, schema.StatusError, []string{"single quotes", "json.dumps"}},
		{"broken JSON", `{"fitness": 0.9`, schema.StatusError, []string{"not valid JSON (unexpected EOF)"}},
		{"trailing text", `{"fitness": 0.9} done`, schema.StatusError, []string{"not valid JSON"}},
		{"a number", `0.9`, schema.StatusError, []string{"not a JSON object but a number"}},
		{"bare NaN", `NaN`, schema.StatusError, []string{"not a JSON object"}},
		{"plain text", `epoch 3 done`, schema.StatusError, []string{"not a JSON object;"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := ParseOutput(tc.line)
			if out.Status != tc.status {
				t.Fatalf("got %s (%q), want %s", out.Status, clip(out.Error, 500), tc.status)
			}
			for _, want := range tc.errHas {
				if !strings.Contains(out.Error, want) {
					t.Errorf("error %q does not name %q", clip(out.Error, 500), want)
				}
			}
			if tc.status == schema.StatusError && !strings.Contains(out.Error, "last stdout line: ") {
				t.Errorf("error %q does not quote the line", clip(out.Error, 500))
			}
			if len(out.Error) > 600 {
				t.Errorf("error is %d bytes, want it short", len(out.Error))
			}
		})
	}
}

// One-shot and persistent evaluators give the same named messages: they
// share the parsing of a result line.
func TestResultLineMessagesBothModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ line, want string }{
		{`{"fitness": "0.9"}`, "fitness is a string"},
		{`{"fitness": NaN}`, "fitness is NaN"},
		{`{"fitness": 1e400}`, "fitness 1e400 is out of range"},
		{`{"fitness": 1, "metrics": {"loss": -Infinity}}`, "metrics.loss is -Infinity"},
	} {
		for _, mode := range []string{"one-shot", "persistent"} {
			t.Run(mode+"/"+tc.want, func(t *testing.T) {
				t.Parallel()
				file := filepath.Join(t.TempDir(), "result")
				if err := os.WriteFile(file, []byte(tc.line+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				var ev Evaluator = Command{Cmd: "cat " + file}
				if mode == "persistent" {
					p := &Persistent{Cmd: "while read -r line; do cat " + file + "; done"}
					defer p.Close()
					ev = p
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				out := ev.Evaluate(ctx, persistentTask(1, 0))
				if out.Status != schema.StatusError || !strings.Contains(out.Error, tc.want) {
					t.Errorf("got %s %q; want an error naming %q", out.Status, clip(out.Error, 500), tc.want)
				}
			})
		}
	}
}

// An evaluator that prints report lines and no result line is told so,
// with the number of report lines and what a result line looks like; one
// that prints nothing is told that.
func TestNoResultLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cmd string
		errHas    []string
		errLacks  string
	}{
		{"reports only", `for i in 1 2 3; do echo "{\"report\": {\"step\": $i, \"fitness\": 0.$i}}"; done`,
			[]string{"printed only report lines (3 of them) and no result line", `{"fitness": 0.93}`}, `last stdout line: ""`},
		{"reports, then blank lines", `echo '{"report": {"step": 1, "fitness": 0.5}}'; echo; echo "  "`,
			[]string{"only report lines (1 of them)"}, `last stdout line: ""`},
		{"reports, the last with no newline", `echo '{"report": {"step": 1, "fitness": 0.5}}'; printf '{"report": {"step": 2, "fitness": 0.6}}'`,
			[]string{"only report lines (2 of them)"}, "fitness\" or"},
		{"a bad report only", `echo '{"report": {"step": "one", "fitness": 0.5}}'`,
			[]string{"only report lines (1 of them)"}, `last stdout line: ""`},
		{"nothing", `true`, []string{"no output on stdout", `{"fitness": 0.93}`}, `last stdout line: ""`},
		{"stderr only", `echo oops >&2`, []string{"no output on stdout"}, "report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := Command{Cmd: tc.cmd}.Evaluate(context.Background(), commandTask(t))
			if out.Status != schema.StatusError {
				t.Fatalf("got %s (%q), want error", out.Status, out.Error)
			}
			for _, want := range tc.errHas {
				if !strings.Contains(out.Error, want) {
					t.Errorf("error %q does not name %q", out.Error, want)
				}
			}
			if strings.Contains(out.Error, tc.errLacks) {
				t.Errorf("error %q says %q", out.Error, tc.errLacks)
			}
		})
	}
}

// pythonTraceback is the stderr of a Python evaluator that failed deep
// in its training: the exception line comes last.
func pythonTraceback(frames int) string {
	var b strings.Builder
	b.WriteString("Traceback (most recent call last):\n")
	for i := range frames {
		fmt.Fprintf(&b, "  File \"/home/user/project/train.py\", line %d, in step_%d\n    loss = model(batch).backward()\n", 100+i, i)
	}
	b.WriteString("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
	return b.String()
}

// The per-evaluation warning shows the end of the evaluator's stderr, not
// its beginning: the exception line of a Python traceback is its last.
func TestLogErrorKeepsStderrEnd(t *testing.T) {
	t.Parallel()
	const exception = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
	for _, tc := range []struct {
		name, text string
		has        []string
		lacks      string
	}{
		{"a long traceback", appendTail("evaluator exit status 1", pythonTraceback(40)),
			[]string{"evaluator exit status 1; stderr tail: ", "…", exception}, "Traceback (most recent"},
		{"a short traceback is whole", appendTail("evaluator exit status 1", pythonTraceback(1)),
			[]string{"Traceback (most recent call last)", exception}, "…"},
		{"one long last line", appendTail("evaluator signal: killed", strings.Repeat("x", 1000)+"END"),
			[]string{"evaluator signal: killed; stderr tail: …", "xxEND"}, ""},
		{"a timeout with a traceback", appendTail("evaluation timed out", pythonTraceback(40)),
			[]string{"evaluation timed out", exception}, ""},
		{"no stderr: the beginning", strings.Repeat("evaluator output: bad; ", 40), []string{"evaluator output: bad;"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := logError(tc.text, 300)
			for _, want := range tc.has {
				if !strings.Contains(got, want) {
					t.Errorf("logged %q, want it to contain %q", got, want)
				}
			}
			if tc.lacks != "" && strings.Contains(got, tc.lacks) {
				t.Errorf("logged %q, want no %q", got, tc.lacks)
			}
			if len(got) > 300+len("…") {
				t.Errorf("logged %d bytes, want at most about 300", len(got))
			}
			if !utf8.ValidString(got) {
				t.Errorf("logged invalid UTF-8: %q", got)
			}
		})
	}
}
