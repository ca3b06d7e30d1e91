package cli

import (
	"context"
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
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/nb201"
	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
	"github.com/sirupsen/logrus"
)

// runCmd runs a whole search in one process tree: the embedded broker and
// the controller in this process, --workers local worker processes sharing
// --slots slots.
type runCmd struct {
	controllerCmd
	w       workerFlags
	workers int
	live    bool // stderr is a terminal: draw a live progress line
	// drainTimeout is the local workers' --drain-timeout.
	drainTimeout time.Duration
}

// WorkerExitTimeout is how long run waits for its workers to leave after
// the run is done before it stops them.
const WorkerExitTimeout = 10 * time.Second

func (c *runCmd) Run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "delete" {
		return (&runDeleteCmd{env: c.env}).Run(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "extend" {
		return (&runExtendCmd{env: c.env}).Run(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "revoke" {
		return (&runRevokeCmd{env: c.env}).Run(ctx, args[1:])
	}
	fs := c.flagSet()
	if err := parse(fs, args); err != nil {
		return err
	}
	// On a terminal a live line shows progress and the log keeps to
	// warnings, unless --log-level says otherwise; elsewhere, plain lines.
	c.live = isTerminal(c.env.Stderr)
	if c.live && !isSet(fs, "log-level") {
		c.l.level = "warn"
	}
	log, err := c.l.logger(c.env.Stderr)
	if err != nil {
		return err
	}
	if err := c.validate(ctx, fs, log); err != nil {
		return err
	}
	cfg, err := c.config(ctx, fs, log)
	if err != nil {
		return err
	}
	if err := c.problemDefaults(fs, &cfg); err != nil {
		return err
	}
	if c.b.sec.trust != nil && c.resume && !c.runGiven {
		return usageErr("--resume: a broker in operator mode keeps each run apart; name the run with --run")
	}
	c.b.run = cfg.Run
	return c.runAll(ctx, cfg, log)
}

// flagSet registers run's flags.
func (c *runCmd) flagSet() *flag.FlagSet {
	fs := newFlagSet("run", "Runs a whole search: embedded broker, controller and --workers local worker processes sharing --slots.", c.env.Stderr)
	c.register(fs)
	c.localWorkers = true
	c.w.register(fs, runtime.NumCPU(), "none")
	fs.IntVar(&c.workers, "workers", 1, "local worker processes; the slots are shared out among them")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", DrainTimeoutDefault, "on an interrupt, time the local workers' running evaluations get to finish before their designs are handed back")
	return fs
}

// problemDefaults gives a run of a built-in test problem (zdt1, zdt2) its
// search space, objectives and reference point, and a run of the nb201
// lookup its search space, where the flags do not.
func (c *runCmd) problemDefaults(fs *flag.FlagSet, cfg *controller.Config) error {
	if c.e.evalCmd == "" && c.e.evaluator == schema.EvaluatorNB201 && cfg.Space == nil {
		sp, err := nb201.Space()
		if err != nil {
			return err
		}
		cfg.Space = sp
	}
	if c.e.evalCmd != "" || !evaluators.IsZDT(c.e.evaluator) {
		return nil
	}
	if cfg.Space == nil {
		sp, err := evaluators.ZDTSpace(c.e.evaluator)
		if err != nil {
			return err
		}
		cfg.Space = sp
	}
	if !isSet(fs, "objectives") {
		objs, err := pareto.ParseObjectives(evaluators.ZDTObjectives)
		if err != nil {
			return err
		}
		cfg.Objectives.Objs = objs
	}
	if !isSet(fs, "hv-ref") {
		cfg.HVRef = []float64{evaluators.ZDTRef, evaluators.ZDTRef}
	}
	return configErr(cfg.ValidateGiven())
}

func (c *runCmd) validate(ctx context.Context, fs *flag.FlagSet, log logrus.FieldLogger) error {
	if err := c.dash.Validate(); err != nil {
		return err
	}
	if err := c.w.validate(fs); err != nil {
		return err
	}
	if err := c.e.validate(); err != nil {
		return err
	}
	if !isSet(fs, "eval-logs") {
		c.w.evalLogs = filepath.Join(c.b.dir, "eval-logs")
	}
	if c.workers < 1 {
		return usageErr("--workers %d: need at least 1", c.workers)
	}
	if err := c.w.resolveGPUs(ctx, log); err != nil {
		return err
	}
	if n := len(c.w.gpuIDs); n > 0 && c.workers > n {
		return usageErr("--workers %d is more than the %d GPUs: every local worker needs a GPU", c.workers, n)
	}
	if c.workers > c.w.slots {
		return usageErr("--workers %d is more than --slots %d: every worker needs a slot", c.workers, c.w.slots)
	}
	if c.s.expectSlots == 0 {
		c.s.expectSlots = c.w.slots
	}
	if c.waitSlots == 0 {
		c.waitSlots = c.w.slots
	}
	return nil
}

func (c *runCmd) runAll(ctx context.Context, cfg controller.Config, log *logrus.Logger) error {
	s, err := open(&c.b, "evoq-run", log)
	if err != nil {
		return err
	}
	defer s.close()
	if err := c.prepare(ctx, s, &cfg, log); err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"workers": c.workers, "slots": c.w.slots, "evaluator": cfg.Evaluator.String()}).Info("starting local workers")
	connect, err := c.localConnectFile(ctx, s, cfg.Run)
	if err != nil {
		return err
	}
	if c.connectFile == "" {
		cfg.JoinHint = joinHint(s, cfg.Run, connect)
	}
	procs, err := c.startWorkers(connect, cfg.Run, log)
	defer func() { procs.stop(log, ctx.Err() != nil, c.env.Force) }()
	if err != nil {
		return err
	}
	// The controller outlives an interrupt until the local workers have
	// drained: it takes the results of the evaluations they finish and
	// commits the progress their evaluators save before the hand-back,
	// which a worker cannot store without it. A second signal (force)
	// stops it at once.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-procs.done: // every local worker left (walltime, crash): nothing would evaluate
			if ctx.Err() == nil {
				log.Error("every local worker has exited; stopping the controller")
			}
			cancel()
			return
		case <-ctx.Done():
		case <-cctx.Done():
			return
		}
		// Interrupted: the run is not done, so the workers would wait for
		// it; they drain. This is their one signal for an interrupt, since
		// they sit in process groups of their own, out of reach of the
		// terminal's Ctrl-C.
		procs.signal(syscall.SIGTERM)
		select {
		case <-procs.done:
		case <-forceDone(c.env.Force):
		case <-cctx.Done():
		}
		cancel()
	}()
	var finish func()
	if c.live {
		l := &liveLine{w: c.env.Stderr}
		cfg.OnProgress, finish = l.show, l.done
	}
	err = runController(cctx, s, cfg, c.env, c.jsonOut, finish)
	if err != nil {
		// The run is not done, so the workers would wait for it: they
		// drain.
		procs.signal(syscall.SIGTERM)
	}
	return err
}

// forceDone is force's Done channel; nil (never ready) without one.
func forceDone(force context.Context) <-chan struct{} {
	if force == nil {
		return nil
	}
	return force.Done()
}

// workerSlots are the slot and GPU flags of local worker i: the GPUs are
// dealt out among the workers, and the slots follow them unless --slots
// was given.
func (c *runCmd) workerSlots(i int) []string {
	sh := worker.ShareOut(c.w.gpuIDs, c.w.slots, c.w.slotsPerGPU, c.w.slotsSet, c.workers)[i]
	if len(c.w.gpuIDs) == 0 {
		return []string{"--gpus", "none", "--slots", strconv.Itoa(sh.Slots)}
	}
	return []string{"--gpus", strings.Join(sh.GPUs, ","), "--slots-per-gpu", strconv.Itoa(c.w.slotsPerGPU),
		"--slots", strconv.Itoa(sh.Slots)}
}

// workerProcs are run's child worker processes.
type workerProcs struct {
	mu     sync.Mutex
	cmds   []*exec.Cmd
	exited map[*exec.Cmd]bool // reaped: not to be signalled (the pid may be reused)
	wg     sync.WaitGroup
	done   chan struct{}
}

// localConnectFile writes the connect file of the local workers into the
// store directory (mode 0600): the broker's URL and, with auth, their
// credential.
func (c *runCmd) localConnectFile(ctx context.Context, s *session, run string) (string, error) {
	cf, err := s.connectFile(ctx, broker.RoleWorker, run)
	if err != nil {
		return "", err
	}
	cf.URLs = []string{s.url}
	dir := c.b.dir
	if s.embedded != nil {
		dir = s.embedded.Dir()
	}
	path := filepath.Join(dir, "workers-"+run+".json")
	return path, broker.WriteConnectFile(path, cf)
}

func (c *runCmd) startWorkers(connect, run string, log logrus.FieldLogger) (*workerProcs, error) {
	exe, err := os.Executable()
	if err != nil {
		return &workerProcs{}, fmt.Errorf("find the evoq binary for the workers: %w", err)
	}
	p := &workerProcs{done: make(chan struct{}), exited: map[*exec.Cmd]bool{}}
	// done closes once every started worker is reaped, on the error path too.
	defer func() { go func() { p.wg.Wait(); close(p.done) }() }()
	for i := range c.workers {
		args := append([]string{"worker", "--connect", connect, "--run", run, "--id", "w" + strconv.Itoa(i+1)},
			c.workerSlots(i)...)
		// No evaluator flags: the workers take the run's recorded
		// evaluator, as any worker that joins the run does.
		args = append(args, c.w.args()...)
		args = append(args, "--drain-timeout", c.drainTimeout.String())
		cmd := exec.Command(exe, append(args, c.l.args()...)...)
		cmd.Stdout, cmd.Stderr = c.env.Stderr, c.env.Stderr
		// A process group of its own: a Ctrl-C on the terminal reaches
		// run alone, which passes one signal on per interrupt. Were the
		// workers in the terminal's group, one Ctrl-C would reach them
		// twice (from the terminal and from run) and stop them at once
		// instead of letting them drain.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			return p, fmt.Errorf("start worker %d: %w", i+1, err)
		}
		p.mu.Lock()
		p.cmds = append(p.cmds, cmd)
		p.mu.Unlock()
		p.wg.Add(1)
		go p.watch(cmd, log)
	}
	return p, nil
}

// watch reaps one worker and says loudly if it died.
func (p *workerProcs) watch(cmd *exec.Cmd, log logrus.FieldLogger) {
	defer p.wg.Done()
	err := cmd.Wait()
	p.mu.Lock()
	p.exited[cmd] = true
	p.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == ExitRunFailed:
		// The controller failed the run and says why; the worker only
		// followed it out.
		log.WithField("pid", cmd.Process.Pid).Info("a local worker left the failed run")
	case err != nil:
		log.WithError(err).WithField("pid", cmd.Process.Pid).Error("a local worker process exited abnormally; its designs are redelivered to the other slots")
	}
}

// stop waits for the workers to leave. After an interrupt they drain
// (the SIGTERM they got when the controller stopped) for as long as they
// need, unless force ends first (a second interrupt): then each gets a
// second SIGTERM, which makes it hand its designs back and leave at once.
// Otherwise (the run is done) they leave by themselves, or are asked to
// drain, then killed. Either way they leave before the embedded broker
// stops, so what they hand back reaches it.
func (p *workerProcs) stop(log logrus.FieldLogger, interrupted bool, force context.Context) {
	if p.done == nil {
		return
	}
	if interrupted && force != nil {
		select {
		case <-p.done:
			return
		case <-force.Done():
		}
		p.signal(syscall.SIGTERM)
		if p.waitFor(ForceGrace / 2) {
			return
		}
		log.Warn("local workers did not stop in time; killing them")
		p.signal(syscall.SIGKILL)
		<-p.done
		return
	}
	if p.waitFor(WorkerExitTimeout) {
		return
	}
	log.Warn("local workers still running; stopping them")
	p.signal(syscall.SIGTERM)
	if p.waitFor(WorkerExitTimeout) {
		return
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

func (p *workerProcs) waitFor(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

func (p *workerProcs) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cmds {
		if !p.exited[c] {
			_ = c.Process.Signal(sig)
		}
	}
}
