package test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
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

// verdict is what verifyRun checked, for the test log and the soak report.
type verdict struct {
	results, terminal, duplicates, digests int
	designsStored                          uint64
}

func (v verdict) String() string {
	return fmt.Sprintf("%d results stored for %d designs (%d duplicate evaluations counted once), %d designs ever queued, %d logged pool digests equal to the replay",
		v.results, v.terminal, v.duplicates, v.designsStored, v.digests)
}

// verifyRun opens a finished run's store and checks the invariants: every
// design 1..budget has exactly one counted terminal result and was
// published once with one genome, nothing else was ever queued, and every
// pool digest a controller logged equals the replay of the results stream
// up to that point.
func verifyRun(t *testing.T, dir, run string, budget int, replace controller.Replace, init, pool int, logs string) verdict {
	t.Helper()
	results := readResults(t, dir, run)
	v := verdict{results: len(results)}
	checkDesigns(t, results, budget)
	f := fold(results, run, budget, init, pool, replace)
	v.terminal = f.Terminal()
	v.duplicates = len(results) - f.Terminal()
	if f.Terminal() != budget {
		t.Errorf("%d designs have a terminal result, want exactly %d", f.Terminal(), budget)
	}
	v.designsStored = designsEverQueued(t, dir)
	if v.designsStored != uint64(budget) {
		t.Errorf("the design queue stored %d designs, want %d: a design was published twice or skipped", v.designsStored, budget)
	}
	v.digests = checkDigests(t, results, logs, run, budget, init, pool, replace)
	return v
}

// checkDesigns: seqs 1..budget all present, each with a single genome.
func checkDesigns(t *testing.T, results []*schema.Result, budget int) {
	t.Helper()
	genome := map[uint64]string{}
	for _, r := range results {
		g := fmt.Sprint(r.Design.Genome, r.Design.Created.UnixNano())
		if old, ok := genome[r.Design.Seq]; ok && old != g {
			t.Errorf("design %s has results for two different designs: published twice", r.DesignID)
		}
		genome[r.Design.Seq] = g
	}
	for seq := uint64(1); seq <= uint64(budget); seq++ {
		if _, ok := genome[seq]; !ok {
			t.Errorf("design seq %d has no result", seq)
		}
	}
	if len(genome) != budget {
		t.Errorf("results for %d distinct designs, want %d", len(genome), budget)
	}
}

// designsEverQueued is the design stream's last sequence: how many designs
// were ever stored on the queue (the test's broker holds one run).
func designsEverQueued(t *testing.T, dir string) uint64 {
	t.Helper()
	b := openStore(t, dir)
	ctx := testutil.Context(t, 10*time.Second)
	st, err := b.JS.Stream(ctx, schema.DesignStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

var digestLine = regexp.MustCompile(`(?:evaluations|results)=(\d+)[^\n]*pool_digest=([0-9a-f]{16})|pool_digest=([0-9a-f]{16})[^\n]*(?:evaluations|results)=(\d+)`)

// checkDigests replays the results and checks every (count, digest) pair
// the controllers logged: the live pool at each point, before every kill
// and after every restart, equals the pool rebuilt from the stream.
func checkDigests(t *testing.T, results []*schema.Result, logs, run string, budget, init, pool int, replace controller.Replace) int {
	t.Helper()
	want := map[int]map[string]bool{}
	for _, m := range digestLine.FindAllStringSubmatch(logs, -1) {
		n, d := m[1], m[2]
		if n == "" {
			n, d = m[4], m[3]
		}
		k, _ := strconv.Atoi(n)
		if want[k] == nil {
			want[k] = map[string]bool{}
		}
		want[k][d] = true
	}
	f := controller.NewFold(controller.NewTally(run, budget), init, pool, replace)
	checked := 0
	check := func() {
		for d := range want[f.Terminal()] {
			if d != f.Pool().Digest() {
				t.Errorf("after %d results a controller logged pool digest %s; replaying the stream gives %s", f.Terminal(), d, f.Pool().Digest())
			}
			checked++
		}
		delete(want, f.Terminal())
	}
	check()
	for _, r := range results {
		if f.Apply(r, nil) == controller.Counted {
			check()
		}
	}
	if checked == 0 {
		t.Error("no pool digest was logged to compare")
	}
	return checked
}

// killCount formats kill counts.
func killCount(rs ...*restartable) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s %d", r.name, r.kills)
	}
	return strings.Join(parts, ", ")
}

var _ = exec.Command
