package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
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

// logged is a task logger whose entries the test reads.
func logged(t Task) (Task, *logtest.Hook) {
	log, hook := logtest.NewNullLogger()
	t.Log = log.WithField("design", t.Design.ID)
	return t, hook
}

// warnings are the messages of the warnings hook holds that say about.
func warnings(hook *logtest.Hook, about string) []string {
	var out []string
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, about) {
			out = append(out, e.Message)
		}
	}
	return out
}

// An evaluator that dies before it answered a design — it cannot start,
// or dies on its first — ends the design error with its stderr tail, as
// a one-shot evaluator's non-zero exit does: handing it back would turn
// every design into a redelivery and, at the limit, lost (a run of
// `--eval-cmd nonexistent-prog --persistent` once ended exit 0, all lost).
// A process that had answered designs hands a design back on its first
// delivery only; a second death is the design's error.
func TestPersistentDiesBeforeAnswering(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, cmd string
		attempt   int
		handBack  bool
		exit      int
		stderr    string
	}{
		{"cannot start", "nonexistent-prog --persistent", 1, false, 127, "nonexistent-prog: not found"},
		{"dies on its first design", `read -r line; echo "no GPU here" >&2; exit 4`, 1, false, 4, "no GPU here"},
		{"answered before, first delivery", `n=0; while read -r line; do n=$((n+1)); [ $n = 2 ] && { echo oom >&2; exit 9; }; echo '{"fitness": 1}'; done`, 1, true, 9, "oom"},
		{"answered before, second delivery", `n=0; while read -r line; do n=$((n+1)); [ $n = 2 ] && { echo oom >&2; exit 9; }; echo '{"fitness": 1}'; done`, 2, false, 9, "oom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := &Persistent{Cmd: c.cmd}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if c.handBack || !strings.Contains(c.name, "first") && !strings.Contains(c.name, "start") {
				if out := p.Evaluate(ctx, persistentTask(1, 0)); out.Status != schema.StatusOK {
					t.Fatalf("design 1: %+v, want ok", out)
				}
			}
			task := persistentTask(2, 0)
			task.Attempt = c.attempt
			out := p.Evaluate(ctx, task)
			if out.HandBack != c.handBack || out.Exit == nil || *out.Exit != c.exit || !strings.Contains(out.Error, c.stderr) {
				t.Fatalf("got %+v; want hand-back %v, exit %d, an error quoting %q", out, c.handBack, c.exit, c.stderr)
			}
			if !c.handBack && (out.Status != schema.StatusError || out.Fitness != schema.InfeasibleFitness) {
				t.Fatalf("got %+v; want an error result", out)
			}
		})
	}
}

// idEcho is a persistent evaluator that echoes each design's id; $seq and
// $id are the design line's, and what it does per design is $1.
func idEcho(perDesign string) string {
	return `while IFS= read -r line; do
  id=$(printf '%s\n' "$line" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  seq=$(printf '%s\n' "$line" | sed -n 's/.*"seq":\([0-9]*\).*/\1/p')
  ` + perDesign + `
done`
}

// Every result line belongs to one design: a line that arrives with no
// design outstanding, or names another design, or (from an evaluator
// that echoes ids) names none, is a protocol error. It never becomes a
// design's result: the design being served, or the next one when none is,
// ends error naming it, with a warning, and the next design gets a fresh
// process. (A late line was once the next design's result.)
func TestPersistentProtocolErrors(t *testing.T) {
	t.Parallel()
	ok := `printf '{"id":"%s","fitness":0.%s,"metrics":{"for":"%s","pid":%s}}\n' "$id" "$seq" "$id" "$$"`
	cases := []struct {
		name, perDesign, kind string
	}{
		{"two lines back to back", ok + `; [ "$seq" = 1 ] && printf '{"id":"%s","fitness":-1}\n' "$id"`, ProtocolLateLine},
		{"a report between designs", ok + `; [ "$seq" = 1 ] && echo '{"report": {"step": 1, "fitness": 0.5}}'`, ProtocolLateLine},
		{"a late line of the last design", `[ "$seq" = 2 ] && sleep 2; ` + ok +
			`; [ "$seq" = 1 ] && (sleep 0.3; printf '{"id":"%s","fitness":-1,"metrics":{"for":"%s"}}\n' "$id" "$id") &`, ProtocolOtherDesign},
		{"a late line without the id", `[ "$seq" = 2 ] && sleep 2; ` + ok +
			`; [ "$seq" = 1 ] && (sleep 0.3; echo '{"fitness":-1}') &`, ProtocolMissingID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := &Persistent{Cmd: idEcho(c.perDesign)}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			first := p.Evaluate(ctx, persistentTask(1, 0))
			if first.Status != schema.StatusOK || first.Metrics["for"] != "p-1" {
				t.Fatalf("design 1: %+v, want ok, its own", first)
			}
			if c.kind == ProtocolLateLine {
				time.Sleep(300 * time.Millisecond) // the stray line is out before design 2 is sent
			}
			task, hook := logged(persistentTask(2, 0))
			out := p.Evaluate(ctx, task)
			if out.Status != schema.StatusError || out.Fitness != schema.InfeasibleFitness || out.Metrics["protocol_error"] != c.kind ||
				!strings.Contains(out.Error, "protocol error") || !strings.Contains(out.Error, "restarted") {
				t.Fatalf("design 2: %+v; want an error result naming protocol error %s", out, c.kind)
			}
			if w := warnings(hook, ""); len(w) != 1 || !strings.Contains(w[0], "evaluator protocol error") {
				t.Errorf("warnings %q; want one naming the protocol error", w)
			}
			third := p.Evaluate(ctx, persistentTask(3, 0))
			if third.Status != schema.StatusOK || third.Metrics["for"] != "p-3" || third.Metrics["pid"] == first.Metrics["pid"] {
				t.Fatalf("design 3: %+v; want ok, its own, from a fresh process (design 1's pid was %v)", third, first.Metrics["pid"])
			}
		})
	}
}

// An evaluator whose result lines carry no id is still served (it was
// written before the id was echoed), with one warning per worker that a
// late line cannot be told from the next result; a line carrying the
// right id is taken silently.
func TestPersistentResultWithoutID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, cmd string
		warns     int
	}{
		{"no id", `while read -r line; do echo '{"fitness": 1}'; done`, 1},
		{"its id", idEcho(`printf '{"fitness": 1, "id": "%s"}\n' "$id"`), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := &Persistent{Cmd: c.cmd}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var warned []string
			for seq := uint64(1); seq <= 3; seq++ {
				task, hook := logged(persistentTask(seq, int(seq%2)))
				if out := p.Evaluate(ctx, task); out.Status != schema.StatusOK || out.Fitness != 1 {
					t.Fatalf("design %d: %+v, want ok", seq, out)
				}
				warned = append(warned, warnings(hook, "")...)
			}
			if len(warned) != c.warns || c.warns > 0 && !strings.Contains(warned[0], `echo their design's "id"`) {
				t.Fatalf("warnings %q, want %d saying the id is not echoed", warned, c.warns)
			}
		})
	}
}

// lineID reads the id of valid and invalid result lines alike.
func TestLineID(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		`{"id": "r-1", "fitness": 1}`:   "r-1",
		`{"fitness": NaN, "id": "r-2"}`: "r-2",
		`{"id": 3, "fitness": 1}`:       "3",
		`{"id": "r-\"4", "fitness": 1}`: `r-"4`,
		`{"id": null, "fitness": 1}`:    "",
		`{"fitness": 1}`:                "",
	} {
		if got, has := lineID(line); got != want || has != (want != "") {
			t.Errorf("lineID(%s) = %q, %v; want %q", line, got, has, want)
		}
	}
}

// An evaluator written for one-shot mode waits for the end of stdin; in
// persistent mode that never comes. The worker says so while it waits,
// and the timeout's error says so again. One that reports at once, or
// answers in time, gets no such warning.
func TestPersistentFirstAnswerWarning(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, cmd string
		want      schema.Status
		warn      bool
	}{
		{"one-shot evaluator", `cat >/dev/null; echo '{"fitness": 1}'`, schema.StatusTimeout, true},
		{"reports first", `read -r line; echo '{"report": {"step": 1, "fitness": 0.5}}'; read -r answer; sleep 1; echo '{"fitness": 1}'`, schema.StatusOK, false},
		{"answers", `read -r line; echo '{"fitness": 1}'; read -r line`, schema.StatusOK, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := &Persistent{Cmd: c.cmd, FirstAnswerWarn: 300 * time.Millisecond}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			task, hook := logged(persistentTask(1, 0))
			out := p.Evaluate(ctx, task)
			if out.Status != c.want {
				t.Fatalf("got %+v, want %s", out, c.want)
			}
			w := warnings(hook, "first design")
			if !c.warn {
				if len(w) != 0 {
					t.Fatalf("warnings %q, want none", w)
				}
				return
			}
			if len(w) != 1 || !strings.Contains(w[0], "one-shot mode") || !strings.Contains(w[0], "--persistent") {
				t.Fatalf("warnings %q; want one naming one-shot mode and --persistent", w)
			}
			if !strings.Contains(out.Error, "json.load(sys.stdin)") {
				t.Errorf("timeout error %q does not name the likely cause", out.Error)
			}
		})
	}
}

// With an eval timeout shorter than twice FirstAnswerWarn, the warning
// comes at half the time the evaluation has, before the timeout.
func TestPersistentFirstAnswerWarningTimeout(t *testing.T) {
	t.Parallel()
	p := &Persistent{Cmd: `cat >/dev/null`}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	task, hook := logged(persistentTask(1, 0))
	if out := p.Evaluate(ctx, task); out.Status != schema.StatusTimeout {
		t.Fatalf("got %+v, want a timeout", out)
	}
	if w := warnings(hook, "first design"); len(w) != 1 || !strings.Contains(w[0], "one-shot mode") {
		t.Fatalf("warnings %q; want the one-shot warning before the 2 s timeout (FirstAnswerWarn's default is %s)", w, FirstAnswerWarnDefault)
	}
}

// A process that exits between designs, having said nothing wrong, is
// replaced for the next design, which never reached it: no hand-back.
func TestPersistentExitedBetweenDesigns(t *testing.T) {
	t.Parallel()
	p := &Persistent{Cmd: `read -r line; echo "{\"fitness\": 1, \"metrics\": {\"pid\": $$}}"`}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := p.Evaluate(ctx, persistentTask(1, 0))
	if first.Status != schema.StatusOK {
		t.Fatalf("design 1: %+v", first)
	}
	time.Sleep(200 * time.Millisecond) // it exits
	task, hook := logged(persistentTask(2, 0))
	out := p.Evaluate(ctx, task)
	if out.Status != schema.StatusOK || out.Metrics["pid"] == first.Metrics["pid"] {
		t.Fatalf("design 2: %+v; want ok from a new process", out)
	}
	if w := warnings(hook, "exited"); len(w) != 1 || !strings.Contains(w[0], "exited between designs") {
		t.Errorf("warnings %q; want one saying the evaluator exited between designs", w)
	}
}
