package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// connectJS connects a plain client to a running broker.
func connectJS(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// storedResults reads every result of run stored so far on a running
// broker, in stream order.
func storedResults(t *testing.T, js jetstream.JetStream, run string) []*schema.Result {
	t.Helper()
	want := subjectCount(t, js, run)
	if want == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, schema.ResultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schema.ResultSubject(run)}})
	if err != nil {
		t.Fatalf("results consumer: %v", err)
	}
	var out []*schema.Result
	for len(out) < want {
		msgs, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("fetch results: %v", err)
		}
		n := 0
		for m := range msgs.Messages() {
			r, err := schema.DecodeResult(m.Data())
			if err != nil {
				t.Fatalf("stored result does not decode: %v", err)
			}
			out = append(out, r)
			n++
		}
		if n == 0 {
			t.Fatalf("read %d of %d results", len(out), want)
		}
	}
	return out
}

// bySeq groups results by design sequence, in stream order.
func bySeq(results []*schema.Result) map[uint64][]*schema.Result {
	m := map[uint64][]*schema.Result{}
	for _, r := range results {
		m[r.Design.Seq] = append(m[r.Design.Seq], r)
	}
	return m
}

// procsMatching lists the processes whose command line contains s.
func procsMatching(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		if cmd := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})); strings.Contains(cmd, s) {
			found = append(found, e.Name()+": "+strings.TrimSpace(cmd))
		}
	}
	return found
}

// runWithin runs evoq like evoq(), but reports a process still running
// after limit as hung (it is killed) instead of failing the test.
func runWithin(t *testing.T, limit time.Duration, args ...string) (r result, hung bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, evoqBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r = result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return r, true
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("evoq %s: %v", strings.Join(args, " "), err)
	}
	return r, false
}

// A design whose evaluation kills its worker every time (a poison design)
// reaches the redelivery limit and is recorded as lost, once; the
// supervised workers come back and the rest of the run completes.
func TestPoisonDesign(t *testing.T) {
	t.Parallel()
	const run, budget = "poison", 12
	dir := t.TempDir()
	_, url := startBroker(t, dir)
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "4",
		"--pool", "4", "--max-deliver", "2", "--ack-wait", "3s", "--json")
	// The default worker ID is <host>-<pid>: design 5 kills the worker
	// evaluating it, whichever incarnation that is.
	script := `if [ "${EVOQ_DESIGN_ID##*-}" = 5 ]; then kill -9 "${EVOQ_WORKER##*-}"; sleep 2; exit 1; fi
echo '{"fitness": 0.5}'`
	var workers []*restartable
	for range 2 {
		workers = append(workers, newRestartable(t, "worker", "worker", "--nats", url, "--run", run,
			"--slots", "1", "--eval-cmd", script))
	}
	stop := make(chan struct{})
	wg := supervise(workers, stop)
	stopSupervising := func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(stopSupervising) // runs before the workers' own cleanups
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 4000))
	}
	stopSupervising()
	s := lastJSON(t, ctl.stderr.String())
	if s.Evaluations != budget || s.Lost != 1 || s.OK != budget-1 {
		t.Fatalf("evaluations %d, ok %d, lost %d; want %d, %d, 1\ncontroller:\n%s\nworkers:\n%s", s.Evaluations, s.OK, s.Lost,
			budget, budget-1, tail(ctl.stderr.String(), 3000), tail(workers[0].output()+workers[1].output(), 3000))
	}
	_, js := connectJS(t, url)
	results := storedResults(t, js, run)
	seqs := bySeq(results)
	for seq := uint64(1); seq <= budget; seq++ {
		rs := seqs[seq]
		switch {
		case len(rs) == 0:
			t.Errorf("design %d has no result", seq)
		case seq == 5:
			if len(rs) != 1 || rs[0].Status != schema.StatusLost || rs[0].Attempt != 2 {
				for _, r := range rs {
					t.Logf("design 5: status %s attempt %d worker %q error %q", r.Status, r.Attempt, r.Worker, r.Error)
				}
				t.Errorf("design 5 has %d results, first %s; want exactly one, lost after 2 deliveries", len(rs), rs[0].Status)
			}
		case rs[0].Status != schema.StatusOK:
			t.Errorf("design %d: counted result %s (%s), want ok", seq, rs[0].Status, rs[0].Error)
		}
	}
	f := fold(results, run, budget, 4, 4, controller.ReplaceWorst)
	if f.Terminal() != budget || f.Count(schema.StatusLost) != 1 || len(seqs) != budget {
		t.Errorf("replayed fold: %d terminal, %d lost, %d designs with results; want %d, 1, %d", f.Terminal(),
			f.Count(schema.StatusLost), len(seqs), budget, budget)
	}
	t.Logf("%d results for %d designs; design 5 lost after 2 deliveries, each of which killed its worker", len(results), len(seqs))
}

// An evaluation past --eval-timeout is a timeout result, and the
// evaluator's whole process group dies with it: a background child as well
// as the foreground command.
func TestEvalTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	const marker = "987.65" // in no other command line
	script := `if [ $(( ${EVOQ_DESIGN_ID##*-} % 4 )) -eq 0 ]; then sleep 987.654 & sleep 987.655; fi
echo '{"fitness": 0.5}'`
	start := time.Now()
	s, dir := runJSON(t, time.Minute, "--run", "evto", "--eval-cmd", script, "--eval-timeout", "1s",
		"--slots", "2", "--budget", "8", "--init", "4", "--pool", "2")
	took := time.Since(start)
	if s.Evaluations != 8 || s.Timeout != 2 || s.OK != 6 {
		t.Fatalf("evaluations %d, timeout %d, ok %d; want 8, 2, 6", s.Evaluations, s.Timeout, s.OK)
	}
	if took > 30*time.Second {
		t.Errorf("the run took %s; the timeouts should end it within seconds", took)
	}
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = procsMatching(marker); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("evaluator processes outlived their timed-out evaluation:\n%s", strings.Join(left, "\n"))
	}
	for _, r := range readResults(t, dir, "evto") {
		timedOut := r.Design.Seq%4 == 0
		if (r.Status == schema.StatusTimeout) != timedOut {
			t.Errorf("design %d: status %s", r.Design.Seq, r.Status)
		}
		if timedOut && (r.Duration() < time.Second || r.Duration() > 10*time.Second) {
			t.Errorf("design %d timed out after %s, want about 1 s", r.Design.Seq, r.Duration())
		}
	}
}

// An evaluator that prints 20 MB to stdout costs the worker 64 KiB: the
// last line is still found, or quoted clipped when it is not JSON.
func TestEvaluatorFloodsStdout(t *testing.T) {
	t.Parallel()
	const flood = `head -c 20000000 /dev/zero | tr '\0' x`
	for _, tc := range []struct {
		name, cmd string
		check     func(t *testing.T, s *controller.Summary, results []*schema.Result)
	}{{
		name: "json-after-flood",
		cmd:  flood + `; echo; echo '{"fitness": 0.5}'`,
		check: func(t *testing.T, s *controller.Summary, results []*schema.Result) {
			if s.OK != 6 {
				t.Errorf("ok %d, want 6 (error %d)", s.OK, s.Error)
			}
			for _, r := range results {
				if r.Status != schema.StatusOK || r.Fitness != 0.5 {
					t.Errorf("%s: %s, fitness %v (%s); want ok, 0.5", r.DesignID, r.Status, r.Fitness, tail(r.Error, 300))
				}
			}
		},
	}, {
		name: "flood-without-newline",
		cmd:  flood,
		check: func(t *testing.T, s *controller.Summary, results []*schema.Result) {
			if s.Error != 6 {
				t.Errorf("error %d, want 6 (ok %d)", s.Error, s.OK)
			}
			for _, r := range results {
				if r.Status != schema.StatusError || !strings.Contains(r.Error, "not a JSON object") ||
					!strings.Contains(r.Error, `"xxxxxxxxxxxxxxxx`) || len(r.Error) > 1000 {
					t.Errorf("%s: %s, error (%d bytes) %q; want an error quoting a clipped line", r.DesignID, r.Status,
						len(r.Error), tail(r.Error, 300))
				}
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, dir := runJSON(t, time.Minute, "--run", "flood", "--eval-cmd", tc.cmd, "--slots", "2", "--budget", "6",
				"--init", "4", "--pool", "2")
			if s.Evaluations != 6 {
				t.Fatalf("evaluations %d, want 6", s.Evaluations)
			}
			results := readResults(t, dir, "flood")
			if len(results) != 6 {
				t.Errorf("%d results stored, want 6", len(results))
			}
			tc.check(t, s, results)
		})
	}
}

// A well-formed design whose genome is outside the run's search space gets
// an error result from the worker, which keeps serving; the controller,
// which never published it, ignores that result and the run spends exactly
// its budget.
func TestGenomeOutsideSpace(t *testing.T) {
	t.Parallel()
	const run, budget = "gs", 20
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "10",
		"--pool", "5", "--wait-slots", "2", "--json")
	// The controller publishes nothing until two slots are live: the
	// foreign design is first on the queue.
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "waiting for worker slots") })
	_, js := connectJS(t, url)
	data, err := schema.EncodeDesign(&schema.Design{Run: run, Seq: 9999, ID: schema.DesignID(run, 9999),
		Genome: map[string]any{"lr": 99.0}, Origin: schema.OriginRandom, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, schema.DesignSubject(run), data); err != nil {
		t.Fatalf("publish the foreign design: %v", err)
	}
	w := background(t, "worker", "--nats", url, "--run", run, "--id", "gsw", "--slots", "2",
		"--evaluator", "sim", "--sim-mean", "0.05")
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if err := w.wait(t, 30*time.Second); err != nil {
		t.Fatalf("worker: %v\n%s", err, tail(w.stderr.String(), 3000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget {
		t.Errorf("run ended with %d evaluations, want %d", s.Evaluations, budget)
	}
	if !hasLine(w.stderr.String(), "genome does not fit the run's search space", "gs-9999") {
		t.Errorf("worker log has no rejection of gs-9999:\n%s", tail(w.stderr.String(), 3000))
	}
	if !hasLine(ctl.stderr.String(), "never published", "gs-9999") {
		t.Errorf("controller log does not say it ignored gs-9999's result:\n%s", tail(ctl.stderr.String(), 3000))
	}
	results := storedResults(t, js, run)
	seqs := bySeq(results)
	if rs := seqs[9999]; len(rs) != 1 || rs[0].Status != schema.StatusError || !strings.Contains(rs[0].Error, "search space") {
		t.Errorf("gs-9999 has %d results, want one error result naming the search space", len(rs))
		for _, r := range rs {
			t.Logf("gs-9999: %s %q", r.Status, r.Error)
		}
	}
	served := 0
	for seq := uint64(1); seq <= budget; seq++ {
		if rs := seqs[seq]; len(rs) != 1 || rs[0].Worker != "gsw" || rs[0].Status != schema.StatusOK {
			t.Errorf("design %d: %d results; want one ok result from gsw", seq, len(rs))
		} else {
			served++
		}
	}
	if len(results) != budget+1 {
		t.Errorf("%d results stored (%d designs served after the rejection); want %d and the rejected one", len(results), served, budget)
	}
}

// hasLine reports whether some line of log contains every one of parts.
func hasLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// A worker frozen (SIGSTOP) mid-evaluation has its design redelivered to
// another worker; thawed, it stores its own result for the same design
// too. The stream keeps both, the run counts the design once.
func TestDuplicateResultsCountOnce(t *testing.T) {
	t.Parallel()
	const run, budget = "dup", 20
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "4",
		"--pool", "4", "--ack-wait", "3s", "--json")
	a := background(t, "worker", "--nats", url, "--run", run, "--id", "a", "--slots", "1",
		"--eval-cmd", `sleep 2; echo '{"fitness": 0.1}'`)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(a.stderr.String(), "worker joined run") })
	time.Sleep(500 * time.Millisecond) // a's slot takes a design and starts evaluating it
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2",
		"--eval-cmd", `sleep 1; echo '{"fitness": 0.1}'`)
	_, js := connectJS(t, url)
	var redelivered *schema.Result
	for deadline := time.Now().Add(30 * time.Second); redelivered == nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no second attempt by worker b within 30 s\ncontroller:\n%s", tail(ctl.stderr.String(), 3000))
		}
		for _, r := range storedResults(t, js, run) {
			if r.Worker == "b" && r.Attempt == 2 {
				redelivered = r
			}
		}
	}
	thaw()
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	s := lastJSON(t, ctl.stderr.String())
	results := storedResults(t, js, run)
	twice := 0
	for seq, rs := range bySeq(results) {
		if len(rs) == 1 {
			continue
		}
		twice++
		if seq != redelivered.Design.Seq || len(rs) != 2 {
			t.Errorf("design %d has %d results", seq, len(rs))
			continue
		}
		got := map[string]int{}
		for _, r := range rs {
			got[r.Worker] = r.Attempt
		}
		if got["a"] != 1 || got["b"] != 2 {
			t.Errorf("design %d: results by worker and attempt %v, want a: 1, b: 2", seq, got)
		}
	}
	if twice != 1 {
		t.Errorf("%d designs with two results, want 1 (the frozen worker's own result was not stored?)\nworker a:\n%s",
			twice, tail(a.stderr.String(), 2000))
	}
	f := fold(results, run, budget, 4, 4, controller.ReplaceWorst)
	if s.Evaluations != budget || f.Terminal() != budget || len(results) != budget+1 {
		t.Errorf("summary %d evaluations, replayed fold %d terminal, %d results stored; want %d, %d, %d",
			s.Evaluations, f.Terminal(), len(results), budget, budget, budget+1)
	}
	t.Logf("design %s evaluated by a (frozen, attempt 1) and b (attempt 2); counted once", redelivered.DesignID)
}

// Faults at start or in the store stop evoq with a message naming the
// cause, never a hang.
func TestStartupFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) []string // the arguments
		limit time.Duration
		want  []string // in stderr, every one
		anyOf []string // in stderr, at least one
	}{{
		name: "dir-under-a-file",
		setup: func(t *testing.T) []string {
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"controller", "--dir", filepath.Join(file, "sub"), "--listen", "127.0.0.1:0", "--budget", "1", "--init", "1", "--pool", "1"}
		},
		limit: 10 * time.Second,
		want:  []string{"--dir", "not a directory"},
	}, {
		name: "port-in-use",
		setup: func(t *testing.T) []string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return []string{"controller", "--dir", t.TempDir(), "--listen", l.Addr().String(), "--budget", "1", "--init", "1", "--pool", "1"}
		},
		limit: 5 * time.Second,
		want:  []string{"--listen", "address already in use"},
	}, {
		name: "max-store-full",
		setup: func(t *testing.T) []string {
			return []string{"run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--evaluator", "noop", "--slots", "2",
				"--budget", "100000", "--init", "10", "--pool", "5", "--max-store", "1MB"}
		},
		limit: 30 * time.Second,
		want:  []string{"store is full"},
	}, {
		name: "tmpfs-full",
		setup: func(t *testing.T) []string {
			mnt := t.TempDir()
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", mnt).CombinedOutput(); err != nil {
				t.Skipf("cannot mount a tmpfs here: %v %s", err, bytes.TrimSpace(out))
			}
			t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
			return []string{"run", "--dir", mnt, "--listen", "127.0.0.1:0", "--evaluator", "noop", "--slots", "2",
				"--budget", "100000", "--init", "10", "--pool", "5"}
		},
		limit: 30 * time.Second,
		// JetStream's own limit (from the disk's size) may be met first.
		anyOf: []string{"no space left on device", "store is full"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := tc.setup(t)
			start := time.Now()
			r, hung := runWithin(t, tc.limit, args...)
			if hung {
				t.Fatalf("evoq %s: still running after %s\nstderr:\n%s", strings.Join(args, " "), tc.limit, tail(r.stderr, 3000))
			}
			if r.code == 0 {
				t.Fatalf("exit 0 after %s, want non-zero\nstderr:\n%s", time.Since(start), tail(r.stderr, 3000))
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, tail(r.stderr, 3000))
				}
			}
			found := len(tc.anyOf) == 0
			for _, w := range tc.anyOf {
				found = found || strings.Contains(r.stderr, w)
			}
			if !found {
				t.Errorf("stderr has none of %q:\n%s", tc.anyOf, tail(r.stderr, 3000))
			}
			t.Logf("exit %d after %s", r.code, time.Since(start).Round(time.Millisecond))
		})
	}
}

// Settings that would bound parallelism silently or break dead-worker
// detection are refused at start with a message naming them.
func TestSanityChecks(t *testing.T) {
	t.Parallel()
	t.Run("slots-over-max-waiting", func(t *testing.T) {
		t.Parallel()
		const run = "sane"
		_, url := startBroker(t, t.TempDir())
		ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", "10", "--init", "4", "--pool", "2")
		waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "work queue ready") })
		if !strings.Contains(ctl.stderr.String(), "max_waiting=4096") {
			t.Fatalf("the run's consumer is not sized for the default slots:\n%s", tail(ctl.stderr.String(), 2000))
		}
		r := evoq(t, 30*time.Second, "worker", "--nats", url, "--run", run, "--slots", "5000", "--evaluator", "noop")
		if r.code == 0 || !strings.Contains(r.stderr, "MaxWaiting 4096") || !strings.Contains(r.stderr, "--slots 5000") {
			t.Errorf("worker with 5000 slots: exit %d, want non-zero with a message naming --slots and MaxWaiting:\n%s",
				r.code, tail(r.stderr, 2000))
		}
		if strings.Contains(r.stderr, "worker joined run") {
			t.Errorf("the worker started its slots before refusing:\n%s", tail(r.stderr, 2000))
		}
		if strings.Contains(ctl.stderr.String(), "slots=5000") {
			t.Errorf("the controller saw the refused worker's 5000 slots:\n%s", tail(ctl.stderr.String(), 2000))
		}
	})
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{{
		name: "ack-wait-below-3s",
		args: func(t *testing.T) []string { return runArgs(t, "--ack-wait", "2s") },
		want: "--ack-wait 2s",
	}, {
		name: "max-deliver-0",
		args: func(t *testing.T) []string { return runArgs(t, "--max-deliver", "0") },
		want: "--max-deliver 0",
	}, {
		name: "worker-slots-0",
		args: func(t *testing.T) []string {
			return []string{"worker", "--nats", fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)), "--run", "x", "--slots", "0"}
		},
		want: "--slots 0",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := evoq(t, 30*time.Second, tc.args(t)...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, want 2 with a message naming %q:\n%s", r.code, tc.want, tail(r.stderr, 2000))
			}
		})
	}
}

// runArgs are `evoq run` arguments that would start a small, harmless run
// in a fresh store, plus extra.
func runArgs(t *testing.T, extra ...string) []string {
	return append([]string{"run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--evaluator", "noop",
		"--slots", "1", "--budget", "1", "--init", "1", "--pool", "1"}, extra...)
}
