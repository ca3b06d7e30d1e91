package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// evaluated is the evaluations the controller's last progress line
// counts.
func evaluated(p *proc) int {
	l := progressLines(p.stderr.String())
	if len(l) == 0 {
		return 0
	}
	return atoi(l[len(l)-1][0])
}

// evoq run extend raises a live run's budget and time budget: the run
// goes on to the new budget, each design counted once. A lower budget or
// time budget is refused, naming the flag and the run's value; a
// controller killed after the raise and started again with the flags it
// was first given keeps the raised limits (a requeued job does that);
// status lists the raises as changes; a finished run is refused, saying
// to continue it instead. The broker is a process of its own, so that it
// outlives the controllers.
func TestRunExtend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	brk, url := startBroker(t, dir)
	ctlArgs := []string{"controller", "--nats", url, "--run", "ex", "--budget", "40", "--time-budget", "10m", "--progress", "100ms", "--init", "10", "--pool", "5"}
	first := background(t, ctlArgs...)
	// About 4 evaluations a second: the run lasts 10 s at its first budget.
	background(t, "worker", "--nats", url, "--run", "ex", "--evaluator", "sim", "--sim-mean", "0.5", "--slots", "2", "--gpus", "none")
	waitFor(t, time.Minute, func() bool { return evaluated(first) >= 4 })
	deadline := fieldOf(lineWith(first.stderr.String(), "controller starting"), "deadline")
	if evaluated(first) >= 40 {
		t.Fatalf("the run spent its budget of 40 before the test could extend it")
	}

	r := evoq(t, time.Minute, "run", "extend", "--nats", url, "--run", "ex", "--budget", "80", "--time-budget", "20m")
	if r.code != 0 || !strings.Contains(r.stdout, "budget 80") || !strings.Contains(r.stdout, "time budget 20m0s") {
		t.Fatalf("run extend --budget 80 --time-budget 20m: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []struct{ args, want []string }{
		{[]string{"--budget", "60"}, []string{"--budget 60", "budget is 80"}},
		{[]string{"--budget", "80"}, []string{"--budget 80", "give more than 80"}},
		{[]string{"--time-budget", "15m"}, []string{"--time-budget 15m0s", "time budget is 20m0s"}},
	} {
		r = evoq(t, time.Minute, append([]string{"run", "extend", "--nats", url, "--run", "ex"}, c.args...)...)
		for _, w := range c.want {
			if r.code != 2 || !strings.Contains(r.stderr, w) {
				t.Errorf("run extend %s: exit %d, want 2 with %q\n%s", strings.Join(c.args, " "), r.code, w, r.stderr)
			}
		}
	}
	waitFor(t, time.Minute, func() bool { return evaluated(first) >= 30 })
	_ = first.cmd.Process.Kill()
	_ = first.wait(t, 10*time.Second)
	if n := evaluated(first); n >= 80 {
		t.Fatalf("the run spent its raised budget (%d) before the restart", n)
	}
	// The first controller's deadline, 10 minutes later: the raised time
	// budget counts from the same start.
	first0, err := time.Parse(time.RFC3339, deadline)
	if err != nil {
		t.Fatalf("first deadline %q: %v", deadline, err)
	}
	raised := first0.Add(10 * time.Minute).UTC().Format(time.RFC3339)

	var stdout bytes.Buffer
	second := newProc(&stdout, append(ctlArgs, "--json")...)
	second.start(t, nil)
	if err := second.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("restarted controller: %v\n%s", err, tail(second.stderr.String(), 3000))
	}
	log := second.stderr.String()
	start := lineWith(log, "controller starting")
	if got := fieldOf(start, "budget"); got != "80" {
		t.Errorf("the restarted controller's budget %q, want the raised 80:\n%s", got, start)
	}
	if got := fieldOf(start, "deadline"); got != raised {
		t.Errorf("the restarted controller's deadline %q, want the raised %s (the first: %s)", got, raised, deadline)
	}
	s := lastJSON(t, stdout.String())
	if s.Evaluations != 80 || s.StopReason != schema.StopBudget {
		t.Fatalf("the extended run ended with %d evaluations, stop_reason %q; want 80, budget", s.Evaluations, s.StopReason)
	}

	r = evoq(t, time.Minute, "run", "extend", "--nats", url, "--run", "ex", "--budget", "100")
	if r.code != 2 || !strings.Contains(r.stderr, "has ended") || !strings.Contains(r.stderr, "evoq controller --run ex --budget N") {
		t.Errorf("run extend of a finished run: exit %d, want 2 saying to continue it\n%s", r.code, r.stderr)
	}
	r = evoq(t, time.Minute, "status", "--nats", url, "--run", "ex", "--json")
	var st struct {
		Changes []schema.Change `json:"changes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: exit %d, %v\n%s", r.code, err, r.stderr)
	}
	want := map[string]string{"budget": "40>80", "time_budget": "10m0s>20m0s", "deadline": deadline + ">" + raised}
	for _, ch := range st.Changes {
		if w, ok := want[ch.Setting]; ok && ch.Via == schema.ViaExtend && w == ch.From+">"+ch.To && !ch.At.IsZero() {
			delete(want, ch.Setting)
		}
	}
	if len(want) > 0 {
		t.Errorf("status lacks the changes %v made by run extend; it lists %+v", want, st.Changes)
	}
	r = evoq(t, time.Minute, "status", "--nats", url, "--run", "ex")
	if !strings.Contains(r.stdout, "changed: budget 40 -> 80") || !strings.Contains(r.stdout, "(run extend)") {
		t.Errorf("status does not show the raised budget and who raised it:\n%s", r.stdout)
	}
	// Replay reads the raised budget from the record and rebuilds the
	// pool the controller ended with.
	r = evoq(t, time.Minute, "replay", "--nats", url, "--run", "ex", "--json")
	var rp struct {
		Budget      int    `json:"budget"`
		Evaluations int    `json:"evaluations"`
		PoolDigest  string `json:"pool_digest"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rp); err != nil || r.code != 0 {
		t.Fatalf("replay --json: exit %d, %v\n%s", r.code, err, r.stderr)
	}
	if rp.Budget != 80 || rp.Evaluations != 80 || rp.PoolDigest != s.PoolDigest {
		t.Errorf("replay: budget %d, %d evaluations, pool digest %s; want 80, 80 and the run's %s", rp.Budget, rp.Evaluations, rp.PoolDigest, s.PoolDigest)
	}
	_ = brk.cmd.Process.Signal(os.Interrupt)
	_ = brk.wait(t, 30*time.Second)
	checkDesigns(t, readResults(t, dir, "ex"), 80)
}

// A run about to end on its time budget goes on when run extend raises
// it: it ends on time at the raised deadline, not the first one.
func TestRunExtendTimeBudget(t *testing.T) {
	t.Parallel()
	dir, port := t.TempDir(), freePort(t)
	listen, url := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("nats://127.0.0.1:%d", port)
	var stdout bytes.Buffer
	began := time.Now()
	ctl := newProc(&stdout, "controller", "--dir", dir, "--listen", listen, "--run", "et", "--budget", "1000000",
		"--time-budget", "8s", "--progress", "100ms", "--json")
	ctl.start(t, nil)
	background(t, "worker", "--nats", url, "--run", "et", "--evaluator", "sim", "--sim-mean", "0.05", "--slots", "2", "--gpus", "none")
	waitFor(t, time.Minute, func() bool { return evaluated(ctl) >= 10 })
	r := evoq(t, time.Minute, "run", "extend", "--nats", url, "--run", "et", "--time-budget", "20s")
	if r.code != 0 {
		if ctl.exited() {
			t.Skipf("the run ended on its first time budget before the test could extend it (a loaded machine): %s", r.stderr)
		}
		t.Fatalf("run extend --time-budget 20s: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	took := time.Since(began)
	s := lastJSON(t, stdout.String())
	// The first time budget would have ended it after about 8 s; the
	// raised one ends it 12 s later, less an evaluation.
	if s.StopReason != schema.StopTime || took < 16*time.Second {
		t.Fatalf("stop_reason %q after %s; want time, after the raised 20 s", s.StopReason, took.Round(time.Millisecond))
	}
	checkDesigns(t, readResults(t, dir, "et"), s.Evaluations)
}

// On a broker with auth, run extend needs the admin's connect file: a
// worker's or a reader's is refused at once, naming the admin's; with the
// admin's, a live run's budget is raised and the run spends it.
func TestRunExtendOperatorMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, admin := filepath.Join(dir, "store"), filepath.Join(dir, "admin.json")
	brk := background(t, "broker", "--dir", store, "--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--auth", "--connect-file", admin)
	waitFor(t, time.Minute, func() bool { _, err := os.Stat(admin); return err == nil })
	workerFile := filepath.Join(dir, "eo.json")
	var stdout bytes.Buffer
	ctl := newProc(&stdout, "controller", "--connect", admin, "--run", "eo", "--budget", "10", "--init", "5", "--pool", "3",
		"--connect-file", workerFile, "--json")
	ctl.start(t, nil)
	waitFor(t, time.Minute, func() bool { _, err := os.Stat(workerFile); return err == nil })
	readerFile := strings.TrimSuffix(workerFile, ".json") + "-reader.json"
	for _, f := range []string{workerFile, readerFile} {
		began := time.Now()
		r := evoq(t, time.Minute, "run", "extend", "--connect", f, "--run", "eo", "--budget", "20")
		if r.code != 2 || !strings.Contains(r.stderr, "admin's connect file") || time.Since(began) > 10*time.Second {
			t.Errorf("run extend with %s: exit %d after %s; want 2 at once, naming the admin's file\n%s", filepath.Base(f), r.code, time.Since(began), r.stderr)
		}
	}
	// The controller writes the workers' connect file before it records
	// the run: extend the run once it is there, as its user would. No
	// worker yet: the run cannot end before the raise.
	waitFor(t, time.Minute, func() bool {
		return evoq(t, 20*time.Second, "status", "--connect", admin, "--run", "eo").code == 0
	})
	r := evoq(t, time.Minute, "run", "extend", "--connect", admin, "--run", "eo", "--budget", "20")
	if r.code != 0 || !strings.Contains(r.stdout, "budget 20") {
		t.Fatalf("run extend with the admin's file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	background(t, "worker", "--connect", workerFile, "--slots", "2", "--evaluator", "sim", "--sim-mean", "0.01")
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if s := lastJSON(t, stdout.String()); s.Evaluations != 20 {
		t.Fatalf("the run ended with %d evaluations, want the raised 20", s.Evaluations)
	}
	_ = brk.cmd.Process.Signal(os.Interrupt)
	_ = brk.wait(t, 30*time.Second)
}
