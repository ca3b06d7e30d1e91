package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
)

// composeBudget makes the run last about 75 s on 2 workers of 2 slots with
// the sim evaluator's 0.2 s mean: long enough that a scale-down asked for
// halfway is done with designs left, however slowly a loaded Docker
// engine carries it out (with 1000, a scale-down under two busy loops on
// a slower machine ended with 959 evaluated).
const composeBudget = 1500

// The compose file at the repository root, on the local Docker engine: the
// image is built FROM scratch around a static binary, the workers are scaled
// from 2 to 4 mid-run and then down to 1, and the controller still ends the
// run with every design of the budget evaluated once, having fed 8 slots at
// its peak. Needs root, docker and docker-compose with a running daemon;
// pulls nothing.
func TestComposeScalesWorkers(t *testing.T) {
	t.Parallel()
	c := newCompose(t)
	c.must(t, 3*time.Minute, "up", "-d", "--build", "--scale", "worker=2")
	ctl := c.container(t, "controller")
	logs := followLogs(t, ctl)
	progressed := func(cond func(p progress) bool) func() bool {
		return func() bool { return cond(lastProgress(logs.stderr.String())) }
	}

	// Both workers joined (--wait-slots 4) and designs are being evaluated.
	waitFor(t, 90*time.Second, progressed(func(p progress) bool { return p.evaluations > 0 }))
	c.scale(t, 4)
	waitFor(t, 60*time.Second, progressed(func(p progress) bool { return p.slots >= 8 }))
	waitFor(t, 90*time.Second, progressed(func(p progress) bool { return p.evaluations >= composeBudget/2 }))
	c.scale(t, 1)
	if p := lastProgress(logs.stderr.String()); p.evaluations > composeBudget-100 {
		t.Errorf("%d of %d designs evaluated when the workers were scaled down: the budget is too small to test that", p.evaluations, composeBudget)
	}

	s := controllerSummary(t, 3*time.Minute, ctl, logs)
	if s.Evaluations != composeBudget || s.Lost != 0 || s.Error != 0 || s.Slots < 8 {
		t.Fatalf("summary: %d evaluations (%d lost, %d error), at most %d live slots; want %d, 0, 0, >= 8",
			s.Evaluations, s.Lost, s.Error, s.Slots, composeBudget)
	}
	if n := len(joinedWorkers(logs.stderr.String())); n < 4 {
		t.Errorf("the controller saw %d workers join, want >= 4", n)
	}
	c.checkStore(t, s)
	t.Logf("compose run: %d evaluations in %.1f s, peak %d slots, %.1f evaluations/s", s.Evaluations, s.WallS, s.Slots, s.EvalsPerS)
}

// compose runs docker-compose on the repository's compose file as one
// project of its own, with its own image and volume.
type compose struct {
	project string
	env     []string
	trust   string // the cluster profile's trust root directory, on the host
}

// newCompose skips unless Docker is usable, builds the static binary into a
// build context of its own (the repository's tree stays untouched), and
// takes the project down, volume and image included, when the test ends.
func newCompose(t *testing.T) *compose {
	t.Helper()
	requireDocker(t)
	ctxDir := t.TempDir()
	buildStatic(t, ctxDir)
	project := fmt.Sprintf("evoq%08x", rand.Uint32())
	c := &compose{project: project, env: append(os.Environ(),
		"EVOQ_BUILD_CONTEXT="+ctxDir, "EVOQ_IMAGE=evoq:"+project, "EVOQ_RUN=compose",
		"EVOQ_BUDGET="+strconv.Itoa(composeBudget), "EVOQ_INIT=40", "EVOQ_POOL=20", "EVOQ_WAIT_SLOTS=4",
		"EVOQ_EVALUATOR=sim", "EVOQ_SIM_MEAN=0.2", "EVOQ_SLOTS=2", "EVOQ_PROGRESS=500ms")}
	t.Cleanup(func() { c.down(t) })
	return c
}

// requireDocker skips the test, loudly, where it cannot run.
func requireDocker(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("SKIPPED: no %s on PATH: the compose test needs docker and docker-compose", bin)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the compose test runs as root only (it builds images and reads a container's volume)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: the Docker daemon does not answer `docker info` (%v): %s", err, tail(strings.TrimSpace(string(out)), 300))
	}
}

// buildStatic puts a static evoq into dir/evoq (TestMain's, unless that
// one has the race detector and so cgo) and copies the Dockerfile to
// dir/deploy/Dockerfile, making dir a build context for the compose file.
func buildStatic(t *testing.T, dir string) {
	t.Helper()
	if evoqStatic {
		bin, err := os.ReadFile(evoqBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "evoq"), bin, 0o755); err != nil {
			t.Fatal(err)
		}
	} else if out, err := testutil.BuildEvoq(filepath.Join(dir, "evoq")); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	df, err := os.ReadFile("../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "deploy", "Dockerfile"), string(df))
}

// run runs docker-compose with args and returns its combined output.
func (c *compose) run(limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	args = append([]string{"-f", "../docker-compose.yml", "-p", c.project}, args...)
	cmd := exec.CommandContext(ctx, "docker-compose", args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %s", limit)
	}
	return string(out), err
}

func (c *compose) must(t *testing.T, limit time.Duration, args ...string) string {
	t.Helper()
	out, err := c.run(limit, args...)
	if err != nil {
		t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, tail(out, 3000))
	}
	return out
}

// scale runs n workers: new ones join the run, stopped ones drain.
func (c *compose) scale(t *testing.T, n int) {
	t.Helper()
	c.must(t, 2*time.Minute, "up", "-d", "--no-deps", "--no-recreate", "--scale", fmt.Sprintf("worker=%d", n), "worker")
	t.Logf("scaled to %d workers", n)
}

// container is the ID of service's only container.
func (c *compose) container(t *testing.T, service string) string {
	t.Helper()
	id := strings.TrimSpace(c.must(t, 30*time.Second, "ps", "-q", service))
	if id == "" || strings.Contains(id, "\n") {
		t.Fatalf("service %s: containers %q, want one", service, id)
	}
	return id
}

// down removes the project's containers, network, volume and image, after
// logging every service's last lines if the test failed.
func (c *compose) down(t *testing.T) {
	if t.Failed() {
		out, _ := c.run(time.Minute, "logs", "--no-color", "--tail", "40")
		t.Logf("docker-compose logs:\n%s", tail(out, 8000))
	}
	// --rmi all, not local: the image has a name (evoq:<project>), which
	// --rmi local leaves behind.
	if out, err := c.run(3*time.Minute, "down", "-v", "--rmi", "all", "--remove-orphans", "-t", "5"); err != nil {
		t.Errorf("docker-compose down: %v\n%s", err, tail(out, 3000))
	}
}

// checkStore reads the broker's store once the broker has stopped: every
// design of the budget has one terminal result, and results came from at
// least 4 workers.
func (c *compose) checkStore(t *testing.T, s *runstate.Summary) {
	t.Helper()
	broker := c.container(t, "broker")
	c.must(t, time.Minute, "stop", "-t", "30", "broker")
	dir := filepath.Join(t.TempDir(), "store")
	if out, err := exec.Command("docker", "cp", broker+":/data", dir).CombinedOutput(); err != nil {
		t.Fatalf("docker cp the broker's store: %v\n%s", err, out)
	}
	results := readResults(t, dir, s.Run)
	checkDesigns(t, results, composeBudget)
	if f := fold(results, s.Run, composeBudget, 40, 20, runstate.ReplaceWorst); f.Terminal() != composeBudget || f.Pool().Digest() != s.PoolDigest {
		t.Errorf("store: %d designs with a terminal result, pool digest %s; want %d, %s (the controller's)",
			f.Terminal(), f.Pool().Digest(), composeBudget, s.PoolDigest)
	}
	workers := map[string]int{}
	for _, r := range results {
		workers[r.Worker]++
	}
	if len(workers) < 4 {
		t.Errorf("results from %d workers %v, want >= 4", len(workers), workers)
	}
}

// containerLogs follows a container's stdout and stderr apart until it
// exits.
type containerLogs struct {
	stdout, stderr syncBuffer
	done           chan struct{}
}

func followLogs(t *testing.T, id string) *containerLogs {
	t.Helper()
	l := &containerLogs{done: make(chan struct{})}
	cmd := exec.Command("docker", "logs", "-f", id)
	cmd.Stdout, cmd.Stderr = &l.stdout, &l.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(l.done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-l.done })
	return l
}

// waitExit waits for a container to exit and returns its exit code.
// controllerSummary waits for the controller container to exit 0 and its
// log to end, and returns the JSON summary it printed last.
func controllerSummary(t *testing.T, limit time.Duration, ctl string, logs *containerLogs) *runstate.Summary {
	t.Helper()
	if code := waitExit(t, limit, ctl); code != 0 {
		t.Fatalf("controller exited with %d:\n%s", code, tail(logs.stderr.String(), 3000))
	}
	select {
	case <-logs.done:
	case <-time.After(30 * time.Second):
		t.Fatal("docker logs -f still following the controller 30 s after it exited")
	}
	return lastJSON(t, logs.stdout.String())
}

func waitExit(t *testing.T, limit time.Duration, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "wait", id).Output()
	if err != nil {
		t.Fatalf("docker wait %s: %v (within %s)", id, err, limit)
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("docker wait %s printed %q", id, out)
	}
	return code
}

// progress is the controller's last progress line.
type progress struct{ evaluations, slots int }

var progressLine = regexp.MustCompile(`msg=progress .*\bevaluations=(\d+) .*\bslots=(\d+) workers=`)

func lastProgress(log string) progress {
	m := progressLine.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return progress{}
	}
	last := m[len(m)-1]
	e, _ := strconv.Atoi(last[1])
	s, _ := strconv.Atoi(last[2])
	return progress{evaluations: e, slots: s}
}

var joinedLine = regexp.MustCompile(`msg="worker joined" .*\bworker=(\S+)`)

// joinedWorkers are the workers whose joining the controller logged.
func joinedWorkers(log string) map[string]bool {
	ws := map[string]bool{}
	for _, m := range joinedLine.FindAllStringSubmatch(log, -1) {
		ws[m[1]] = true
	}
	return ws
}
