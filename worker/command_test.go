package worker

import (
	"context"
	"fmt"
	"github.com/evoq/evoq/internal/testutil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// commandTask is the task the Command tests evaluate.
func commandTask(t *testing.T) Task {
	t.Helper()
	return Task{Design: newDesign(t, "cmdrun", 7, map[string]any{"x": 1.5, "name": "seven"}),
		Worker: "w-1", Slot: 2, Attempt: 3}
}

func TestCommandOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cmd     string
		status  schema.Status
		fitness float64
		metrics map[string]any
		errHas  []string // substrings of Outcome.Error
	}{{
		name: "ok with metrics", cmd: `echo "epoch 1"; echo '{"fitness": 0.93, "metrics": {"loss": 0.25, "epochs": 3}}'`,
		status: schema.StatusOK, fitness: 0.93, metrics: map[string]any{"loss": 0.25, "epochs": 3.0},
	}, {
		name: "ok without metrics, blank lines after", cmd: `echo '{"fitness": -2}'; echo; echo "   "`,
		status: schema.StatusOK, fitness: -2,
	}, {
		name: "infeasible", cmd: `echo '{"infeasible": "too many layers"}'`,
		status: schema.StatusInfeasible, fitness: schema.InfeasibleFitness, errHas: []string{"too many layers"},
	}, {
		name: "non-zero exit carries the stderr tail", cmd: `echo '{"fitness": 1}'; echo "CUDA out of memory" >&2; exit 3`,
		status: schema.StatusError, fitness: schema.InfeasibleFitness,
		errHas: []string{"exit status 3", "stderr tail: CUDA out of memory"},
	}, {
		name: "killed by a signal", cmd: `kill -9 $$`,
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: []string{"signal: killed"},
	}, {
		name: "garbage last line is quoted", cmd: `echo '{"fitness": 1}'; echo "Segmentation fault (core dumped)"`,
		status: schema.StatusError, fitness: schema.InfeasibleFitness,
		errHas: []string{"not a JSON object", `"Segmentation fault (core dumped)"`},
	}, {
		name: "no output", cmd: `true`,
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: []string{"no output"},
	}, {
		name: "empty command", cmd: ``,
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: []string{"no output"},
	}, {
		name: "NaN fitness", cmd: `echo '{"fitness": NaN}'`,
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: []string{`{\"fitness\": NaN}`},
	}, {
		name: "overflowing fitness", cmd: `echo '{"fitness": 1e999}'`,
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: []string{"1e999"},
	}, {
		name: "object without fitness", cmd: `echo '{"metrics": {"loss": 1}}'`,
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: []string{`want {"fitness": number}`},
	}, {
		name:   "5 MB flood then a valid last line",
		cmd:    `head -c 5000000 /dev/zero | tr '\0' x; echo; head -c 3000000 /dev/zero | tr '\0' '\n'; echo '{"fitness": 0.5}'`,
		status: schema.StatusOK, fitness: 0.5,
	}, {
		name:   "flood without a newline",
		cmd:    `head -c 3000000 /dev/zero | tr '\0' x`,
		status: schema.StatusError, fitness: schema.InfeasibleFitness,
		errHas: []string{"result line is 3000000 bytes", fmt.Sprintf("over the %d-byte limit", schema.MaxResultLine), `"xxxx`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			out := Command{Cmd: tc.cmd}.Evaluate(ctx, commandTask(t))
			if out.Status != tc.status || out.Fitness != tc.fitness {
				t.Fatalf("got %s fitness %v (error %q), want %s fitness %v", out.Status, out.Fitness, out.Error, tc.status, tc.fitness)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(out.Error, s) {
					t.Errorf("error %q does not contain %q", clip(out.Error, 500), s)
				}
			}
			if len(tc.errHas) == 0 && out.Error != "" {
				t.Errorf("unexpected error %q", out.Error)
			}
			if len(out.Error) > 2*StderrKeep+300 {
				t.Errorf("error is %d bytes, want it bounded by the kept tails", len(out.Error))
			}
			for k, want := range tc.metrics {
				if got := out.Metrics[k]; got != want {
					t.Errorf("metric %s = %v (%T), want %v", k, got, got, want)
				}
			}
		})
	}
}

func TestCommandStderrFloodIsBounded(t *testing.T) {
	t.Parallel()
	cmd := `head -c 2000000 /dev/zero | tr '\0' e >&2; echo "LAST WORDS" >&2; exit 1`
	out := Command{Cmd: cmd}.Evaluate(context.Background(), commandTask(t))
	if out.Status != schema.StatusError {
		t.Fatalf("got %s, want error", out.Status)
	}
	if !strings.HasSuffix(out.Error, "LAST WORDS") {
		t.Errorf("error does not end with the stderr tail: ...%q", out.Error[max(0, len(out.Error)-100):])
	}
	if len(out.Error) > StderrKeep+100 {
		t.Errorf("error is %d bytes, want at most the %d-byte stderr tail plus a short message", len(out.Error), StderrKeep)
	}
}

func TestCommandEnvironmentAndStdin(t *testing.T) {
	t.Parallel()
	cmd := `printf '{"fitness": 1, "metrics": {"run": "%s", "id": "%s", "attempt": "%s", "slot": "%s", "worker": "%s", "extra": "%s", "design": %s}}\n' ` +
		`"$EVOQ_RUN" "$EVOQ_DESIGN_ID" "$EVOQ_ATTEMPT" "$EVOQ_SLOT" "$EVOQ_WORKER" "$EXTRA" "$(cat)"`
	task := commandTask(t)
	out := Command{Cmd: cmd, Env: []string{"EXTRA=from-config"}}.Evaluate(context.Background(), task)
	if out.Status != schema.StatusOK {
		t.Fatalf("got %s: %s", out.Status, out.Error)
	}
	for k, want := range map[string]string{
		"run": "cmdrun", "id": schema.DesignID("cmdrun", 7), "attempt": "3", "slot": "2", "worker": "w-1", "extra": "from-config",
	} {
		if got := out.Metrics[k]; got != want {
			t.Errorf("%s = %v, want %q", k, got, want)
		}
	}
	d, ok := out.Metrics["design"].(map[string]any)
	if !ok {
		t.Fatalf("design on stdin did not come back as a JSON object: %#v", out.Metrics["design"])
	}
	g, _ := d["genome"].(map[string]any)
	if d["id"] != task.Design.ID || d["run"] != "cmdrun" || d["seq"] != 7.0 || g["x"] != 1.5 || g["name"] != "seven" {
		t.Errorf("design on stdin = %v, want %+v", d, *task.Design)
	}
}

// alive reports whether pid is a live process. A zombie counts as dead: it
// has exited and only waits for its parent (here, whatever adopted it) to
// reap it.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// readPID waits for a script to write its child's pid to path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testutil.WaitFor(t, 5*time.Second, "the script's child pid", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

func TestCommandKillsProcessGroup(t *testing.T) {
	t.Parallel()
	const child = `sleep 1000 & echo $! > "$PIDFILE"; `
	for _, tc := range []struct {
		name   string
		cmd    string
		cancel bool // cancel the context instead of letting its deadline pass
		status schema.Status
		errHas string
	}{
		{"deadline", child + `wait`, false, schema.StatusTimeout, "timed out"},
		{"deadline, SIGTERM ignored", `trap '' TERM; ` + child + `wait`, false, schema.StatusTimeout, "timed out"},
		{"cancelled", `echo "still training" >&2; ` + child + `wait`, true, schema.StatusError, "context canceled; stderr tail: still training"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			timeout := 500 * time.Millisecond
			if tc.cancel {
				timeout = time.Minute // cancelled by hand long before
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			done := make(chan Outcome, 1)
			go func() {
				done <- Command{Cmd: tc.cmd, Env: []string{"PIDFILE=" + pidFile}}.Evaluate(ctx, commandTask(t))
			}()
			pid := readPID(t, pidFile)
			if tc.cancel {
				cancel()
			}
			var out Outcome
			select {
			case out = <-done:
			case <-time.After(KillGrace + 10*time.Second):
				t.Fatal("Evaluate did not return after its context ended")
			}
			if out.Status != tc.status || !strings.Contains(out.Error, tc.errHas) {
				t.Errorf("got %s %q, want %s containing %q", out.Status, out.Error, tc.status, tc.errHas)
			}
			testutil.WaitFor(t, 2*time.Second, "the evaluator's background child to die", func() bool { return !alive(pid) })
		})
	}
}

func TestCommandReapsStrayChildren(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cmd  string
	}{
		{"child detached from stdout", `sleep 1000 >/dev/null 2>&1 & echo $! > "$PIDFILE"; echo '{"fitness": 1}'`},
		{"child holding stdout", `sleep 1000 & echo $! > "$PIDFILE"; echo '{"fitness": 1}'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			out := Command{Cmd: tc.cmd, Env: []string{"PIDFILE=" + pidFile}}.Evaluate(ctx, commandTask(t))
			if out.Status != schema.StatusOK || out.Fitness != 1 {
				t.Errorf("got %s fitness %v (%q), want ok 1", out.Status, out.Fitness, out.Error)
			}
			if ctx.Err() != nil {
				t.Errorf("evaluation ran until its deadline: %v", ctx.Err())
			}
			pid := readPID(t, pidFile)
			testutil.WaitFor(t, 2*time.Second, "the stray child to die", func() bool { return !alive(pid) })
		})
	}
}

func TestParseOutput(t *testing.T) {
	t.Parallel()
	long := `{"fitness": ` + strings.Repeat("1", 300)
	for _, tc := range []struct {
		name    string
		line    string
		status  schema.Status
		fitness float64
		errHas  string
	}{
		{"fitness", `{"fitness": 0.93}`, schema.StatusOK, 0.93, ""},
		{"integer fitness", `{"fitness": 3}`, schema.StatusOK, 3, ""},
		{"negative fitness", `{"fitness": -1.5, "metrics": {}}`, schema.StatusOK, -1.5, ""},
		{"unknown keys ignored", `{"fitness": 0.5, "note": "x"}`, schema.StatusOK, 0.5, ""},
		{"infeasible", `{"infeasible": "does not fit"}`, schema.StatusInfeasible, schema.InfeasibleFitness, "does not fit"},
		{"infeasible wins over fitness", `{"fitness": 0.9, "infeasible": "oom"}`, schema.StatusInfeasible, schema.InfeasibleFitness, "oom"},
		{"empty", ``, schema.StatusError, schema.InfeasibleFitness, "no output on stdout"},
		{"not JSON", `loss=0.3`, schema.StatusError, schema.InfeasibleFitness, `not a JSON object; last stdout line: "loss=0.3"`},
		{"array", `[0.9]`, schema.StatusError, schema.InfeasibleFitness, "not a JSON object"},
		{"bare number", `0.9`, schema.StatusError, schema.InfeasibleFitness, "not a JSON object"},
		{"null", `null`, schema.StatusError, schema.InfeasibleFitness, `want {"fitness": number}`},
		{"empty object", `{}`, schema.StatusError, schema.InfeasibleFitness, `want {"fitness": number}`},
		{"fitness as string", `{"fitness": "0.9"}`, schema.StatusError, schema.InfeasibleFitness, `fitness is a string ("0.9"), want a number`},
		{"fitness null", `{"fitness": null}`, schema.StatusError, schema.InfeasibleFitness, `want {"fitness": number}`},
		{"NaN", `{"fitness": NaN}`, schema.StatusError, schema.InfeasibleFitness, "NaN"},
		{"overflow", `{"fitness": -1e999}`, schema.StatusError, schema.InfeasibleFitness, "1e999"},
		{"long line is clipped", long, schema.StatusError, schema.InfeasibleFitness, strings.Repeat("1", 188) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := ParseOutput(tc.line)
			if out.Status != tc.status || out.Fitness != tc.fitness || !strings.Contains(out.Error, tc.errHas) {
				t.Errorf("got %s %v %q, want %s %v containing %q", out.Status, out.Fitness, out.Error, tc.status, tc.fitness, tc.errHas)
			}
			if tc.errHas == "" && out.Error != "" {
				t.Errorf("unexpected error %q", out.Error)
			}
			if len(out.Error) > 300 {
				t.Errorf("error is %d bytes, want the line clipped", len(out.Error))
			}
		})
	}
}

func TestParseOutputMetrics(t *testing.T) {
	t.Parallel()
	out := ParseOutput(`{"fitness": 0.8, "metrics": {"loss": 0.1, "params": 1218, "arch": "relu", "curve": [1, 2]}}`)
	if out.Status != schema.StatusOK || out.Fitness != 0.8 {
		t.Fatalf("got %+v", out)
	}
	if len(out.Metrics) != 4 || out.Metrics["loss"] != 0.1 || out.Metrics["params"] != 1218.0 || out.Metrics["arch"] != "relu" {
		t.Errorf("metrics %v", out.Metrics)
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		n      int
		writes []string
		want   string
	}{
		{"nothing", 8, nil, ""},
		{"under the limit", 8, []string{"ab", "cd"}, "abcd"},
		{"exactly the limit", 4, []string{"ab", "cd"}, "abcd"},
		{"keeps the last bytes across writes", 5, []string{"abc", "defgh"}, "defgh"},
		{"keeps the last bytes of one write", 5, []string{"0123456789"}, "56789"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tl := newTail(tc.n)
			for _, w := range tc.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := tl.String(); got != tc.want {
				t.Errorf("String = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLastLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		max    int
		writes []string
		line   string
		n      int
	}{
		{"nothing", 64, nil, "", 0},
		{"last line", 64, []string{"one\ntwo\nthree\n"}, "three", 5},
		{"last line without newline", 64, []string{"one\ntw", "o"}, "two", 3},
		{"line across writes", 64, []string{"on", "e\ntw", "o\n"}, "two", 3},
		{"trailing blank lines", 64, []string{"one\ntwo\n\n  \n\r\n"}, "two", 3},
		{"CRLF", 64, []string{"one\r\ntwo\r\n"}, "two", 3},
		{"indented", 64, []string{"  {\"fitness\": 1}  \n"}, `{"fitness": 1}`, 14},
		{"only blanks", 64, []string{"\n\n \n"}, "", 0},
		{"at the limit", 6, []string{"first\nsecond\n"}, "second", 6},
		{"over the limit: the beginning and the whole length", 6, []string{"first\nsecond line\n"}, "second", 11},
		{"over the limit across writes", 4, []string{"ab", "cdef", "gh"}, "abcd", 8},
		{"a short line after a long one", 4, []string{"abcdefgh\nxy\n"}, "xy", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLastLine(tc.max)
			for _, w := range tc.writes {
				if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if line, n := l.Line(); line != tc.line || n != tc.n {
				t.Errorf("Line = %q, %d; want %q, %d", line, n, tc.line, tc.n)
			}
		})
	}
}

// TestLastLineBoundsMemory floods stdout the way os/exec feeds it (32 KiB
// chunks), one line longer than a result line may be, and checks that
// the writer never holds much more than one result line.
func TestLastLineBoundsMemory(t *testing.T) {
	t.Parallel()
	const chunk, flood = 32 << 10, 5 << 20
	l := newLastLine(schema.MaxResultLine)
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = 'a' + byte(i%26)
	}
	maxCap := 0
	for written := 0; written < flood; written += chunk {
		l.Write(buf)
		maxCap = max(maxCap, cap(l.cur.buf)+cap(l.last))
	}
	if line, n := l.Line(); len(line) != schema.MaxResultLine || n != flood {
		t.Errorf("Line holds %d bytes of %d, want %d of %d", len(line), n, schema.MaxResultLine, flood)
	}
	l.Write([]byte("\n{\"fitness\": 0.5}\n"))
	if line, n := l.Line(); line != `{"fitness": 0.5}` || n != len(line) {
		t.Errorf("Line = %q, %d", line, n)
	}
	if limit := 2 * (schema.MaxResultLine + chunk); maxCap > limit {
		t.Errorf("buffers grew to %d bytes, want at most %d", maxCap, limit)
	}
}

// The outcome says how the evaluator's process ended: the exit code, 0
// for ok, or the signal that killed it, whoever sent it.
func TestCommandProcessEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cmd     string
		timeout time.Duration
		status  schema.Status
		exit    int // -1: none
		signal  string
	}{
		{"ok", `echo '{"fitness": 1}'`, 0, schema.StatusOK, 0, ""},
		{"infeasible", `echo '{"infeasible": "too big"}'`, 0, schema.StatusInfeasible, 0, ""},
		{"exit 0 without a result", `true`, 0, schema.StatusError, 0, ""},
		{"exit 3", `echo "RuntimeError: CUDA error: uncorrectable ECC error encountered" >&2; exit 3`, 0, schema.StatusError, 3, ""},
		{"killed by SIGKILL, as by the OOM killer", `kill -KILL $$`, 0, schema.StatusError, -1, "SIGKILL"},
		{"aborted", `kill -ABRT $$`, 0, schema.StatusError, -1, "SIGABRT"},
		{"timed out: the worker's SIGTERM", `sleep 1000`, 300 * time.Millisecond, schema.StatusTimeout, -1, "SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			if tc.timeout > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tc.timeout)
			}
			defer cancel()
			out := Command{Cmd: tc.cmd}.Evaluate(ctx, commandTask(t))
			exit := -1
			if out.Exit != nil {
				exit = *out.Exit
			}
			if out.Status != tc.status || exit != tc.exit || out.Signal != tc.signal {
				t.Errorf("got %s exit %d signal %q (%q); want %s exit %d signal %q",
					out.Status, exit, out.Signal, clip(out.Error, 200), tc.status, tc.exit, tc.signal)
			}
		})
	}
}

// An evaluator that does not start has no process to say anything of.
func TestCommandNoProcess(t *testing.T) {
	t.Parallel()
	out := Command{Cmd: "true", LogDir: "/dev/null/not-a-dir"}.Evaluate(context.Background(), commandTask(t))
	if out.Status != schema.StatusError || out.Exit != nil || out.Signal != "" {
		t.Errorf("got %s exit %v signal %q (%q); want an error without exit or signal", out.Status, out.Exit, out.Signal, out.Error)
	}
}
