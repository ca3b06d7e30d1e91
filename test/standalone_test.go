package test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is an evoq process running in the background.
type proc struct {
	cmd    *exec.Cmd
	stderr syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // its exit error, set before done closes
}

// syncBuffer is a bytes.Buffer safe to read while the process writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (p *proc) reap() {
	p.err = p.cmd.Wait()
	close(p.done)
}

// exited reports whether p has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startBroker starts `evoq broker` and returns its client URL, the first
// line it prints.
func startBroker(t *testing.T, dir string) (*proc, string) {
	t.Helper()
	p := &proc{cmd: exec.Command(evoqBin, "broker", "--dir", dir, "--listen", "127.0.0.1:0"), done: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.reap()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "nats://") {
		t.Fatalf("broker printed %q (%v); stderr:\n%s", line, err, p.stderr.String())
	}
	return p, strings.TrimSpace(line)
}

// background starts an evoq process whose output is kept for the test log.
func background(t *testing.T, args ...string) *proc {
	t.Helper()
	return backgroundEnv(t, nil, args...)
}

// backgroundEnv is background with env added to the process's environment.
func backgroundEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := newProc(nil, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stderr, &p.stderr
	p.start(t, env)
	return p
}

// newProc prepares an evoq process; stdout, when not nil, gets its
// standard output.
func newProc(stdout io.Writer, args ...string) *proc {
	p := &proc{cmd: exec.Command(evoqBin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = stdout, &p.stderr
	return p
}

// start starts p with env added to its environment, reaps it, and kills
// it when the test ends.
func (p *proc) start(t *testing.T, env []string) {
	t.Helper()
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.reap()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
}

func (p *proc) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(limit):
		t.Fatalf("%s still running after %s; output:\n%s", strings.Join(p.cmd.Args, " "), limit, tail(p.stderr.String(), 3000))
		return nil
	}
}

// The subcommands apart: a standalone broker, workers started before the
// controller (they wait for the run and pick it up without --run), and a
// controller; the workers leave by themselves when the run is done.
func TestStandaloneBrokerControllerWorkers(t *testing.T) {
	t.Parallel()
	b, url := startBroker(t, t.TempDir())
	w1 := background(t, "worker", "--nats", url, "--evaluator", "sim", "--sim-mean", "0.01", "--slots", "3", "--id", "early1")
	w2 := background(t, "worker", "--nats", url, "--evaluator", "noop", "--slots", "2", "--id", "early2")
	r := evoq(t, 2*time.Minute, "controller", "--nats", url, "--budget", "120", "--init", "10", "--pool", "5",
		"--run", "standalone", "--wait-slots", "5", "--json")
	if r.code != 0 {
		t.Fatalf("controller exit %d:\n%s", r.code, tail(r.stderr, 3000))
	}
	s := lastJSON(t, r.stdout)
	if s.Evaluations != 120 || s.SlotsUsed != 5 || s.Slots != 5 {
		t.Fatalf("evaluations %d slots %d used %d; want 120, 5, 5", s.Evaluations, s.Slots, s.SlotsUsed)
	}
	for _, w := range []*proc{w1, w2} {
		if err := w.wait(t, 30*time.Second); err != nil {
			t.Fatalf("worker exited with %v:\n%s", err, tail(w.stderr.String(), 3000))
		}
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if err := b.wait(t, 30*time.Second); err != nil {
		t.Fatalf("broker exited with %v on SIGTERM", err)
	}
}
