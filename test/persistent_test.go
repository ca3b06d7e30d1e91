package test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A persistent evaluator process that dies after it has served designs
// hands its design back; the design is evaluated again (attempt 2) by a
// fresh process, and every other design is served by the long-lived
// process of its slot. (Design 7 comes after each slot's first design;
// a process that died on its first design would end it error instead:
// TestPersistentEvaluatorNotFound.)
func TestPersistentEvaluatorRestart(t *testing.T) {
	t.Parallel()
	const run, budget = "persist", 30
	script := filepath.Join(t.TempDir(), "eval.sh")
	write(t, script, `while IFS= read -r line; do
  seq=$(printf '%s\n' "$line" | sed -n 's/.*"seq":\([0-9]*\).*/\1/p')
  case "$line" in *'"attempt":1}'*) [ "$seq" = 7 ] && exit 3 ;; esac
  printf '{"fitness": 0.%s, "metrics": {"pid": %s, "seq": %s}}\n' "$seq" "$$" "$seq"
done
`)
	dir := t.TempDir()
	args := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--run", run, "--eval-cmd", "sh " + script,
		"--persistent", "--slots", "2", "--budget", fmt.Sprint(budget), "--init", "10", "--pool", "5"}
	r := evoq(t, time.Minute, args...)
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, tail(r.stderr, 3000))
	}
	if s := lastJSON(t, r.stdout); s.Evaluations != budget || s.OK != budget {
		t.Fatalf("evaluations %d, ok %d; want %d, %d", s.Evaluations, s.OK, budget, budget)
	}
	if !hasLine(r.stderr, "design handed back", run+"-7", "exit status 3") {
		t.Errorf("no log line says design 7's evaluator died with exit status 3:\n%s", tail(r.stderr, 3000))
	}
	results := readResults(t, dir, run)
	checkOneResultEach(t, results, budget)
	perPid := map[string]int{}
	slotPids := map[int]map[string]bool{}
	for _, res := range results {
		pid, seq := fmt.Sprint(res.Metrics["pid"]), fmt.Sprint(res.Metrics["seq"])
		if res.Status != schema.StatusOK || seq != fmt.Sprint(res.Design.Seq) || res.Fitness != mustFloat(t, "0."+seq) {
			t.Errorf("%s: %s, fitness %v, metrics %v; want ok with its own seq", res.DesignID, res.Status, res.Fitness, res.Metrics)
		}
		wantAttempt := 1
		if res.Design.Seq == 7 {
			wantAttempt = 2
		}
		if res.Attempt != wantAttempt {
			t.Errorf("%s: attempt %d, want %d", res.DesignID, res.Attempt, wantAttempt)
		}
		perPid[pid]++
		if slotPids[res.Slot] == nil {
			slotPids[res.Slot] = map[string]bool{}
		}
		slotPids[res.Slot][pid] = true
	}
	// Two slots' processes and the one started after design 7's died.
	if len(perPid) != 3 {
		t.Errorf("designs by evaluator pid: %v; want 3 processes", perPid)
	}
	if n := len(slotPids[0]) + len(slotPids[1]); len(slotPids) != 2 || n != 3 {
		t.Errorf("evaluator pids by slot: %v; want one slot with 1 process, the other with 2", slotPids)
	}
	t.Logf("designs by evaluator pid: %v", perPid)
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// lateLineEvaluator serves through the evoq_eval helper, whose result
// lines echo the design's id; 0.3 s after design 3's result a timer
// prints a result line of its own, as a training thread left running
// might. Every design trains 0.5 s, so the line arrives during the next.
const lateLineEvaluator = `import json, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import evoq_eval


def train(d):
    time.sleep(0.5)
    if d["seq"] == 3:
        line = json.dumps({"fitness": -1, "metrics": {"for": d["id"]}}) + "\n"
        threading.Timer(0.3, lambda: os.write(1, line.encode())).start()
    return float(d["seq"]), {"for": d["id"], "pid": os.getpid()}


evoq_eval.main(train)
`

// backToBackEvaluator echoes each design's id and, for design 3, prints a
// second result line right after the first.
const backToBackEvaluator = `while IFS= read -r line; do
  id=$(printf '%s\n' "$line" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  seq=$(printf '%s\n' "$line" | sed -n 's/.*"seq":\([0-9]*\).*/\1/p')
  sleep 0.2
  printf '{"id":"%s","fitness":%s,"metrics":{"for":"%s","pid":%s}}\n' "$id" "$seq" "$id" "$$"
  [ "$seq" = 3 ] && printf '{"id":"%s","fitness":-1,"metrics":{"for":"%s"}}\n' "$id" "$id"
done
`

// A persistent evaluator that prints a second result line, 0.3 s after
// its result or right with it: the line is nobody's result. (It once
// became the next design's: fitness -1 with metrics.for naming the design
// before.) The design the slot serves when the line is seen — the next
// after design 3 on its slot — ends error with metrics.protocol_error, a
// warning names the line and the design it came after, and the run goes
// on with a fresh process; every ok result is its own design's.
func TestPersistentLateLine(t *testing.T) {
	t.Parallel()
	helper, err := filepath.Abs(filepath.Join("..", "python"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, file, script string
		cmd                func(path string) string
		kinds              []string // what the line may be taken for
	}{
		{"0.3 s late, through the helper", "eval.py", lateLineEvaluator,
			func(path string) string { return python3(t) + " " + path + " " + helper },
			[]string{"missing_id", "late_line"}}, // late_line: the next design line was slow to come
		// Right after the result, the line is in before the next design
		// line is sent, almost always: or else it names design 3 while the
		// evaluator serves another.
		{"back to back", "eval.sh", backToBackEvaluator,
			func(path string) string { return "sh " + path }, []string{"late_line", "other_design"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run, budget := fmt.Sprintf("late%d", i), 12
			script := filepath.Join(t.TempDir(), c.file)
			write(t, script, c.script)
			dir := t.TempDir()
			r := evoq(t, 2*time.Minute, "run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--run", run,
				"--eval-cmd", c.cmd(script), "--persistent", "--slots", "2", "--budget", fmt.Sprint(budget), "--init", "6", "--pool", "4")
			if r.code != 0 {
				t.Fatalf("exit %d:\n%s", r.code, tail(r.stderr, 3000))
			}
			if s := lastJSON(t, r.stdout); s.Evaluations != budget {
				t.Errorf("evaluations %d, want %d", s.Evaluations, budget)
			}
			checkLateLine(t, readResults(t, dir, run), run, c.kinds)
			if !hasLine(r.stderr, "level=warning", "evaluator protocol error", "after="+run+"-3", "protocol_error=") {
				t.Errorf("no warning names the protocol error and design 3:\n%s", tail(r.stderr, 3000))
			}
		})
	}
}

// checkLateLine checks that no result took the stray line of design 3 and
// that one result, the next on design 3's slot, records it.
func checkLateLine(t *testing.T, results []*schema.Result, run string, kinds []string) {
	t.Helper()
	var third *schema.Result
	var protocol []*schema.Result
	for _, res := range results {
		if f, ok := res.Metrics["for"]; ok && f != res.DesignID {
			t.Errorf("%s (%s, fitness %v) has metrics.for %v: another design's line", res.DesignID, res.Status, res.Fitness, f)
		}
		if res.Status == schema.StatusOK && res.Fitness != float64(res.Design.Seq) {
			t.Errorf("%s: ok with fitness %v, want its seq, %d", res.DesignID, res.Fitness, res.Design.Seq)
		}
		if res.DesignID == run+"-3" && res.Status == schema.StatusOK {
			third = res
		}
		if _, ok := res.Metrics["protocol_error"]; ok {
			protocol = append(protocol, res)
		}
	}
	if third == nil || third.Fitness != 3 {
		t.Fatalf("design 3: %+v; want ok with fitness 3", third)
	}
	if len(protocol) != 1 {
		t.Fatalf("%d results record a protocol error, want 1: %v", len(protocol), protocol)
	}
	p := protocol[0]
	kind := fmt.Sprint(p.Metrics["protocol_error"])
	if p.Status != schema.StatusError || !strings.Contains(p.Error, "evaluator protocol error") || !containsString(kinds, kind) {
		t.Errorf("%s: %s, metrics %v, error %q; want an error, protocol error one of %v", p.DesignID, p.Status, p.Metrics, p.Error, kinds)
	}
	if p.Slot != third.Slot || p.Worker != third.Worker || p.Start.Before(third.Stop) {
		t.Errorf("the protocol error is on %s (slot %d, started %s); want the design after %s on its slot %d (ended %s)",
			p.DesignID, p.Slot, p.Start.Format(time.StampMicro), third.DesignID, third.Slot, third.Stop.Format(time.StampMicro))
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A persistent evaluator that cannot start ends every design error with
// the shell's complaint, not handed back until lost: the run fails fast
// with exit 3, quoting it. (It once ended exit 0, every design lost.)
func TestPersistentEvaluatorNotFound(t *testing.T) {
	t.Parallel()
	began := time.Now()
	r := evoq(t, time.Minute, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--eval-cmd", "nonexistent-prog",
		"--persistent", "--budget", "20")
	took := time.Since(began)
	if r.code != 3 || !strings.Contains(r.stderr, "nonexistent-prog: not found") || !strings.Contains(r.stderr, "--eval-cmd") {
		t.Fatalf("exit %d; want 3 quoting the shell's not found and naming --eval-cmd\nstderr:\n%s", r.code, tail(r.stderr, 4000))
	}
	if took > 10*time.Second {
		t.Errorf("the run took %s to fail, want under 10 s", took.Round(time.Millisecond))
	}
	if strings.Contains(r.stderr, "lost") {
		t.Errorf("stderr mentions lost designs:\n%s", tail(r.stderr, 3000))
	}
}

// An evaluator written for one-shot mode reads all of stdin; started with
// --persistent it waits for an end of stdin that never comes. Within 30 s
// the worker says so, naming the cause and the fix.
func TestPersistentOneShotEvaluatorWarns(t *testing.T) {
	t.Parallel()
	oneShot := python3(t) + ` -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"fitness":1}))'`
	p := background(t, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--eval-cmd", oneShot, "--persistent",
		"--slots", "1", "--budget", "4", "--init", "2", "--pool", "2")
	warned := func() bool {
		return hasLine(p.stderr.String(), "level=warning", "has not answered its first design", "json.load(sys.stdin)",
			"drop --persistent")
	}
	waitShowing(t, 30*time.Second, func() bool { return warned() || p.exited() }, func() string { return tail(p.stderr.String(), 3000) })
	if !warned() {
		t.Fatalf("evoq exited without the warning:\n%s", tail(p.stderr.String(), 3000))
	}
	// The worker's heartbeat carries it to the run's warnings.
	waitShowing(t, 30*time.Second, func() bool {
		return hasLine(p.stderr.String(), "level=warning", "worker w1 (host", "has not answered its first design")
	}, func() string { return tail(p.stderr.String(), 3000) })
	for range 2 { // drain, then stop at once
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(100 * time.Millisecond)
	}
	_ = p.wait(t, 30*time.Second)
}
