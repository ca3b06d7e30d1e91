package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// The preempt workload measures what progress checkpoints save when
// workers are preempted: the fidelity workload's sim learning curves on
// worker processes whose walltime is several times shorter than the run.
// Each worker hands its unfinished designs back at its walltime less its
// margin and exits; the bench then starts it again, with the same ID, as
// Slurm starts a requeued job, while the controller stays up. Each seed
// runs twice on the same designs and slots: with --sim-progress, so that
// an interrupted design resumes from its last saved step, and without, so
// that it trains again from scratch.

// PreemptSettings are the preempt workload's runs.
type PreemptSettings struct {
	Slots    int     `json:"slots"`
	Workers  int     `json:"workers"`
	SimMeanS float64 `json:"sim_mean_s"`
	Steps    int     `json:"steps"`
	Budget   int     `json:"budget"`
	// Init and Pool are the search's --init and --pool.
	Init int `json:"init"`
	Pool int `json:"pool"`
	// MaxDeliver is the run's --max-deliver: every hand-back at a
	// walltime is a delivery, and a design longer than one walltime needs
	// several, with progress too. Without progress such a design never
	// finishes: it ends lost after MaxDeliver walltimes.
	MaxDeliver int `json:"max_deliver"`
	// WalltimeS is each worker process's --walltime, MarginS its
	// --walltime-margin and MinEvalS its --min-eval-time.
	WalltimeS float64 `json:"walltime_s"`
	MarginS   float64 `json:"margin_s"`
	MinEvalS  float64 `json:"min_eval_s"`
	Seeds     int     `json:"seeds"`
}

// Preempt modes: the run with progress checkpoints, and the one without.
const (
	modeProgress = "progress"
	modeNoProg   = "scratch"
)

// preemptModes are the preempt workload's runs of a seed, in order.
var preemptModes = []string{modeProgress, modeNoProg}

// preemptSettings are the preempt workload's runs, full or smoke. 8 slots
// in 2 workers of 4, 27 steps over a mean of 4 s: 100 designs are about
// a minute of a run, and each worker's walltime of 15 s, less its margin
// of 3 s, is cut 5 or 6 times. The lognormal spread (sigma 0.8) makes one
// design in ten longer than 9 s, so a worker that takes a design with
// the time left for a typical one is often cut in the middle of it.
func preemptSettings(smoke bool, seeds int) PreemptSettings {
	s := PreemptSettings{Slots: 8, Workers: 2, SimMeanS: 4, Steps: 27, Budget: 100, Init: 20, Pool: 10, MaxDeliver: 6,
		WalltimeS: 15, MarginS: 3, MinEvalS: 2, Seeds: 3}
	if smoke {
		s.Slots, s.SimMeanS, s.Steps, s.Budget, s.Init, s.Pool = 4, 1.5, 9, 16, 8, 4
		s.WalltimeS, s.MarginS, s.MinEvalS, s.Seeds = 5, 1.5, 1, 1
	}
	if seeds > 0 {
		s.Seeds = seeds
	}
	return s
}

func preemptRunID(seed int) string { return "preempt-s" + strconv.Itoa(seed) }

// controllerArgs are the `evoq controller` flags of seed's run in mode,
// on the broker at url. Both modes have the same run ID, so the designs
// draw the same times (evaluators.Sim.Draw) and the initial designs are
// the same. --sim-fixed-time gives every attempt of a design its time, as
// a real training has: without it a design cut short would draw a new
// time to train again in, most often a shorter one, since the longest
// designs are the ones cut.
func (s PreemptSettings) controllerArgs(url string, seed int, mode string) []string {
	args := []string{"controller", "--nats", url, "--run", preemptRunID(seed), "--seed", strconv.Itoa(seed),
		"--evaluator", "sim", "--sim-curve", "--sim-steps", strconv.Itoa(s.Steps), "--sim-fixed-time",
		"--sim-mean", strconv.FormatFloat(s.SimMeanS, 'g', -1, 64),
		"--budget", strconv.Itoa(s.Budget), "--init", strconv.Itoa(s.Init), "--pool", strconv.Itoa(s.Pool),
		"--max-deliver", strconv.Itoa(s.MaxDeliver), "--expect-slots", strconv.Itoa(s.Slots), "--json", "--log-level", "warn"}
	if mode == modeProgress {
		args = append(args, "--sim-progress")
	}
	return args
}

// workerArgs are the `evoq worker` flags of worker i (from 1): every
// start of it, as every start of a requeued job, has the same ID.
func (s PreemptSettings) workerArgs(url string, seed, i int) []string {
	secs := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) + "s" }
	return []string{"worker", "--nats", url, "--run", preemptRunID(seed), "--id", fmt.Sprintf("w%d", i),
		"--slots", strconv.Itoa(s.Slots / s.Workers), "--walltime", secs(s.WalltimeS),
		"--walltime-margin", secs(s.MarginS), "--min-eval-time", secs(s.MinEvalS), "--log-level", "warn"}
}

// runPreempt runs the preempt workload: per seed the run with progress
// checkpoints, then the one without.
func (r *runner) runPreempt(ctx context.Context, row *Row) error {
	s := preemptSettings(r.cfg.Smoke, r.cfg.Seeds)
	fig := &Preempt{Settings: s}
	row.Preempt = fig
	for seed := 1; seed <= s.Seeds; seed++ {
		fmt.Fprintf(r.cfg.Log, "evoq bench: preempt: seed %d of %d\n", seed, s.Seeds)
		ps := &PreemptSeed{Seed: seed}
		for _, mode := range preemptModes {
			run, err := r.preemptRun(ctx, s, seed, mode)
			if err != nil {
				return fmt.Errorf("seed %d, %s run: %w", seed, mode, err)
			}
			ps.Runs = append(ps.Runs, run)
		}
		fig.Seeds = append(fig.Seeds, ps)
	}
	fig.summarize()
	return nil
}

// preemptRun runs seed's run in mode on a broker of its own, then reads
// its results and reports back from the broker's store.
func (r *runner) preemptRun(ctx context.Context, s PreemptSettings, seed int, mode string) (*PreemptRun, error) {
	dir := filepath.Join(r.cfg.Dir, "preempt", fmt.Sprintf("s%d-%s", seed, mode))
	brk, url, err := r.startBrokerProc(dir)
	if err != nil {
		return nil, err
	}
	stopBroker := func() { _ = brk.Process.Signal(syscall.SIGTERM); _ = brk.Wait() }
	began := time.Now()
	out, lives, err := r.preemptProcs(ctx, s, url, seed, mode)
	wall := time.Since(began)
	stopBroker()
	if err != nil {
		return nil, err
	}
	sum, err := parseSummary(out)
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	rec, err := readPreemptRecord(ctx, dir, preemptRunID(seed))
	if err != nil {
		return nil, err
	}
	run := preemptFigures(s, mode, rec, lives, began)
	run.WallS, run.Summary = sig4(wall.Seconds()), sum.Progress
	return run, nil
}

// preemptProcs runs the controller, and the workers until it ends,
// starting each worker again whenever it exits while the controller runs.
// It returns the controller's stdout and each worker process's life.
func (r *runner) preemptProcs(ctx context.Context, s PreemptSettings, url string, seed int, mode string) (string, []workerLife, error) {
	var out, errb bytes.Buffer
	ctl := exec.CommandContext(ctx, r.cfg.Evoq, s.controllerArgs(url, seed, mode)...)
	ctl.Stdout, ctl.Stderr = &out, &errb
	if err := ctl.Start(); err != nil {
		return "", nil, fmt.Errorf("start the controller: %w", err)
	}
	ctlDone := make(chan struct{})
	var ctlErr error
	go func() { ctlErr = ctl.Wait(); close(ctlDone) }()
	rq := &requeuer{evoq: r.cfg.Evoq, stop: ctlDone}
	var wg sync.WaitGroup
	for i := 1; i <= s.Workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); rq.serve(ctx, s.workerArgs(url, seed, i), s.Slots/s.Workers) }()
	}
	wg.Wait()
	<-ctlDone
	if ctlErr != nil {
		return "", nil, fmt.Errorf("controller: %w\n%s", ctlErr, tailText(errb.String(), 2000))
	}
	return out.String(), rq.lives, rq.err
}

// workerLife is one worker process's start: which worker, how many slots
// and from when to when.
type workerLife struct {
	id          string
	slots       int
	start, stop time.Time
}

// requeuer starts worker processes again as a batch system requeues
// their jobs, until stop is closed; it keeps each process's life and the
// first failure.
type requeuer struct {
	evoq string
	stop <-chan struct{}
	mu   sync.Mutex
	// lives are the worker processes' lives, in the order they ended.
	lives []workerLife
	err   error
}

// serve runs the worker of args again and again: a worker that exits 0
// while the run goes on left at its walltime, and its job is requeued; one
// that fails ends serve, with the failure kept. Once stop is closed the
// running worker is stopped, as the run's end stops it anyway.
func (q *requeuer) serve(ctx context.Context, args []string, slots int) {
	for {
		select {
		case <-q.stop:
			return
		default:
		}
		var errb bytes.Buffer
		w := exec.CommandContext(ctx, q.evoq, args...)
		w.Stderr = &errb
		life := workerLife{id: args[slices.Index(args, "--id")+1], slots: slots, start: time.Now()}
		if err := w.Start(); err != nil {
			q.fail(fmt.Errorf("start worker: %w", err))
			return
		}
		done := make(chan error, 1)
		go func() { done <- w.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-q.stop:
			_ = w.Process.Signal(syscall.SIGTERM)
			err = <-done
		}
		life.stop = time.Now()
		q.mu.Lock()
		q.lives = append(q.lives, life)
		q.mu.Unlock()
		if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
			select {
			case <-q.stop: // stopped at the run's end: not a failure
				return
			default:
			}
			q.fail(fmt.Errorf("worker %s: %w\n%s", life.id, err, tailText(errb.String(), 2000)))
			return
		}
		if ctx.Err() != nil {
			q.fail(ctx.Err())
			return
		}
	}
}

func (q *requeuer) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		q.err = err
	}
}

// preemptRecord is what a preempt run stored: its results, with the
// counting rule's verdicts, and its reports.
type preemptRecord struct {
	results  []*schema.Result
	verdicts []runstate.Verdict
	// stored is when each result was stored: a lost design's result has
	// no evaluation times, yet its storing is what ends the budget.
	stored  []time.Time
	reports []*schema.Report
}

// readPreemptRecord reads run's results and reports from the store in
// dir, which no process uses any more.
func readPreemptRecord(ctx context.Context, dir, run string) (*preemptRecord, error) {
	rd, err := history.Open(ctx, history.Source{Dir: dir})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	ri, err := rd.Pick(ctx, run)
	if err != nil {
		return nil, err
	}
	tally := runstate.NewTally(ri.ID, ri.Budget, runstate.RulesOf(ri.Run))
	rec := &preemptRecord{}
	err = rd.Results(ctx, run, func(_ uint64, at time.Time, res *schema.Result, err error) error {
		rec.results, rec.verdicts = append(rec.results, res), append(rec.verdicts, tally.Judge(res, err))
		rec.stored = append(rec.stored, at)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the results of %s: %w", run, err)
	}
	err = broker.ReadReports(ctx, rd.JS(), run, func(_ uint64, _ time.Time, rep *schema.Report, err error) error {
		if err == nil && rep != nil {
			rec.reports = append(rec.reports, rep)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the reports of %s: %w", run, err)
	}
	return rec, nil
}
