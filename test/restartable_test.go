package test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// freePort returns a TCP port that was free a moment ago on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// restartable is a component started again with the same arguments after
// each kill: a controller, a broker or a worker.
type restartable struct {
	t     *testing.T
	name  string
	args  []string
	mu    sync.Mutex
	cur   *proc
	logs  []string // output of every incarnation
	kills int
}

func newRestartable(t *testing.T, name string, args ...string) *restartable {
	r := &restartable{t: t, name: name, args: args}
	r.start()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *restartable) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur = background(r.t, r.args...)
}

// kill sends SIGKILL, waits for the process to die and keeps its output.
func (r *restartable) kill() {
	r.mu.Lock()
	p := r.cur
	r.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	r.mu.Lock()
	r.logs = append(r.logs, p.stderr.String())
	r.kills++
	r.mu.Unlock()
}

func (r *restartable) stop() {
	r.mu.Lock()
	p := r.cur
	r.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exited reports whether the current incarnation has ended.
func (r *restartable) exited() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.cur.done:
		return true
	default:
		return false
	}
}

// output is the output of every incarnation so far, the current one last.
func (r *restartable) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(append(append([]string(nil), r.logs...), r.cur.stderr.String()), "\n")
}

// supervise restarts the workers whenever one dies, until stop closes.
func supervise(workers []*restartable, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, w := range workers {
				if w.exited() {
					w.mu.Lock()
					w.logs = append(w.logs, w.cur.stderr.String())
					w.mu.Unlock()
					w.start()
				}
			}
		}
	}()
	return &wg
}

// sleepRandom sleeps a random time in [lo, hi).
func sleepRandom(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(rand.Int64N(int64(hi-lo))))
}

// waitEvaluations waits until the controller's progress lines count at
// least n evaluations, or it has exited.
func waitEvaluations(t *testing.T, ctl *restartable, n int) {
	t.Helper()
	waitShowing(t, 2*time.Minute, func() bool { return ctl.exited() || evaluationsSoFar(ctl.output()) >= n }, ctl.output)
}

// killCount formats kill counts.
func killCount(rs ...*restartable) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s %d", r.name, r.kills)
	}
	return strings.Join(parts, ", ")
}
