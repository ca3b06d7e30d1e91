// Package test holds evoq's end-to-end tests: they build the evoq binary and
// run real evoq processes against the real embedded JetStream broker.
package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// evoqBin is the binary under test, built once by TestMain; evoqStatic
// says it was built static (CGO_ENABLED=0), as the compose tests' images
// need it.
var (
	evoqBin    string
	evoqStatic bool
)

// e2eParallel is how many end-to-end tests run at once unless -parallel
// says otherwise. They spend most of their time waiting on real processes
// (a broker, a controller, workers training), not computing, so more of
// them than the machine has cores keep it busy; each waits on events with
// margins made for a loaded machine. On a 2-core machine loaded by other
// work (load average 15 to 30), 8 at once took the package from 553 s
// (4 at once) to 327 s, every test passing.
const e2eParallel = 8

// TestMain builds evoq. EVOQ_E2E_RACE=1 builds it with the race detector
// (slow: the built-in mlp evaluator trains about ten times slower).
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < e2eParallel {
		_ = flag.Set("test.parallel", strconv.Itoa(e2eParallel))
	}
	dir, err := os.MkdirTemp("", "evoq-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	evoqBin = filepath.Join(dir, "evoq")
	var race []string
	if os.Getenv("EVOQ_E2E_RACE") == "1" {
		race = []string{"-race"}
	}
	// Without the race detector the binary is static, as the compose
	// tests' images need it (FROM scratch): one build serves every test.
	evoqStatic = race == nil
	if out, err := testutil.BuildEvoq(evoqBin, race...); err != nil {
		fmt.Fprintf(os.Stderr, "build evoq: %v\n%s", err, out)
		os.Exit(1)
	}
	_, err = os.Stat(broker.DirDefault)
	leftBefore := err == nil
	code := m.Run()
	os.RemoveAll(dir)
	// A test that ran evoq without --dir leaves the default store here,
	// in the source tree, where it is easily committed: name it.
	if _, err := os.Stat(broker.DirDefault); err == nil && !leftBefore {
		fmt.Fprintf(os.Stderr, "FAIL: a test ran evoq without --dir: it left %s in test/\n", broker.DirDefault)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// result of one evoq process.
type result struct {
	stdout, stderr string
	code           int
}

// evoq runs the binary to completion with a time limit.
func evoq(t *testing.T, limit time.Duration, args ...string) result {
	t.Helper()
	return evoqEnv(t, limit, nil, args...)
}

// evoqEnv is evoq with env added to the environment.
func evoqEnv(t *testing.T, limit time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, evoqBin, args...)
	// Past the limit, SIGQUIT first: the Go runtime prints every
	// goroutine's stack to stderr, which the failure below shows, so that
	// a hang says where it hangs. SIGKILL follows if that does not end it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("evoq %s: still running after %s\n%s", strings.Join(args, " "), limit, hangReport(r.stderr))
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("evoq %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// hangReport is what a process stopped by SIGQUIT wrote: the end of its
// log, then the stacks of the goroutines that ran evoq's own code (the
// broker's many are left out, counted), so that a hang says where.
func hangReport(stderr string) string {
	i := strings.LastIndex(stderr, "SIGQUIT: quit") // the runtime's dump begins so
	if i < 0 {
		return "stderr (no goroutine dump):\n" + tail(stderr, 20000)
	}
	log, dump := stderr[:i], stderr[i:]
	var own []string
	other := 0
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "github.com/evoq/evoq/") {
			own = append(own, g)
		} else if strings.HasPrefix(g, "goroutine ") {
			other++
		}
	}
	return fmt.Sprintf("log, its end:\n%s\ngoroutines running evoq's code (%d others left out):\n%s",
		tail(log, 10000), other, tail(strings.Join(own, "\n\n"), 20000))
}

// runJSON runs `evoq run ... --json` in a fresh store and returns the summary
// and the store directory.
func runJSON(t *testing.T, limit time.Duration, args ...string) (*runstate.Summary, string) {
	t.Helper()
	dir := t.TempDir()
	args = append([]string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json"}, args...)
	r := evoq(t, limit, args...)
	if r.code != 0 {
		t.Fatalf("evoq %s: exit %d\nstderr:\n%s", strings.Join(args, " "), r.code, tail(r.stderr, 4000))
	}
	return lastJSON(t, r.stdout), dir
}

func lastJSON(t *testing.T, stdout string) *runstate.Summary {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var s runstate.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last stdout line is not the JSON summary: %v\nstdout:\n%s", err, stdout)
	}
	return &s
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// readResults opens a stopped run's store and returns its results in
// stream order.
func readResults(t *testing.T, dir, run string) []*schema.Result {
	t.Helper()
	return storedResults(t, openStore(t, dir).JS, run)
}

// stores are the stopped stores tests have opened, by test and directory:
// a store can be open in one broker at a time.
var stores sync.Map

// openStore starts a broker on a stopped run's store, once per test.
func openStore(t *testing.T, dir string) *testutil.Broker {
	t.Helper()
	key := t.Name() + "\x00" + dir
	if b, ok := stores.Load(key); ok {
		return b.(*testutil.Broker)
	}
	t.Cleanup(func() { stores.Delete(key) })
	b := testutil.StartBrokerDir(t, dir)
	stores.Store(key, b)
	return b
}

// subjectCount is the number of stored results of run.
func subjectCount(t *testing.T, js jetstream.JetStream, run string) int {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	st, err := js.Stream(ctx, schema.ResultStream)
	if err != nil {
		t.Fatalf("results stream: %v", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(schema.ResultSubject(run)))
	if err != nil {
		t.Fatalf("results stream info: %v", err)
	}
	return int(info.State.Subjects[schema.ResultSubject(run)])
}

// defaultRules are the counting rules of a run started without
// --error-retries and --quarantine-after.
var defaultRules = runstate.Rules{ErrorRetries: controller.ErrorRetriesDefault, QuarantineAfter: controller.QuarantineAfterDefault}

// fold replays results into a fresh fold, counting them as the controller
// of run with budget and the default rules does.
func fold(results []*schema.Result, run string, budget, init, pool int, replace runstate.Replace) *runstate.Fold {
	f := runstate.NewFold(runstate.NewTally(run, budget, defaultRules), init, pool, replace)
	for _, r := range results {
		f.Apply(r, nil)
	}
	return f
}
