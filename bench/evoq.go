package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// evoqRun runs `evoq run` with args in a store of its own and returns its
// summary.
func (r *runner) evoqRun(ctx context.Context, name string, args []string) (*runstate.Summary, error) {
	p, err := r.evoqRunIn(ctx, filepath.Join(r.cfg.Dir, name), args)
	if err != nil {
		return nil, err
	}
	return p.sum, nil
}

// evoqProc is what one `evoq run` left besides its store.
type evoqProc struct {
	sum *runstate.Summary
	// stderr is its log, its workers' too: `evoq run` hands its log flags
	// to its worker processes and their stderr is its own.
	stderr string
	// wall is its time from start to exit, cpu the CPU time it and its
	// worker processes used in that time.
	wall, cpu time.Duration
}

// cpuShare is the share of the machine's CPU time the run used: near 1,
// the figures measure a machine that is short of CPU, not evoq.
func (p *evoqProc) cpuShare() float64 {
	if p.wall <= 0 {
		return 0
	}
	return sig4(p.cpu.Seconds() / (p.wall.Seconds() * float64(runtime.NumCPU())))
}

// evoqRunIn runs `evoq run` with args in store dir. args come after the
// defaults, so a flag in args (--log-level) overrides them: the flag
// package keeps the last value.
func (r *runner) evoqRunIn(ctx context.Context, dir string, args []string) (*evoqProc, error) {
	full := append([]string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--log-level", "warn",
		"--eval-logs", filepath.Join(dir, "eval-logs")}, args...)
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, r.cfg.Evoq, full...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("evoq %s: %w\n%s", strings.Join(full, " "), err, tailText(errb.String(), 2000))
	}
	p := &evoqProc{stderr: errb.String(), wall: time.Since(began)}
	// On Linux the usage wait4 reports includes the children the process
	// reaped itself: evoq run waits for its workers.
	p.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	sum, err := parseSummary(out.String())
	if err != nil {
		return nil, fmt.Errorf("evoq run: %w", err)
	}
	p.sum = sum
	return p, nil
}

// parseSummary reads the controller.Summary that `evoq run --json` and
// `evoq controller --json` print as the last line of their output.
func parseSummary(out string) (*runstate.Summary, error) {
	var sum runstate.Summary
	if err := json.Unmarshal([]byte(lastLine(out)), &sum); err != nil {
		return nil, fmt.Errorf("no JSON summary on the last line: %w\n%s", err, tailText(out, 500))
	}
	if sum.Run == "" {
		return nil, fmt.Errorf("the last line is no run summary\n%s", tailText(out, 500))
	}
	return &sum, nil
}

// memoryRun is the memory workload's broker, which keeps the run's store
// for the replay workload.
type memoryRun struct {
	url   string
	evals int
}

// memoryRunID is the run ID of the memory workload.
const memoryRunID = "memory"

// runMemory runs a standalone broker, a controller and two noop workers
// for 1,000,000 evaluations and samples the controller's resident size
// after 10,000 and at the end. The broker keeps running for replay.
func (r *runner) runMemory(ctx context.Context, row *Row) error {
	total, first := 1_000_000, 10_000
	if r.cfg.Smoke {
		total, first = 3_000, 1_000
	}
	url, err := r.startBroker(filepath.Join(r.cfg.Dir, "memory"))
	if err != nil {
		return err
	}
	r.memory = &memoryRun{url: url, evals: total}
	var ctlOut, ctlErr bytes.Buffer
	ctl := exec.CommandContext(ctx, r.cfg.Evoq, "controller", "--nats", url, "--run", memoryRunID,
		"--budget", strconv.Itoa(total), "--json", "--log-level", "warn", "--expect-slots", "8")
	ctl.Stdout, ctl.Stderr = &ctlOut, &ctlErr
	if err := ctl.Start(); err != nil {
		return fmt.Errorf("start the controller: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- ctl.Wait() }()
	finished := false
	defer func() {
		if !finished { // a failure below: the controller would wait for its budget
			_ = ctl.Process.Signal(syscall.SIGTERM)
			<-done
		}
	}()
	stop, err := r.startWorkers(ctx, url)
	defer stop()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect to the broker: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	fig := &Memory{Evaluations: total, Pool: runstate.PoolDefault}
	row.Memory = fig
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			finished = true
			if err != nil {
				return fmt.Errorf("controller: %w\n%s", err, tailText(ctlErr.String(), 2000))
			}
			sum, err := parseSummary(ctlOut.String())
			if err != nil {
				return fmt.Errorf("controller: %w", err)
			}
			fig.EvalsPerS = sum.EvalsPerS
			fig.finish()
			return nil
		case <-tick.C:
			fig.sample(residentMB(ctl.Process.Pid), storedResults(ctx, js, memoryRunID), first)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sample records the controller's resident size rss (MB; 0 when unknown)
// with stored results in the stream (-1 when unknown): the first size
// once first results are stored, the last one from then on, and the peak.
func (m *Memory) sample(rss float64, stored, first int) {
	if rss <= 0 {
		return
	}
	if stored >= first {
		if m.RSSFirstMB == 0 {
			m.RSSFirstMB, m.Sampled = rss, stored
		}
		m.RSSEndMB = rss
	}
	m.RSSPeakMB = max(m.RSSPeakMB, rss)
}

// finish computes the ratio of the last size to the first.
func (m *Memory) finish() {
	if m.RSSFirstMB > 0 {
		m.Ratio = sig4(m.RSSEndMB / m.RSSFirstMB)
	}
}

// startBroker starts `evoq broker` on dir and returns the URL it prints;
// the broker is stopped when Run returns.
func (r *runner) startBroker(dir string) (string, error) {
	brk, url, err := r.startBrokerProc(dir)
	if err != nil {
		return "", err
	}
	r.cleanup = append(r.cleanup, func() { _ = brk.Process.Signal(syscall.SIGTERM); _ = brk.Wait() })
	return url, nil
}

// startWorkers starts the memory workload's two noop workers of 4 slots;
// stop ends them.
func (r *runner) startWorkers(ctx context.Context, url string) (stop func(), err error) {
	var workers []*exec.Cmd
	stop = func() {
		for _, w := range workers {
			_ = w.Process.Signal(syscall.SIGTERM)
			_ = w.Wait()
		}
	}
	for i := range 2 {
		w := exec.CommandContext(ctx, r.cfg.Evoq, "worker", "--nats", url, "--run", memoryRunID,
			"--id", fmt.Sprintf("m%d", i+1), "--slots", "4", "--evaluator", "noop", "--log-level", "warn")
		w.Stderr = io.Discard
		if err := w.Start(); err != nil {
			return stop, fmt.Errorf("start worker %d: %w", i+1, err)
		}
		workers = append(workers, w)
	}
	return stop, nil
}

// runReplay restarts a controller on the memory workload's finished run:
// it folds every stored result, finds the budget spent and stops; its
// summary says how long the fold took.
func (r *runner) runReplay(ctx context.Context, row *Row) error {
	if r.memory == nil {
		return errors.New("the memory workload did not run")
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, r.cfg.Evoq, "controller", "--nats", r.memory.url, "--run", memoryRunID,
		"--budget", strconv.Itoa(r.memory.evals), "--json", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("controller restart: %w\n%s", err, tailText(errb.String(), 2000))
	}
	sum, err := parseSummary(out.String())
	if err != nil {
		return fmt.Errorf("controller restart: %w", err)
	}
	if sum.Replay == nil {
		return fmt.Errorf("the restarted controller replayed nothing: %d results in its summary", sum.Evaluations)
	}
	row.Replay = sum.Replay
	return nil
}

// storedResults counts run's stored results; -1 if the broker does not
// answer.
func storedResults(ctx context.Context, js jetstream.JetStream, run string) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, schema.ResultStream)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(schema.ResultSubject(run)))
	if err != nil {
		return -1
	}
	return int(info.State.Subjects[schema.ResultSubject(run)])
}

// residentMB reads a process's resident set size from /proc, 0 if unknown.
func residentMB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return sig4(kb / 1024)
		}
	}
	return 0
}

// tailText returns the last n bytes of s.
func tailText(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
