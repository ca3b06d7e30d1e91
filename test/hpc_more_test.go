package test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// exited reports whether p has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

var logClock = regexp.MustCompile(`time="(\d\d:\d\d:\d\d\.\d\d\d)"`)

// logLineTime is the time of the first text-format log line of log that
// contains every one of parts. The line carries a local clock time of
// day; the date is the one that puts it nearest to now.
func logLineTime(t *testing.T, log string, parts ...string) time.Time {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !hasLine(line, parts...) {
			continue
		}
		m := logClock.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("log line without a time: %s", line)
		}
		c, err := time.ParseInLocation("15:04:05.000", m[1], time.Local)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		at := time.Date(now.Year(), now.Month(), now.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), time.Local)
		switch {
		case at.Sub(now) > 12*time.Hour:
			at = at.AddDate(0, 0, -1)
		case now.Sub(at) > 12*time.Hour:
			at = at.AddDate(0, 0, 1)
		}
		return at
	}
	t.Fatalf("no log line with %q:\n%s", parts, tail(log, 3000))
	return time.Time{}
}

// ackPending is the number of designs of run delivered to a slot and not
// yet acked.
func ackPending(t *testing.T, js jetstream.JetStream, run string) int {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	cons, err := js.Consumer(ctx, schema.DesignStream, schema.ConsumerName(run))
	if err != nil {
		return 0 // not declared yet
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info.NumAckPending
}

// resultsOf keeps the results of one worker.
func resultsOf(results []*schema.Result, worker string) []*schema.Result {
	var out []*schema.Result
	for _, r := range results {
		if r.Worker == worker {
			out = append(out, r)
		}
	}
	return out
}

// checkOneResultEach: designs 1..budget each have exactly one result, and
// nothing else has one.
func checkOneResultEach(t *testing.T, results []*schema.Result, budget int) {
	t.Helper()
	seqs := bySeq(results)
	for seq := uint64(1); seq <= uint64(budget); seq++ {
		if n := len(seqs[seq]); n != 1 {
			t.Errorf("design %d has %d results, want 1", seq, n)
		}
	}
	if len(seqs) != budget || len(results) != budget {
		t.Errorf("%d results for %d designs, want %d for %d", len(results), len(seqs), budget, budget)
	}
}

// A worker that joins a run in progress has every one of its slots fed
// within a second of joining, and the run completes its budget.
func TestJoinMidRun(t *testing.T) {
	t.Parallel()
	const run, budget = "join", 120
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "20",
		"--pool", "10", "--json")
	a := background(t, "worker", "--nats", url, "--run", run, "--id", "a", "--slots", "2",
		"--evaluator", "sim", "--sim-mean", "0.5")
	_, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(a.stderr.String(), "worker joined run") })
	// The run is under way: a has stored some results.
	waitFor(t, 30*time.Second, func() bool { return subjectCount(t, js, run) >= 4 })
	b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "4",
		"--evaluator", "sim", "--sim-mean", "0.5")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(b.stderr.String(), "worker joined run") })
	joined := logLineTime(t, b.stderr.String(), "worker joined run", "worker=b")
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if !hasLine(ctl.stderr.String(), `msg="worker joined"`, "worker=b", "slots=4") {
		t.Errorf("the controller did not log b joining with 4 slots:\n%s", tail(ctl.stderr.String(), 3000))
	}
	s := lastJSON(t, ctl.stderr.String())
	if s.Evaluations != budget || s.Slots != 6 || s.SlotsUsed != 6 {
		t.Errorf("evaluations %d, slots %d, used %d; want %d, 6, 6", s.Evaluations, s.Slots, s.SlotsUsed, budget)
	}
	results := storedResults(t, js, run)
	checkOneResultEach(t, results, budget)
	first := map[int]time.Time{}
	for _, r := range resultsOf(results, "b") {
		if f, ok := first[r.Slot]; !ok || r.Start.Before(f) {
			first[r.Slot] = r.Start
		}
	}
	for slot := range 4 {
		f, ok := first[slot]
		if !ok {
			t.Errorf("b's slot %d evaluated nothing", slot)
			continue
		}
		if d := f.Sub(joined); d < -5*time.Millisecond || d > time.Second {
			t.Errorf("b's slot %d started its first design %s after b joined, want within 1 s", slot, d)
		} else {
			t.Logf("b's slot %d started its first design %s after b joined", slot, d.Round(time.Millisecond))
		}
	}
	if len(first) != 4 {
		t.Errorf("b evaluated on slots %v, want 0-3", first)
	}
}

// A worker sent SIGTERM takes no new design, finishes the evaluations it
// is running and stores their results, then exits 0; the run completes
// with another worker and nothing is evaluated twice.
func TestLeaveDrain(t *testing.T) {
	t.Parallel()
	const run, budget = "drain", 40
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "10",
		"--pool", "5", "--json")
	a := background(t, "worker", "--nats", url, "--run", run, "--id", "a", "--slots", "2",
		"--eval-cmd", `sleep 2; echo '{"fitness": 1}'`)
	_, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(a.stderr.String(), "worker joined run") })
	waitFor(t, 30*time.Second, func() bool { return ackPending(t, js, run) == 2 }) // both slots evaluating
	sig := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2", "--evaluator", "noop")
	if err := a.wait(t, 5*time.Second); err != nil {
		t.Fatalf("a exited with %v on SIGTERM, want 0\n%s", err, tail(a.stderr.String(), 3000))
	}
	left := time.Since(sig)
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if err := b.wait(t, 30*time.Second); err != nil {
		t.Fatalf("b: %v", err)
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget || s.OK != budget {
		t.Errorf("evaluations %d, ok %d; want %d, %d", s.Evaluations, s.OK, budget, budget)
	}
	results := storedResults(t, js, run)
	checkOneResultEach(t, results, budget)
	fromA := resultsOf(results, "a")
	if len(fromA) != 2 {
		t.Errorf("a stored %d results, want its 2 running evaluations", len(fromA))
	}
	for _, r := range fromA {
		if r.Status != schema.StatusOK || r.Attempt != 1 || !r.Start.Before(sig) || !r.Stop.After(sig) {
			t.Errorf("a's %s: %s attempt %d, %s to %s, SIGTERM at %s; want ok attempt 1, running at the SIGTERM",
				r.DesignID, r.Status, r.Attempt, r.Start.Format("15:04:05.000"), r.Stop.Format("15:04:05.000"), sig.Format("15:04:05.000"))
		}
	}
	for _, r := range resultsOf(results, "b") {
		if r.Attempt != 1 {
			t.Errorf("b's %s: attempt %d, want 1: nothing of a's was handed back", r.DesignID, r.Attempt)
		}
	}
	log := a.stderr.String()
	if !strings.Contains(log, "worker stopping: no new designs") || strings.Contains(log, "drain time over") {
		t.Errorf("a's log does not show a complete drain:\n%s", tail(log, 3000))
	}
	t.Logf("a drained its 2 evaluations and left %s after SIGTERM", left.Round(time.Millisecond))
}

// A worker whose drain is cut short, by --drain-timeout or by a second
// signal, exits at once and hands its running designs back: another
// worker evaluates them (attempt 2) right away, long before the 30 s
// AckWait would have redelivered them.
func TestLeaveDrainTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		extra   []string
		signals int
	}{
		{name: "drain-timeout", extra: []string{"--drain-timeout", "1s"}, signals: 1},
		{name: "second-signal", extra: nil, signals: 2}, // default drain timeout 5m
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const run, budget = "cut", 40
			_, url := startBroker(t, t.TempDir())
			ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "10",
				"--pool", "5", "--json")
			a := background(t, append([]string{"worker", "--nats", url, "--run", run, "--id", "a", "--slots", "2",
				"--eval-cmd", `sleep 30; echo '{"fitness": 1}'`}, tc.extra...)...)
			_, js := connectJS(t, url)
			waitFor(t, 30*time.Second, func() bool { return strings.Contains(a.stderr.String(), "worker joined run") })
			waitFor(t, 30*time.Second, func() bool { return ackPending(t, js, run) == 2 })
			sig := time.Now()
			if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if tc.signals == 2 {
				// The second signal once the first is seen: two at once may merge.
				waitFor(t, 5*time.Second, func() bool { return strings.Contains(a.stderr.String(), "draining; send it again") })
				if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2", "--evaluator", "noop")
			if err := a.wait(t, 5*time.Second); err != nil {
				t.Fatalf("a exited with %v, want 0\n%s", err, tail(a.stderr.String(), 3000))
			}
			left := time.Since(sig)
			if err := ctl.wait(t, 20*time.Second); err != nil {
				t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
			}
			if err := b.wait(t, 30*time.Second); err != nil {
				t.Fatalf("b: %v", err)
			}
			if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget || s.OK != budget {
				t.Errorf("evaluations %d, ok %d; want %d, %d", s.Evaluations, s.OK, budget, budget)
			}
			results := storedResults(t, js, run)
			checkOneResultEach(t, results, budget)
			if n := len(resultsOf(results, "a")); n != 0 {
				t.Errorf("a stored %d results of cut evaluations, want 0", n)
			}
			var handedBack []string
			for _, r := range results {
				if r.Attempt == 1 {
					continue
				}
				handedBack = append(handedBack, r.DesignID)
				if r.Worker != "b" || r.Attempt != 2 || r.Start.Sub(sig) > 10*time.Second {
					t.Errorf("%s: worker %s attempt %d, started %s after the SIGTERM; want b, attempt 2, within 10 s",
						r.DesignID, r.Worker, r.Attempt, r.Start.Sub(sig).Round(time.Millisecond))
				}
			}
			if len(handedBack) != 2 {
				t.Errorf("designs evaluated again: %v, want a's 2", handedBack)
			}
			t.Logf("a left %s after the first SIGTERM; %v evaluated again by b", left.Round(time.Millisecond), handedBack)
		})
	}
}

// A worker with a walltime stops taking designs when less than a typical
// evaluation is left before the walltime less its margin, hands back what
// still runs then (design 1, which takes 20 s) and exits 0 before the
// batch system would kill it. No design it took is lost: each has its
// result, or is evaluated again by a worker started after it left. The
// walltime comes from --walltime or from Slurm's SLURM_JOB_END_TIME.
func TestWalltime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		source string
		setup  func() (env, args []string, deadline time.Time)
	}{{
		name:   "walltime-flag",
		source: "from=--walltime",
		setup: func() ([]string, []string, time.Time) {
			return nil, []string{"--walltime", "6s"}, time.Now().Add(6 * time.Second)
		},
	}, {
		name:   "slurm-end-time",
		source: "from=SLURM_JOB_END_TIME",
		setup: func() ([]string, []string, time.Time) {
			end := time.Now().Add(6 * time.Second).Unix()
			return []string{"SLURM_JOB_END_TIME=" + strconv.FormatInt(end, 10), "PBS_WALLTIME="}, nil, time.Unix(end, 0)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const run, budget, margin, minEval = "wall", 200, 2 * time.Second, time.Second
			starts := filepath.Join(t.TempDir(), "starts")
			_, url := startBroker(t, t.TempDir())
			ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "20",
				"--pool", "10", "--json")
			waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "work queue ready") })
			env, extra, deadline := tc.setup()
			began := time.Now()
			w := backgroundEnv(t, env, append([]string{"worker", "--nats", url, "--run", run, "--id", "w", "--slots", "2",
				"--walltime-margin", margin.String(), "--min-eval-time", minEval.String(),
				"--eval-cmd", fmt.Sprintf(`echo "$EVOQ_DESIGN_ID $(date +%%s.%%N)" >> '%s'
case $EVOQ_DESIGN_ID in *-1) sleep 20 ;; *) sleep 1 ;; esac
echo '{"fitness": 1}'`, starts)},
				extra...)...)
			if err := w.wait(t, 10*time.Second); err != nil {
				t.Fatalf("w exited with %v, want 0\n%s", err, tail(w.stderr.String(), 3000))
			}
			ran := time.Since(began)
			if ran > 8*time.Second {
				t.Errorf("w ran %s, want to leave within 8 s (walltime 6 s, margin 2 s)", ran.Round(time.Millisecond))
			}
			log := w.stderr.String()
			for _, want := range [][]string{{"msg=walltime", tc.source}, {"too little time left"},
				{"walltime: handing back the designs still running", "busy=1"}} {
				if !hasLine(log, want...) {
					t.Fatalf("w's log has no line with %q:\n%s", want, tail(log, 3000))
				}
			}
			soft := logLineTime(t, log, "too little time left")
			if ctl.exited() {
				t.Fatalf("the run ended with w alone:\n%s", tail(ctl.stderr.String(), 3000))
			}
			b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2", "--evaluator", "noop")
			if err := ctl.wait(t, time.Minute); err != nil {
				t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
			}
			if err := b.wait(t, 30*time.Second); err != nil {
				t.Fatalf("b: %v", err)
			}
			if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget || s.OK != budget || s.Lost != 0 {
				t.Errorf("evaluations %d, ok %d, lost %d; want %d, %d, 0", s.Evaluations, s.OK, s.Lost, budget, budget)
			}
			_, js := connectJS(t, url)
			results := storedResults(t, js, run)
			checkOneResultEach(t, results, budget)
			byID := map[string]*schema.Result{}
			for _, r := range results {
				byID[r.DesignID] = r
			}
			end := deadline.Add(-margin)
			fromW := resultsOf(results, "w")
			if len(fromW) == 0 {
				t.Errorf("w stored no result")
			}
			for _, r := range fromW {
				if r.Attempt != 1 || r.Stop.After(end.Add(500*time.Millisecond)) {
					t.Errorf("w's %s: attempt %d, stopped %s before the walltime less margin; want attempt 1, before it",
						r.DesignID, r.Attempt, end.Sub(r.Stop).Round(time.Millisecond))
				}
			}
			if d := end.Sub(soft); d <= 0 || d > minEval+time.Second+200*time.Millisecond {
				t.Errorf("w stopped taking designs %s before the walltime less margin; want under a typical evaluation (1 s) plus the 1 s check period", d.Round(time.Millisecond))
			}
			taken := readStarts(t, starts)
			var handedBack []string
			latest := time.Duration(1 << 62)
			for id, at := range taken {
				latest = min(latest, end.Sub(at))
				if at.After(soft.Add(200 * time.Millisecond)) {
					t.Errorf("w started %s %s after it logged that it takes no new designs", id, at.Sub(soft).Round(time.Millisecond))
				}
				r := byID[id]
				switch {
				case r == nil:
					t.Errorf("w took %s and it has no result", id)
				case r.Worker == "w":
				case r.Worker == "b" && r.Attempt == 2:
					handedBack = append(handedBack, id)
				default:
					t.Errorf("w took %s; its result is by %s, attempt %d; want w's, or b's attempt 2", id, r.Worker, r.Attempt)
				}
			}
			if len(taken) != len(fromW)+len(handedBack) || !slices.Contains(handedBack, run+"-1") {
				t.Errorf("w took %d designs: %d results of its own, handed back %v; want the others and %s-1 handed back",
					len(taken), len(fromW), handedBack, run)
			}
			t.Logf("w ran %s, took %d designs (%d stored, handed back %v); soft stop %s and its last evaluation began %s before the walltime less margin",
				ran.Round(time.Millisecond), len(taken), len(fromW), handedBack, end.Sub(soft).Round(time.Millisecond), latest.Round(time.Millisecond))
		})
	}
}

// readStarts reads the evaluator's record of the designs it started: the
// design ID and the Unix time, one a line.
func readStarts(t *testing.T, file string) map[string]time.Time {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("the evaluator recorded no start: %v", err)
	}
	defer f.Close()
	out := map[string]time.Time{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, at, ok := strings.Cut(sc.Text(), " ")
		sec, err := strconv.ParseFloat(at, 64)
		if !ok || err != nil {
			t.Fatalf("bad start record %q", sc.Text())
		}
		if _, dup := out[id]; dup {
			t.Errorf("w started %s twice", id)
		}
		out[id] = time.Unix(0, int64(sec*1e9))
	}
	return out
}

// A persistent evaluator process that dies hands its design back; the
// design is evaluated again (attempt 2) by a fresh process, and every
// other design is served by the long-lived process of its slot.
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
