package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/metrics"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// workerCmd runs one worker process.
type workerCmd struct {
	env          Env
	w            workerFlags
	l            logFlags
	nats, run    string
	host         string
	connect      string
	sec          securityFlags
	metricsAddr  string
	drainTimeout time.Duration
	waitForRun   time.Duration
	log          logrus.FieldLogger
}

// DrainTimeoutDefault is how long a stopping worker lets running
// evaluations finish before handing them back.
const DrainTimeoutDefault = 5 * time.Minute

// WorkerNatsDefault is the broker a worker connects to without --nats,
// --connect or $NATS_URL.
const WorkerNatsDefault = "nats://127.0.0.1:4222"

// flagSet registers worker's flags.
func (c *workerCmd) flagSet() *flag.FlagSet {
	fs := newFlagSet("worker", "Serves a run's designs with --slots evaluation slots, pulling one design per free slot.", c.env.Stderr)
	c.w.register(fs, 1, "auto")
	c.w.ev.register(fs)
	c.l.register(fs)
	c.sec.register(fs, false, false)
	c.sec.registerCreds(fs)
	fs.StringVar(&c.nats, "nats", "", "URL of the broker, a comma-separated list for a cluster (default: $NATS_URL, else nats://127.0.0.1:4222)")
	fs.StringVar(&c.metricsAddr, "metrics", "", "serve Prometheus metrics on this address, e.g. :9091")
	fs.StringVar(&c.connect, "connect", "", "connect file written by 'evoq controller --connect-file': broker URLs and run ID (a worker started first waits for it, as for its run; --wait-for-run bounds the wait)")
	fs.StringVar(&c.run, "run", "", "run ID (default: the only run in progress on the broker)")
	fs.StringVar(&c.w.id, "id", "", "worker ID (default: <host>-<pid>)")
	fs.StringVar(&c.host, "host", "", "host name recorded in results and heartbeats, by which failures are charged to a node (default: the machine's host name; set it where nodes share one, as containers may)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", DrainTimeoutDefault, "on SIGTERM (or a batch system's SIGUSR1 warning), time running evaluations get to finish before their designs are handed back")
	fs.DurationVar(&c.waitForRun, "wait-for-run", 0, "give up, exit 1, when the run has not started on the broker after this long (0: wait for ever)")
	return fs
}

func (c *workerCmd) Run(ctx context.Context, args []string) error {
	fs := c.flagSet()
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkRunID("run", c.run); err != nil {
		return err
	}
	if c.waitForRun < 0 {
		return usageErr("--wait-for-run %s: must be >= 0 (0 waits for ever)", c.waitForRun)
	}
	if err := c.w.validate(fs); err != nil {
		return err
	}
	if err := c.w.ev.validate(); err != nil {
		return err
	}
	log, err := c.l.logger(c.env.Stderr)
	if err != nil {
		return err
	}
	if err := c.waitConnectFile(ctx, log); err != nil {
		return err
	}
	if err := c.readConnect(fs); err != nil {
		return err
	}
	if err := c.w.resolveGPUs(ctx, log); err != nil {
		return err
	}
	if err := c.w.resolveDeadline(ctx, log); err != nil {
		return err
	}
	return c.serve(ctx, log)
}

func (c *workerCmd) serve(ctx context.Context, log *logrus.Logger) error {
	s, err := open(&brokerFlags{nats: c.nats, sec: c.sec}, "evoq-worker", log)
	if err != nil {
		return err
	}
	defer s.close()
	// --wait-for-run bounds the whole wait, for the broker, for a run to
	// pick and for the run to start: a batch job gives up on one
	// deadline.
	var giveUp time.Time
	if c.waitForRun > 0 {
		giveUp = time.Now().Add(c.waitForRun)
	}
	if err := c.waitBroker(ctx, s, log, giveUp); err != nil {
		return err
	}
	c.log = log
	run, err := c.pickRun(ctx, s.js, giveUp)
	if err != nil {
		return err
	}
	c.run = run
	hard, cancel := context.WithCancel(context.Background())
	defer cancel()
	var w *worker.Worker
	cfg := worker.Config{Run: run, ID: c.w.id, Host: c.host, Slots: c.w.slots, Choose: c.chooseEvaluator,
		SlotGPUs: c.w.slotGPUs(), SlotGPUUUIDs: c.w.slotGPUUUIDs(ctx, log), Deadline: c.w.deadline,
		WalltimeMargin: c.w.walltimeMargin, MinEvalTime: c.w.minEval, Logger: log,
		RunsUnlisted: c.runsUnlisted(), CheckpointDir: c.w.checkpointMount}
	if !giveUp.IsZero() {
		// Never 0, which would wait for ever.
		cfg.JoinTimeout = max(time.Until(giveUp), time.Millisecond)
	}
	var m *metrics.Worker // set before the worker starts, read by its slots
	if c.metricsAddr != "" {
		cfg.OnStored = func(r *schema.Result) { m.Stored(r) }
	}
	w, err = worker.New(s.js, cfg)
	if err != nil {
		return workerErr(err)
	}
	if c.metricsAddr != "" {
		m = metrics.NewWorker(run, w.ID(), c.w.slots, w.Busy)
		if err := metrics.Serve(ctx, c.metricsAddr, m.Registry, log); err != nil {
			return err
		}
	}
	if err := c.start(ctx, hard, cancel, w); err != nil {
		if errors.Is(err, worker.ErrNoRun) {
			return fmt.Errorf("--wait-for-run %s: %w", c.waitForRun, err)
		}
		return workerErr(err)
	}
	return c.wait(ctx, w, log)
}

// chooseEvaluator is the evaluator the worker runs: the run's recorded
// one, with the evaluator flags given on top, each a difference that the
// worker's log and status show. A run that records none needs the flags.
func (c *workerCmd) chooseEvaluator(rec *schema.Run) (worker.Chosen, error) {
	var recorded *schema.Evaluator
	if rec != nil {
		recorded = rec.Evaluator
	}
	if recorded == nil && !c.w.ev.given() {
		return worker.Chosen{}, usageErr("run %s records no evaluator (its controller was given none, or it was started before evaluators were recorded): give --evaluator or --eval-cmd", c.run)
	}
	spec, err := c.w.ev.spec(recorded)
	if err != nil {
		return worker.Chosen{}, err
	}
	ev, err := buildEvaluator(spec, c.w.evalLogs)
	if err != nil {
		return worker.Chosen{}, err
	}
	ch := worker.Chosen{Evaluator: ev, Timeout: spec.Timeout}
	if recorded != nil {
		ch.Differs = recorded.Diff(spec)
	}
	return ch, nil
}

// waitBroker waits for the first connection to the broker, until giveUp
// if set: an unreachable broker ends a worker with --wait-for-run too.
func (c *workerCmd) waitBroker(ctx context.Context, s *session, log logrus.FieldLogger, giveUp time.Time) error {
	if giveUp.IsZero() {
		return s.waitConnected(ctx, log)
	}
	wctx, cancel := context.WithDeadline(ctx, giveUp)
	defer cancel()
	err := s.waitConnected(wctx, log)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return fmt.Errorf("--wait-for-run %s: the broker %s was not reachable within it", c.waitForRun, broker.RedactURL(s.url))
	}
	return err
}

// readConnect takes the broker URLs, the run and the credential from
// --connect, and the TLS flags.
func (c *workerCmd) readConnect(fs *flag.FlagSet) error {
	if c.connect != "" && isSet(fs, "nats") {
		return usageErr("--connect and --nats: give one or the other")
	}
	c.sec.connect = c.connect
	if c.nats == "" {
		if c.nats = os.Getenv("NATS_URL"); c.nats == "" {
			c.nats = WorkerNatsDefault
		}
	}
	urls, run, err := c.sec.client()
	if err != nil {
		return err
	}
	if urls != "" {
		c.nats = urls
	}
	if c.run == "" {
		c.run = run
	}
	// A run's credential serves that run alone: with another --run the
	// worker would wait for ever on requests the broker refuses.
	if cr := c.sec.credential; cr != nil && cr.Role != broker.RoleAdmin && cr.Role != broker.RoleSite && c.run != "" && c.run != cr.Run {
		return usageErr("--run %s: the %s credential in --connect %s serves run %s only", c.run, cr.Role, c.connect, cr.Run)
	}
	return nil
}

// runsUnlisted reports whether the worker's credential may not list the
// runs on the broker: one of a run's credentials, not an admin's.
func (c *workerCmd) runsUnlisted() bool {
	return c.sec.credential != nil && c.sec.credential.Role != broker.RoleAdmin
}

// start joins the run; the signal context aborts the wait for it.
func (c *workerCmd) start(ctx, hard context.Context, cancelHard context.CancelFunc, w *worker.Worker) error {
	errc := make(chan error, 1)
	go func() { errc <- w.Start(hard) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cancelHard() // a join that wins the race hands back what it pulled
	if err := <-errc; err == nil {
		<-w.Done()
	}
	return errors.New("stopped before the run started")
}

// wait returns when the worker is done: the run finished or failed, or a
// signal asked for a drain. A worker that left a failed run ends with
// worker.ErrRunFailed, exit code ExitRunFailed.
func (c *workerCmd) wait(ctx context.Context, w *worker.Worker, log logrus.FieldLogger) error {
	select {
	case <-w.Done():
		return w.Err() // the run is done or failed, or every slot is quarantined
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(c.env.Force, c.drainTimeout)
	defer cancel()
	if err := w.Stop(dctx); err != nil {
		log.WithError(err).Warn("drain ended early; unfinished designs were handed back")
	}
	return w.Err()
}

// pickRun is --run, or the only run in progress on the broker; it waits
// for a run to start, since workers may start before the controller, until
// giveUp unless that is zero.
func (c *workerCmd) pickRun(ctx context.Context, js jetstream.JetStream, giveUp time.Time) (string, error) {
	if c.run != "" {
		// --run was checked at the start; this one may come from --connect.
		return c.run, checkRunID("run", c.run)
	}
	began := time.Now()
	warnings := worker.NewWaitWarnings(began)
	for first := true; ; first = false {
		runs, err := activeRuns(ctx, js)
		switch {
		case len(runs) == 1:
			return runs[0], nil
		case len(runs) > 1:
			return "", usageErr("--run not given and %d runs are in progress on the broker %v: name one", len(runs), runs)
		case !giveUp.IsZero() && time.Now().After(giveUp):
			return "", fmt.Errorf("--wait-for-run %s: no run in progress on the broker after %s", c.waitForRun, c.waitForRun)
		case first:
			c.log.Info("no run in progress on the broker yet; waiting for one (or give --run)")
		case err != nil && warnings.Due(time.Now()):
			c.log.WithError(err).Warn("cannot list the runs on the broker; retrying (or give --run)")
		case err == nil && warnings.Due(time.Now()):
			c.log.WithField("waited", time.Since(began).Round(time.Second)).Warn("no run in progress on the broker yet; waiting for one (or give --run)")
		}
		select {
		case <-ctx.Done():
			return "", errors.New("stopped while waiting for a run")
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// activeRuns lists the runs a worker can join: neither done nor failed.
func activeRuns(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return broker.RunsInProgress(ctx, js)
}

// unfinishedRuns lists the runs a controller can continue: not done.
func unfinishedRuns(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return broker.RunsUnfinished(ctx, js)
}

// waitConnectFile waits for --connect's file, which its controller may
// not have written yet when a batch job or a container starts the worker
// first, as a worker waits for its run: for ever, or --wait-for-run.
func (c *workerCmd) waitConnectFile(ctx context.Context, log logrus.FieldLogger) error {
	if c.connect == "" {
		return nil
	}
	began, said := time.Now(), time.Time{}
	for {
		if _, err := os.Stat(c.connect); !errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if c.waitForRun > 0 && time.Since(began) > c.waitForRun {
			return fmt.Errorf("--wait-for-run %s: no connect file %s after %s", c.waitForRun, c.connect, c.waitForRun)
		}
		if time.Since(said) > 30*time.Second {
			log.WithField("connect", c.connect).Info("waiting for the connect file: its controller writes it when the run starts")
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
