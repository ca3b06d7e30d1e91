package test

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// progressRE reads a controller's progress line.
var progressRE = regexp.MustCompile(`msg=progress .*evaluations=(\d+) .*pool_digest=(\w+)`)

// progressLines are the (evaluations, pool digest) of every progress line
// in a controller's log.
func progressLines(log string) [][2]string {
	var out [][2]string
	for _, m := range progressRE.FindAllStringSubmatch(log, -1) {
		out = append(out, [2]string{m[1], m[2]})
	}
	return out
}

// A controller killed mid-run and started again with no search flags at
// all continues the run as it was: the recorded budget, seed, init and
// pool, and the pool digest it logged last before the kill.
func TestRestartTakesRecordedSettings(t *testing.T) {
	t.Parallel()
	dir, port := t.TempDir(), freePort(t)
	listen, url := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("nats://127.0.0.1:%d", port)
	first := background(t, "controller", "--dir", dir, "--listen", listen, "--run", "x", "--budget", "300", "--seed", "7",
		"--init", "30", "--pool", "15", "--ack-wait", "3s", "--progress", "100ms")
	workerArgs := []string{"worker", "--nats", url, "--run", "x", "--evaluator", "sim", "--sim-mean", "0.02", "--slots", "4", "--gpus", "none"}
	w1 := background(t, workerArgs...)
	waitFor(t, time.Minute, func() bool {
		p := progressLines(first.stderr.String())
		return len(p) > 0 && atoi(p[len(p)-1][0]) >= 60
	})
	_ = w1.cmd.Process.Kill()
	_ = w1.wait(t, 10*time.Second)
	// Nothing evaluates now: once three progress lines in a row agree, the
	// last digest is the pool the controller holds.
	seen := len(progressLines(first.stderr.String()))
	waitFor(t, 30*time.Second, func() bool {
		p := progressLines(first.stderr.String())
		n := len(p)
		return n >= seen+3 && p[n-1] == p[n-2] && p[n-2] == p[n-3]
	})
	_ = first.cmd.Process.Kill()
	_ = first.wait(t, 10*time.Second)
	p := progressLines(first.stderr.String())
	before := p[len(p)-1]

	var stdout bytes.Buffer
	second := newProc(&stdout, "controller", "--dir", dir, "--listen", listen, "--run", "x", "--json")
	second.start(t, nil)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(second.stderr.String(), "resumed run from its results stream") })
	log := second.stderr.String()
	if want := "pool_digest=" + before[1]; !strings.Contains(lineWith(log, "resumed run from its results stream"), want) {
		t.Errorf("digest before the kill %s (after %s evaluations); the restart logged:\n%s", before[1], before[0], lineWith(log, "resumed run"))
	}
	cont := lineWith(log, "continuing the run with its recorded settings")
	for _, want := range []string{"budget=300", "seed=7", "init=30", "pool=15", "space=mlp-spirals"} {
		if !strings.Contains(cont, want) {
			t.Errorf("the continuation line lacks %s:\n%s", want, cont)
		}
	}
	background(t, workerArgs...)
	if err := second.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("restarted controller: %v\n%s", err, tail(second.stderr.String(), 3000))
	}
	s := lastJSON(t, stdout.String())
	if s.Evaluations != 300 || s.PoolSize != 15 {
		t.Fatalf("the restarted run ended with %d evaluations and a pool of %d; want the recorded 300 and 15", s.Evaluations, s.PoolSize)
	}
	checkDesigns(t, readResults(t, dir, "x"), 300)
}

// lineWith is the last line of log that contains s.
func lineWith(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// Flags given to a run that continues: the same values are accepted, a
// conflicting one is refused with exit code 2 naming the flag and both
// values, a larger budget is accepted and logged, and no flags at all
// continue with what the run records. evoq status shows the settings and
// the change.
func TestRestartFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--run", "r", "--evaluator", "sim", "--sim-mean", "0.005", "--slots", "4", "--json"}
	run := func(extra ...string) result {
		t.Helper()
		return evoq(t, 2*time.Minute, append(append([]string(nil), base...), extra...)...)
	}
	first := run("--budget", "60", "--seed", "7", "--init", "30", "--pool", "15")
	if first.code != 0 {
		t.Fatalf("first run: exit %d\n%s", first.code, tail(first.stderr, 3000))
	}
	refused := []struct{ flags, want []string }{
		{[]string{"--seed", "9"}, []string{"--seed 9", "records 7"}},
		{[]string{"--pool", "10"}, []string{"--pool 10", "records 15"}},
		{[]string{"--budget", "50"}, []string{"--budget 50", "records 60"}},
		{[]string{"--replace", "oldest"}, []string{"--replace oldest", "records worst"}},
	}
	for _, tt := range refused {
		r := run(tt.flags...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", tt.flags, r.code, tail(r.stderr, 1000))
		}
		for _, w := range tt.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%v: the error does not say %q:\n%s", tt.flags, w, tail(r.stderr, 1000))
			}
		}
	}
	same := run("--budget", "80", "--seed", "7", "--init", "30", "--pool", "15")
	if same.code != 0 {
		t.Fatalf("the same flags and a larger budget: exit %d\n%s", same.code, tail(same.stderr, 3000))
	}
	if s := lastJSON(t, same.stdout); s.Evaluations != 80 {
		t.Errorf("%d evaluations after raising the budget to 80", s.Evaluations)
	}
	if !strings.Contains(same.stderr, `changed="budget 60->80"`) {
		t.Errorf("the raised budget was not logged as a change:\n%s", lineWith(same.stderr, "continuing"))
	}
	none := run()
	if none.code != 0 {
		t.Fatalf("no flags: exit %d\n%s", none.code, tail(none.stderr, 3000))
	}
	if s := lastJSON(t, none.stdout); s.Evaluations != 80 || s.PoolSize != 15 {
		t.Errorf("no flags: %d evaluations, pool %d; want the recorded 80 and 15", s.Evaluations, s.PoolSize)
	}
	st := evoq(t, time.Minute, "status", "--dir", dir, "--run", "r")
	for _, w := range []string{"settings: ", "seed=7", "init=30", "pool=15", "budget=80", "changed: budget 60 -> 80"} {
		if !strings.Contains(st.stdout, w) {
			t.Errorf("status lacks %q:\n%s", w, st.stdout)
		}
	}
}

// --resume continues an interrupted run with its recorded settings: a
// conflicting --seed is refused, and a larger --budget is taken.
func TestResumeTakesRecordedSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--evaluator", "sim", "--sim-mean", "0.05", "--slots", "4"}
	first := background(t, append(base, "--run", "res", "--budget", "300", "--seed", "7", "--init", "30", "--pool", "15")...)
	waitFor(t, time.Minute, func() bool { return strings.Contains(first.stderr.String(), "evaluations=") })
	_ = first.cmd.Process.Signal(syscall.SIGINT)
	if err := first.wait(t, time.Minute); err == nil {
		t.Fatal("the interrupted run exited 0")
	}
	seed := evoq(t, time.Minute, append(base, "--resume", "--seed", "9")...)
	if seed.code != 2 || !strings.Contains(seed.stderr, "--seed 9") || !strings.Contains(seed.stderr, "records 7") {
		t.Fatalf("--resume --seed 9: exit %d; want 2 naming --seed, 9 and 7\n%s", seed.code, tail(seed.stderr, 1000))
	}
	r := evoq(t, 2*time.Minute, append(base, "--resume", "--budget", "320", "--json")...)
	if r.code != 0 {
		t.Fatalf("--resume --budget 320: exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	if s := lastJSON(t, r.stdout); s.Evaluations != 320 || s.PoolSize != 15 {
		t.Errorf("resumed run: %d evaluations, pool %d; want 320 and the recorded 15", s.Evaluations, s.PoolSize)
	}
	if !strings.Contains(r.stderr, `changed="budget 300->320"`) || !strings.Contains(r.stderr, "seed=7") {
		t.Errorf("the resume did not log what it took and changed:\n%s", lineWith(r.stderr, "continuing"))
	}
}

// One Ctrl-C on the terminal (SIGINT to the whole process group) lets
// evoq run's workers drain, each signalled once; a second stops them at
// once, and the designs they hand back reach the broker before it stops:
// the resumed run starts them at once, not after the ack wait.
func TestInterruptDrainsAndHandsBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--evaluator", "sim", "--sim-mean", "1.5", "--slots", "4",
		"--ack-wait", "90s", "--progress", "200ms"}
	terminal := func(extra ...string) *proc {
		t.Helper()
		p := newProc(nil, append(append([]string(nil), args...), extra...)...)
		p.cmd.Stdout = &p.stderr
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
		p.start(t, nil)
		return p
	}
	ctrlC := func(p *proc) { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT) }
	busy := func(p *proc) func() bool {
		return func() bool { return strings.Contains(p.stderr.String(), "busy=4") }
	}

	once := terminal("--run", "c", "--budget", "40", "--init", "10", "--pool", "5")
	waitFor(t, time.Minute, busy(once))
	ctrlC(once)
	_ = once.wait(t, 2*time.Minute)
	log := once.stderr.String()
	if n := strings.Count(log, "interrupt: draining"); n != 1 {
		t.Errorf("evoq run took %d interrupts from one Ctrl-C", n)
	}
	if n := strings.Count(log, "terminated: draining"); n != 1 {
		t.Errorf("%d workers drained after one Ctrl-C; want the one worker, once", n)
	}
	if strings.Contains(log, "again: stopping now") {
		t.Errorf("one Ctrl-C stopped something at once:\n%s", tail(log, 3000))
	}

	twice := terminal("--resume")
	waitFor(t, time.Minute, busy(twice))
	ctrlC(twice)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(twice.stderr.String(), "worker stopping") })
	ctrlC(twice)
	_ = twice.wait(t, time.Minute)
	if !strings.Contains(twice.stderr.String(), "terminated again: stopping now") {
		t.Fatalf("the second Ctrl-C did not stop the worker at once:\n%s", tail(twice.stderr.String(), 3000))
	}

	resumed := time.Now()
	r := evoq(t, 2*time.Minute, append(args, "--resume", "--json")...)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	handedBack := 0
	for _, res := range readResults(t, dir, "c") {
		if res.Start.After(resumed) && res.Attempt > 1 {
			handedBack++
			if wait := res.Start.Sub(resumed); wait > 20*time.Second {
				t.Errorf("design %s, handed back, started %s after the resume; the ack wait is 90s", res.DesignID, wait.Round(time.Millisecond))
			}
		}
	}
	if handedBack == 0 {
		t.Fatalf("no design was handed back by the stopped worker and evaluated again after the resume")
	}
	t.Logf("%d handed-back designs started again after the resume", handedBack)
}

// A second controller for a run whose controller lives is refused,
// naming it; once that controller is killed, a restart takes the run at
// once, with no cleanup.
func TestOneControllerPerRun(t *testing.T) {
	t.Parallel()
	_, url := startBroker(t, t.TempDir())
	ctl := []string{"controller", "--nats", url, "--run", "dup", "--budget", "40", "--init", "10", "--pool", "5"}
	first := background(t, ctl...)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(first.stderr.String(), "work queue ready") })
	second := evoq(t, time.Minute, ctl...)
	want := fmt.Sprintf("pid %d", first.cmd.Process.Pid)
	if second.code == 0 || !strings.Contains(second.stderr, "another controller runs this run") || !strings.Contains(second.stderr, want) {
		t.Fatalf("second controller: exit %d; want a refusal naming %s\n%s", second.code, want, tail(second.stderr, 2000))
	}
	_ = first.cmd.Process.Kill()
	_ = first.wait(t, 10*time.Second)
	var stdout bytes.Buffer
	third := newProc(&stdout, append(ctl, "--json")...)
	third.start(t, nil)
	background(t, "worker", "--nats", url, "--run", "dup", "--evaluator", "noop", "--slots", "2", "--gpus", "none")
	if err := third.wait(t, time.Minute); err != nil {
		t.Fatalf("the controller started after the kill: %v\n%s", err, tail(third.stderr.String(), 3000))
	}
	if !strings.Contains(third.stderr.String(), "taking over its lease") {
		t.Errorf("the restart did not take over the dead controller's lease:\n%s", tail(third.stderr.String(), 2000))
	}
	if s := lastJSON(t, stdout.String()); s.Evaluations != 40 {
		t.Errorf("%d evaluations, want 40", s.Evaluations)
	}
}
