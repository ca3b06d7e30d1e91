package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/evoq/evoq/runstate"
)

// scaleSpec is one run of separate broker, controller and worker
// processes, the shape of an HPC allocation: what the exascale and growth
// workloads measure.
type scaleSpec struct {
	name      string
	slots     int
	workers   int
	evaluator string  // sim or noop
	simMean   float64 // sim: mean seconds per evaluation
	simFail   float64
	simSigma  float64 // sim: the lognormal sigma; 0 for the default
	budget    int
	init      int
	pool      int
	// ackWait is the controller's --ack-wait; 0 for the default.
	ackWait time.Duration
	// statusEvery is how often `evoq status` is timed while the run goes
	// on; 0: never.
	statusEvery time.Duration
}

// Scale is what one scaleSpec run measured.
type Scale struct {
	Slots       int     `json:"slots"`
	Workers     int     `json:"worker_processes"`
	Evaluator   string  `json:"evaluator"`
	SimMeanS    float64 `json:"sim_mean_s,omitempty"`
	Budget      int     `json:"budget"`
	Evaluations int     `json:"evaluations"`
	// LiveMax is the largest number of slots the controller saw live at
	// once (its summary's slots).
	LiveMax    int     `json:"live_max"`
	SlotsUsed  int     `json:"slots_used"`
	UtilSteady float64 `json:"util_steady"`
	// IdleBeforeFirst is the part of 1 - UtilSteady spent by slots waiting
	// for their first design (the controller's summary); the rest is spent
	// between designs.
	IdleBeforeFirst float64 `json:"idle_before_first"`
	GapP99Ms        float64 `json:"gap_p99_ms"`
	EvalsPerS       float64 `json:"evals_per_s"`
	WallS           float64 `json:"wall_s"`
	// ControllerCPUS is the controller process's CPU time (user and
	// system) over its life; CPUPerResultUs that over Evaluations.
	ControllerCPUS float64 `json:"controller_cpu_s"`
	CPUPerResultUs float64 `json:"controller_cpu_per_result_us"`
	// The peak resident sizes, sampled every 0.1 s (every second with
	// more than 10 worker processes).
	ControllerRSSMB float64 `json:"controller_rss_peak_mb"`
	BrokerRSSMB     float64 `json:"broker_rss_peak_mb"`
	WorkerRSSMB     float64 `json:"worker_rss_peak_mb"` // the largest worker process
	// StoreMB is the broker's store directory at the end.
	StoreMB float64 `json:"store_mb"`
	// StatusS are the times `evoq status` took to answer during the run;
	// StatusMaxS the longest.
	StatusS    []float64 `json:"status_s,omitempty"`
	StatusMaxS float64   `json:"status_max_s,omitempty"`
}

// runScale runs sp: a standalone broker, a controller that waits for every
// slot, and the worker processes, sampling resident sizes and timing
// `evoq status` until the controller is done.
func (r *runner) runScale(ctx context.Context, sp scaleSpec) (*Scale, error) {
	dir := filepath.Join(r.cfg.Dir, sp.name)
	brk, url, err := r.startBrokerProc(dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = brk.Process.Signal(syscall.SIGTERM); _ = brk.Wait() }()
	run := sp.name
	ctlArgs := []string{"controller", "--nats", url, "--run", run, "--budget", strconv.Itoa(sp.budget),
		"--init", strconv.Itoa(sp.init), "--pool", strconv.Itoa(sp.pool), "--expect-slots", strconv.Itoa(sp.slots),
		"--wait-slots", strconv.Itoa(sp.slots), "--json", "--log-level", "warn"}
	if sp.ackWait > 0 {
		ctlArgs = append(ctlArgs, "--ack-wait", sp.ackWait.String())
	}
	var ctlOut, ctlErr bytes.Buffer
	ctl := exec.CommandContext(ctx, r.cfg.Evoq, ctlArgs...)
	// The controller's log stays in the store directory too.
	ctlLog, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return nil, err
	}
	defer ctlLog.Close()
	ctl.Stdout, ctl.Stderr = &ctlOut, io.MultiWriter(&ctlErr, ctlLog)
	if err := ctl.Start(); err != nil {
		return nil, fmt.Errorf("start the controller: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- ctl.Wait() }()
	finished := false
	defer func() {
		if !finished {
			_ = ctl.Process.Signal(syscall.SIGTERM)
			<-done
		}
	}()
	var workers []*exec.Cmd
	defer func() {
		for _, w := range workers {
			_ = w.Process.Signal(syscall.SIGTERM)
		}
		for _, w := range workers {
			_ = w.Wait()
		}
	}()
	for i := range sp.workers {
		n := sp.slots / sp.workers
		if i < sp.slots%sp.workers {
			n++
		}
		args := []string{"worker", "--nats", url, "--run", run, "--id", fmt.Sprintf("x%d", i+1),
			"--slots", strconv.Itoa(n), "--evaluator", sp.evaluator, "--log-level", "warn"}
		if sp.evaluator == "sim" {
			args = append(args, "--sim-mean", fmt.Sprint(sp.simMean), "--sim-fail", fmt.Sprint(sp.simFail))
			if sp.simSigma > 0 {
				args = append(args, "--sim-sigma", fmt.Sprint(sp.simSigma))
			}
		}
		w := exec.CommandContext(ctx, r.cfg.Evoq, args...)
		// Each worker's log stays in the store directory, for a run that
		// goes wrong.
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-x%d.log", i+1)))
		if err != nil {
			return nil, err
		}
		defer logf.Close()
		w.Stderr = logf
		if err := w.Start(); err != nil {
			return nil, fmt.Errorf("start worker %d: %w", i+1, err)
		}
		workers = append(workers, w)
	}
	fig := &Scale{Slots: sp.slots, Workers: sp.workers, Evaluator: sp.evaluator, SimMeanS: sp.simMean, Budget: sp.budget}
	every := 100 * time.Millisecond // short noop runs need it; /proc of many workers is read less often
	if sp.workers > 10 {
		every = time.Second
	}
	sampleTick := time.NewTicker(every)
	defer sampleTick.Stop()
	var statusTick <-chan time.Time
	if sp.statusEvery > 0 {
		t := time.NewTicker(sp.statusEvery)
		defer t.Stop()
		statusTick = t.C
	}
	for {
		select {
		case err := <-done:
			finished = true
			if err != nil {
				return nil, fmt.Errorf("controller: %w\n%s", err, tailText(ctlErr.String(), 3000))
			}
			sum, err := parseSummary(ctlOut.String())
			if err != nil {
				return nil, fmt.Errorf("controller: %w", err)
			}
			cpu := ctl.ProcessState.UserTime() + ctl.ProcessState.SystemTime()
			fig.fill(sum, cpu)
			fig.StoreMB = sig4(dirMB(dir))
			return fig, nil
		case <-sampleTick.C:
			fig.ControllerRSSMB = max(fig.ControllerRSSMB, residentMB(ctl.Process.Pid))
			fig.BrokerRSSMB = max(fig.BrokerRSSMB, residentMB(brk.Process.Pid))
			for _, w := range workers {
				fig.WorkerRSSMB = max(fig.WorkerRSSMB, residentMB(w.Process.Pid))
			}
		case <-statusTick:
			s, err := r.timeStatus(ctx, url, run)
			if err != nil {
				return nil, err
			}
			fig.StatusS = append(fig.StatusS, s)
			fig.StatusMaxS = max(fig.StatusMaxS, s)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *Scale) fill(sum *runstate.Summary, cpu time.Duration) {
	s.Evaluations, s.SlotsUsed, s.UtilSteady, s.LiveMax = sum.Evaluations, sum.SlotsUsed, sum.UtilSteady, sum.Slots
	s.GapP99Ms, s.EvalsPerS, s.WallS = sum.GapP99Ms, sum.EvalsPerS, sum.WallS
	s.IdleBeforeFirst = sum.IdleBeforeFirst
	s.ControllerCPUS = sig4(cpu.Seconds())
	if sum.Evaluations > 0 {
		s.CPUPerResultUs = sig4(cpu.Seconds() * 1e6 / float64(sum.Evaluations))
	}
}

// timeStatus runs `evoq status` once and returns how long it took to
// answer.
func (r *runner) timeStatus(ctx context.Context, url, run string) (float64, error) {
	began := time.Now()
	out, err := exec.CommandContext(ctx, r.cfg.Evoq, "status", "--nats", url, "--run", run).CombinedOutput()
	if err != nil && ctx.Err() == nil {
		return 0, fmt.Errorf("evoq status: %w\n%s", err, tailText(string(out), 1000))
	}
	return sig4(time.Since(began).Seconds()), nil
}

// dirMB is the size of the files under dir, in MB.
func dirMB(dir string) float64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return float64(n) / 1e6
}

// startBrokerProc starts `evoq broker` on dir and returns it with the URL
// it prints.
func (r *runner) startBrokerProc(dir string) (*exec.Cmd, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	brk := exec.Command(r.cfg.Evoq, "broker", "--dir", dir, "--listen", "127.0.0.1:0", "--log-level", "warn")
	var errb bytes.Buffer
	brk.Stderr = &errb
	stdout, err := brk.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := brk.Start(); err != nil {
		return nil, "", fmt.Errorf("start the broker: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = brk.Process.Kill()
		_ = brk.Wait()
		return nil, "", fmt.Errorf("the broker printed no URL: %w\n%s", err, tailText(errb.String(), 1000))
	}
	// Drained so that the broker never blocks on a full pipe.
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return brk, strings.TrimSpace(line), nil
}

// exascale is the exascale workload's run: 100,000 simulated slots in 100
// worker processes of 1,000 slots. The mean evaluation of 90 s keeps the
// results at about 1,100 a second, a fifth of what this 2-core machine
// folds (the noop workload), so the figures measure the slot machinery
// and not a machine short of CPU. The spread is narrower than the sim
// default (sigma 0.2, not 0.8): with 0.8 the longest of 300,000
// evaluations runs about 25 times the mean, and the run would wait an
// hour for its last design. The ack wait of 2 minutes keeps the progress
// messages of 100,000 running designs (one every ack wait / 3 each) at
// 2,500 a second instead of 10,000. The budget is three times the slots.
var exascale = scaleSpec{name: "exascale", slots: 100_000, workers: 100, evaluator: "sim", simMean: 90, simSigma: 0.2,
	budget: 300_000, init: 100, pool: 50, ackWait: 2 * time.Minute, statusEvery: 30 * time.Second}

// exascaleSmoke is its brief form for CI.
var exascaleSmoke = scaleSpec{name: "exascale", slots: 2_000, workers: 4, evaluator: "sim", simMean: 0.5,
	budget: 6_000, init: 20, pool: 10, statusEvery: time.Second}

func (r *runner) runExascale(ctx context.Context, row *Row) error {
	sp := exascale
	if r.cfg.Smoke {
		sp = exascaleSmoke
	}
	fig, err := r.runScale(ctx, sp)
	if err != nil {
		return err
	}
	row.Scale = fig
	r.exascale = fig
	return nil
}

// exascaleMet is the exascale workload's target.
func exascaleMet(s *Scale) bool {
	return s.SlotsUsed == s.Slots && s.UtilSteady >= 0.98 && s.ControllerRSSMB < 1024 &&
		len(s.StatusS) > 0 && s.StatusMaxS < 5
}

// Growth is the growth workload's figures: how the cost of a run grows
// with its slots and with its budget.
type Growth struct {
	// Slots are runs like exascale's at 1,000, 10,000 and 100,000 slots
	// (1,000 slots a worker process, 10 processes at least), each with a
	// mean evaluation of 0.9 ms a slot, so that results come at about
	// 1,100 a second in every run, and a budget of three times the slots;
	// the 100,000-slot row is the exascale workload's run when the same
	// bench ran it.
	Slots []*Scale `json:"slots"`
	// Budget are noop runs of 8 slots in 2 worker processes with a
	// budget of 10,000, 100,000 and 1,000,000 results.
	Budget []*Scale `json:"budget"`
}

// growthSlots and growthBudgets are the growth workload's series; the
// smoke run takes their first items, scaled down.
var (
	growthSlots   = []int{1_000, 10_000, 100_000}
	growthBudgets = []int{10_000, 100_000, 1_000_000}
)

func growthSlotSpec(slots int) scaleSpec {
	sp := exascale
	sp.name, sp.slots, sp.workers = fmt.Sprintf("growth-slots-%d", slots), slots, max(10, slots/1000)
	sp.simMean, sp.budget, sp.statusEvery = float64(slots)*0.0009, 3*slots, 0
	return sp
}

func growthBudgetSpec(budget int) scaleSpec {
	return scaleSpec{name: fmt.Sprintf("growth-budget-%d", budget), slots: 8, workers: 2, evaluator: "noop",
		budget: budget, init: 10, pool: 10}
}

func (r *runner) runGrowth(ctx context.Context, row *Row) error {
	g := &Growth{}
	row.Growth = g
	slots, budgets := growthSlots, growthBudgets
	if r.cfg.Smoke {
		slots, budgets = []int{200}, []int{1_000}
	}
	for _, n := range slots {
		if n == exascale.slots && r.exascale != nil {
			g.Slots = append(g.Slots, r.exascale)
			continue
		}
		sp := growthSlotSpec(n)
		if r.cfg.Smoke {
			sp.workers, sp.simMean = 2, 0.2
		}
		fig, err := r.runScale(ctx, sp)
		if err != nil {
			return err
		}
		g.Slots = append(g.Slots, fig)
	}
	for _, n := range budgets {
		fig, err := r.runScale(ctx, growthBudgetSpec(n))
		if err != nil {
			return err
		}
		g.Budget = append(g.Budget, fig)
	}
	return nil
}
