package test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A worker started with a mistyped run ID (raal) while the controller
// serves real: the worker warns that its run is not on the broker, naming
// real; the controller warns that its run has no live slot, naming the
// runs that have workers (none, then raal once a worker serves it) and
// the command that joins its run; a worker with --wait-for-run gives up
// with exit 1 naming its run; the controller's join command, run as
// given, finishes the run; and a worker for the run once it is done
// leaves, saying so.
func TestMistypedRunIsReported(t *testing.T) {
	t.Parallel()
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", "real", "--budget", "20", "--init", "5", "--pool", "3",
		"--idle-alarm", "2s", "--json")
	typo := background(t, "worker", "--nats", url, "--run", "raal", "--evaluator", "noop", "--id", "typo")

	w := waitLine(t, typo, 90*time.Second, "level=warning", `msg="run is not on the broker; waiting for it (check the run ID)"`,
		"run=raal", "runs_in_progress=real")
	t.Logf("worker: %s", w)

	c := waitLine(t, ctl, 90*time.Second, "level=warning", `msg="no live worker slot for this run"`, "run=real",
		"runs_with_workers=none", `join="evoq worker --run real --nats `+url+`"`, "no_slot_for=")
	t.Logf("controller: %s", c)

	// A worker that does serve raal (a heartbeat is all the controller
	// sees of one) is named in the next warning.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ghost(ctx, t, js, "raal")
	c = waitLine(t, ctl, 90*time.Second, `msg="no live worker slot for this run"`, `runs_with_workers="raal (1 workers, 8 slots)"`,
		"restart them for run real")
	t.Logf("controller: %s", c)
	cancel()

	r := evoq(t, 90*time.Second, "worker", "--nats", url, "--run", "raal", "--evaluator", "noop", "--wait-for-run", "3s")
	for _, want := range []string{"--wait-for-run 3s", "run raal is not on the broker", "runs in progress on the broker: real"} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("worker --wait-for-run 3s: exit %d, want 1 with %q:\n%s", r.code, want, tail(r.stderr, 3000))
		}
	}
	if r := evoq(t, 30*time.Second, "worker", "--nats", url, "--run", "raal", "--wait-for-run", "-1s"); r.code != 2 ||
		!strings.Contains(r.stderr, "--wait-for-run -1s: must be >= 0") {
		t.Errorf("worker --wait-for-run -1s: exit %d, want 2 naming the flag:\n%s", r.code, r.stderr)
	}

	// The join command of the warning, as given, is what the run needed.
	join := regexp.MustCompile(`join="([^"]*)"`).FindStringSubmatch(c)[1]
	args := append(strings.Fields(join)[1:], "--evaluator", "noop", "--id", "joined")
	background(t, args...)
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != 20 {
		t.Fatalf("run ended with %d evaluations, want 20", s.Evaluations)
	}

	// A worker started for the run once it is done leaves, saying so.
	late := evoq(t, 90*time.Second, "worker", "--nats", url, "--run", "real", "--evaluator", "noop")
	if late.code != 0 || !strings.Contains(late.stderr, "run was already done when this worker joined") ||
		!strings.Contains(late.stderr, "phase=done") {
		t.Errorf("worker for the done run: exit %d, want 0 with a warning:\n%s", late.code, tail(late.stderr, 3000))
	}
}

// With auth, a worker's credential serves one run: a mistyped --run beside
// it is refused at once, naming both runs; the controller's join command
// names the workers' connect file, and works as given.
func TestMistypedRunWithAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfPath := filepath.Join(dir, "run.json")
	ctl := background(t, "controller", "--dir", filepath.Join(dir, "store"), "--listen", "0.0.0.0:0", "--connect-file", cfPath,
		"--run", "guarded", "--budget", "20", "--init", "5", "--pool", "3", "--idle-alarm", "2s", "--json")
	waitConnectFile(t, cfPath, ctl)
	r := evoq(t, 30*time.Second, "worker", "--connect", cfPath, "--run", "gaurded", "--evaluator", "noop")
	if r.code != 2 || !strings.Contains(r.stderr, "--run gaurded: the worker credential in --connect "+cfPath+" serves run guarded only") {
		t.Errorf("worker with another run's credential: exit %d, want 2 naming both runs:\n%s", r.code, r.stderr)
	}
	c := waitLine(t, ctl, 90*time.Second, "level=warning", `msg="no live worker slot for this run"`, "runs_with_workers=none",
		`join="evoq worker --run guarded --connect `+cfPath+`"`)
	t.Logf("controller: %s", c)
	join := regexp.MustCompile(`join="([^"]*)"`).FindStringSubmatch(c)[1]
	background(t, append(strings.Fields(join)[1:], "--evaluator", "noop")...)
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != 20 {
		t.Fatalf("run ended with %d evaluations, want 20", s.Evaluations)
	}
}

// waitLine waits for a line of p's output that holds every one of want,
// and returns it.
func waitLine(t *testing.T, p *proc, limit time.Duration, want ...string) string {
	t.Helper()
	var found string
	deadline := time.Now().Add(limit)
	for found == "" {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if containsAll(l, want) {
				found = l
				break
			}
		}
		if found != "" {
			break
		}
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("%s: no line with %q within %s; output:\n%s", strings.Join(p.cmd.Args, " "), want, limit, tail(p.stderr.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return found
}

func containsAll(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
