package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/internal/cmdbase"
	"github.com/evoq/evoq/internal/dashboard"
	"github.com/evoq/evoq/internal/metrics"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// CredentialMargin is how long, in operator mode inside a batch
// allocation, the credentials of a controller's connect files outlive the
// allocation's end.
const CredentialMargin = 15 * time.Minute

// controllerCmd runs the search controller, with the embedded broker
// unless --nats names an external one.
type controllerCmd struct {
	env           Env
	s             searchFlags
	e             evalFlags
	b             brokerFlags
	l             logFlags
	jsonOut       bool
	waitSlots     int
	connectFile   string
	resume        bool
	runGiven      bool
	fromRun       string
	metricsAddr   string
	dash          cmdbase.DashboardFlags
	replicas      int
	trustPath     string
	credentialTTL time.Duration
	// localWorkers: the command starts the run's workers itself (run), so
	// a new run given no evaluator records the default one.
	localWorkers bool
}

func (c *controllerCmd) register(fs *flag.FlagSet) {
	c.s.register(fs)
	c.e.register(fs)
	c.b.register(fs, true)
	c.b.sec.registerHandOn(fs)
	c.l.register(fs)
	fs.BoolVar(&c.jsonOut, "json", false, "print the run's figures as one JSON object, the last line of stdout")
	fs.IntVar(&c.waitSlots, "wait-slots", 0, "wait until this many worker slots are live before the first design")
	fs.StringVar(&c.metricsAddr, "metrics", "", "serve Prometheus metrics on this address, e.g. :9090")
	c.dash.Register(fs, "")
	fs.StringVar(&c.fromRun, "from-run", "", "seed the initial population with the best designs of this earlier run (same store or broker)")
	fs.BoolVar(&c.resume, "resume", false, "continue a stopped run from its store: --run, or the only unfinished run there")
	fs.StringVar(&c.connectFile, "connect-file", "", "write the broker URLs and run ID here (mode 0600) for 'evoq worker --connect'")
	fs.IntVar(&c.replicas, "replicas", 1, "copies of the streams and buckets on a broker cluster (--nats with every node's URL): 1, 3 or 5, at most the cluster's size")
	fs.DurationVar(&c.credentialTTL, "credential-expiry", 0, "in operator mode (--trust, or an admin's connect file naming a trust root): the worker and reader credentials of --connect-file expire this long after the start (0: at the batch allocation's end plus 15 min, from SLURM_JOB_END_TIME or PBS_WALLTIME, else from squeue, scontrol, qstat or bjobs, else never; revoke them with 'evoq run revoke')")
	fs.StringVar(&c.trustPath, "trust", "", "operator mode: the trust root (evoq broker init; made here if absent) with which the controller makes its run's account and its workers' JWT credentials, on the embedded broker or, with --nats, a broker cluster")
}

// flagSet registers controller's flags.
func (c *controllerCmd) flagSet() *flag.FlagSet {
	fs := newFlagSet("controller", "Runs the search: folds results into the pool and keeps every live worker slot fed.", c.env.Stderr)
	c.register(fs)
	return fs
}

func (c *controllerCmd) Run(ctx context.Context, args []string) error {
	fs := c.flagSet()
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := c.l.logger(c.env.Stderr)
	if err != nil {
		return err
	}
	if err := c.dash.Validate(); err != nil {
		return err
	}
	cfg, err := c.config(ctx, fs, log)
	if err != nil {
		return err
	}
	if c.b.sec.trust != nil && c.resume && !c.runGiven {
		return usageErr("--resume: a broker in operator mode keeps each run apart; name the run with --run")
	}
	c.b.run = cfg.Run
	s, err := open(&c.b, "evoq-controller", log)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.waitConnected(ctx, log); err != nil {
		return err
	}
	// Before anything is read or declared: an account that cannot hold a
	// run is refused at once, not retried.
	if err := checkAccount(ctx, s, log); err != nil {
		return err
	}
	if err := c.prepare(ctx, s, &cfg, log); err != nil {
		return err
	}
	err = runController(ctx, s, cfg, c.env, c.jsonOut, nil)
	if s.embedded != nil && ctx.Err() == nil {
		lingerForWorkers(ctx, s, cfg.Run, log)
	}
	return err
}

// prepare readies a run on the connected broker: the run to resume, its
// settings checked against its record, the seeds of a new run's
// --from-run, the metrics endpoint and the connect file.
func (c *controllerCmd) prepare(ctx context.Context, s *session, cfg *controller.Config, log logrus.FieldLogger) error {
	if err := c.resumeRun(ctx, s, cfg, log); err != nil {
		return err
	}
	if err := c.resolve(ctx, s, cfg, log); err != nil {
		return err
	}
	if err := c.serveMetrics(ctx, cfg, log); err != nil {
		return err
	}
	if err := c.serveDashboard(ctx, s, cfg, log); err != nil {
		return err
	}
	if err := c.writeConnectFile(ctx, s, cfg.Run, log); err != nil {
		return err
	}
	cfg.JoinHint = joinHint(s, cfg.Run, c.connectFile)
	return nil
}

// joinHint is the command that makes a worker join run on the session's
// broker, for the controller's warning about a run without a live slot:
// with the workers' connect file when there is one; else with the
// broker's URLs, and its CA with TLS; a broker with auth takes only a
// worker with a connect file holding the run's credential.
func joinHint(s *session, run, connectFile string) string {
	if connectFile != "" {
		if abs, err := filepath.Abs(connectFile); err == nil {
			connectFile = abs // the worker runs elsewhere, from another directory
		}
		return "evoq worker --run " + run + " --connect " + connectFile
	}
	if s.credential != nil || (s.embedded != nil && s.embedded.AdminCredential() != broker.Credential{}) {
		return "evoq worker --run " + run + " --connect FILE (FILE: the connect file that 'evoq controller --connect-file FILE' writes, with the run's worker credential)"
	}
	hint := "evoq worker --run " + run + " --nats " + broker.RedactURL(strings.Join(s.urls(), ","))
	if ca := s.sec.caForClients(); ca != "" {
		hint += " --tls-ca " + ca
	}
	return hint
}

// resumeRun, with --resume, points cfg at the stored run to continue: the
// one --run names, or the only unfinished one.
func (c *controllerCmd) resumeRun(ctx context.Context, s *session, cfg *controller.Config, log logrus.FieldLogger) error {
	if !c.resume {
		return nil
	}
	runs, err := unfinishedRuns(ctx, s.js)
	if err != nil {
		return usageErr("--resume: nothing to resume in this store: %v", err)
	}
	switch {
	case c.runGiven && !contains(runs, cfg.Run):
		return usageErr("--resume --run %s: no unfinished run %s in this store (unfinished: %v)", cfg.Run, cfg.Run, runs)
	case !c.runGiven && len(runs) != 1:
		return usageErr("--resume: %d unfinished runs in this store %v; name one with --run", len(runs), runs)
	case !c.runGiven:
		cfg.Run = runs[0]
	}
	log.WithField("run", cfg.Run).Info("resuming run")
	return nil
}

// resolve checks the settings against the run's record before anything
// starts, so that a conflicting flag stops the command with exit code 2
// naming it: a run that continues keeps its recorded settings. A new run
// gets the built-in search space unless --config names one, and the seeds
// of --from-run.
func (c *controllerCmd) resolve(ctx context.Context, s *session, cfg *controller.Config, log logrus.FieldLogger) error {
	if c.fromRun != "" && c.fromRun == cfg.Run {
		return usageErr("--from-run %s is the run itself; use --resume to continue it", c.fromRun)
	}
	rec, err := controller.LoadRun(ctx, s.js, cfg.Run, log)
	if err != nil {
		return err
	}
	if err := c.resolveEvaluator(rec, cfg); err != nil {
		return err
	}
	if rec == nil {
		if cfg.Space == nil {
			if cfg.Space, err = defaultSpace(); err != nil {
				return err
			}
		}
		if err := c.seedFrom(ctx, s, cfg, log); err != nil {
			return err
		}
	} else {
		if rec.Phase == schema.PhaseFailed && !c.resume {
			return failedEarlierErr(cfg.Run, rec.Failure)
		}
		cfg.SeedsFrom = c.fromRun
	}
	// The controller resolves the settings again when it starts; here the
	// point is to stop before anything starts.
	if _, _, err := controller.Resolve(ctx, s.js, *cfg); err != nil {
		return configErr(err)
	}
	return nil
}

// resolveEvaluator sets the run's evaluator: the flags given, on top of
// the recorded one (a difference is refused by controller.Continue); else
// the recorded one; else, for a new run whose workers this command starts,
// the default. A controller given none for a run that records none warns
// (controller.Warnings): its workers must each name one.
func (c *controllerCmd) resolveEvaluator(rec *schema.Run, cfg *controller.Config) error {
	var recorded *schema.Evaluator
	if rec != nil {
		recorded = rec.Evaluator
	}
	var err error
	switch {
	case c.e.given() || (rec == nil && c.localWorkers):
		cfg.Evaluator, err = c.e.spec(recorded)
	case recorded != nil:
		cfg.Evaluator = recorded
	case c.localWorkers:
		return usageErr("run %s records no evaluator (it was started before evaluators were recorded, or by a controller given none): give --evaluator or --eval-cmd, with its settings, for the local workers; they are recorded from now on", cfg.Run)
	}
	return err
}

// seedFrom, with --from-run, takes the best --init designs of an earlier
// run as the new run's first designs.
func (c *controllerCmd) seedFrom(ctx context.Context, s *session, cfg *controller.Config, log logrus.FieldLogger) error {
	if c.fromRun == "" {
		return nil
	}
	cfg.SeedsFrom = c.fromRun
	seeds, err := controller.SeedsFrom(ctx, s.js, c.fromRun, cfg.Space, cfg.Init, log)
	switch {
	case errors.Is(err, controller.ErrNoSeeds):
		return usageErr("--from-run %s: the run has no design evaluated ok that fits this search space", c.fromRun)
	case err != nil:
		return fmt.Errorf("--from-run %s: %w", c.fromRun, err)
	}
	cfg.Seeds = append(cfg.Seeds, seeds...)
	return nil
}

// serveDashboard, with --dashboard, serves the run's live page from this
// process: the controller hands it each result it folds, and it reads the
// reports, record, lease and heartbeats through the controller's own
// connection, once for any number of pages.
func (c *controllerCmd) serveDashboard(ctx context.Context, s *session, cfg *controller.Config, log logrus.FieldLogger) error {
	db, err := c.dash.Start(ctx, s.js, cfg.Run, dashboard.Options{Fed: true}, log)
	if err != nil || db == nil {
		return err
	}
	cfg.OnResult = db.Feed
	fmt.Fprintf(c.env.Stderr, "evoq: dashboard of run %s at %s\n", cfg.Run, db.URL())
	return nil
}

// serveMetrics, with --metrics, exposes the run's figures to Prometheus.
func (c *controllerCmd) serveMetrics(ctx context.Context, cfg *controller.Config, log logrus.FieldLogger) error {
	if c.metricsAddr == "" {
		return nil
	}
	m := metrics.NewController(cfg.Run)
	cfg.Metrics = m
	return metrics.Serve(ctx, c.metricsAddr, m.Registry, log)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// writeConnectFile writes --connect-file, if given: the broker URLs, the
// run and, on a broker with auth, a worker credential for the run; beside
// it (run-reader.json) the same with a reader credential, for status,
// export, replay and report.
func (c *controllerCmd) writeConnectFile(ctx context.Context, s *session, run string, log logrus.FieldLogger) error {
	if c.connectFile == "" {
		return nil
	}
	cf, err := s.connectFile(ctx, broker.RoleWorker, run)
	if err != nil {
		return err
	}
	if err := broker.WriteConnectFile(c.connectFile, cf); err != nil {
		return err
	}
	fields := logrus.Fields{"file": c.connectFile, "urls": broker.RedactURL(strings.Join(cf.URLs, ",")), "role": cf.Role}
	if _, ok := cf.Credential(); ok || cf.Role != "" || c.b.sec.readerCreds != "" {
		rf, err := s.connectFile(ctx, broker.RoleReader, run)
		if err != nil {
			return err
		}
		if err := broker.WriteConnectFile(readerFile(c.connectFile), rf); err != nil {
			return err
		}
		fields["reader_file"] = readerFile(c.connectFile)
	}
	log.WithFields(fields).Info("connect file written")
	if s.sec.sharedCredential {
		log.WithField("file", c.connectFile).Warn("the workers' connect file carries the controller's own credential: the workers then hold the same rights as the controller; give --worker-creds FILE (and --reader-creds FILE) with the site's credentials for them")
	}
	return nil
}

func (c *controllerCmd) config(ctx context.Context, fs *flag.FlagSet, log logrus.FieldLogger) (controller.Config, error) {
	// Before anything connects, or makes a trust root.
	if err := checkRunID("run", c.s.run); err != nil {
		return controller.Config{}, err
	}
	if err := c.e.validate(); err != nil {
		return controller.Config{}, err
	}
	if err := checkRunID("from-run", c.fromRun); err != nil {
		return controller.Config{}, err
	}
	if err := c.b.validate(); err != nil {
		return controller.Config{}, err
	}
	if c.trustPath == "" && c.b.nats == "" && c.b.sec.connect == "" && fileExists(broker.StoreTrustFile(c.b.dir)) {
		// A store made in operator mode goes on in it.
		c.trustPath = broker.StoreTrustFile(c.b.dir)
	}
	switch {
	case c.trustPath != "" && c.b.sec.connect != "":
		return controller.Config{}, usageErr("--trust and --connect: an admin's connect file names its trust root itself")
	case c.trustPath != "" && c.b.nats != "":
		// A broker cluster in operator mode.
		trust, err := broker.LoadTrust(c.trustPath)
		if err != nil {
			return controller.Config{}, usageErr("--trust: %v", err)
		}
		c.b.sec.trust = trust
	case c.trustPath != "":
		// The embedded broker, in operator mode.
		_, trust, err := serveTrust(&c.b, c.trustPath, log)
		if err != nil {
			return controller.Config{}, err
		}
		c.b.sec.trust = trust
	}
	if c.credentialTTL < 0 || (c.credentialTTL > 0 && c.b.sec.trust == nil) {
		return controller.Config{}, usageErr("--credential-expiry %s: needs a broker in operator mode (--trust, or an admin's connect file naming a trust root), and a duration > 0", c.credentialTTL)
	}
	if c.credentialTTL > 0 {
		c.b.sec.expires = time.Now().Add(c.credentialTTL)
	}
	if c.credentialTTL == 0 && c.b.sec.trust != nil {
		c.b.sec.expires = allocationExpiry(ctx, log)
	}
	if c.waitSlots < 0 {
		return controller.Config{}, usageErr("--wait-slots %d: must be >= 0", c.waitSlots)
	}
	if err := c.checkReplicas(); err != nil {
		return controller.Config{}, err
	}
	c.runGiven = c.s.run != ""
	if !c.runGiven {
		c.s.run = defaultRunID() // replaced by the stored run's ID with --resume
	}
	cfg, err := c.s.config(fs, log)
	cfg.WaitSlots = c.waitSlots
	cfg.Replicas = c.replicas
	return cfg, err
}

// allocationExpiry is when the worker and reader credentials of a batch
// job's run expire: inside an allocation they need not outlive it. The end
// is found as the workers find their walltime, so the two agree; the zero
// time (never) outside an allocation, or when the batch system did not say.
func allocationExpiry(ctx context.Context, log logrus.FieldLogger) time.Time {
	end, src, err := worker.BatchDeadline(ctx, os.Getenv, time.Now())
	if err != nil {
		log.WithError(err).Warn("the worker and reader credentials do not expire; give --credential-expiry (a little over the job's time limit)")
		return time.Time{}
	}
	if end.IsZero() {
		return time.Time{}
	}
	expires := end.Add(CredentialMargin)
	log.WithFields(logrus.Fields{"expires": expires.Format(time.RFC3339), "from": src, "margin": CredentialMargin}).
		Info("worker and reader credentials expire with the allocation")
	return expires
}

// LingerForWorkers bounds how long a controller with the embedded broker
// keeps it up once its run is done or failed, for the run's workers to
// learn it and leave: a worker cut off from its broker before it heard
// would wait for it to come back.
const LingerForWorkers = 10 * time.Second

// lingerForWorkers waits until no worker of run has a heartbeat in the
// presence bucket (each deletes its own as it leaves), or LingerForWorkers.
func lingerForWorkers(ctx context.Context, s *session, run string, log logrus.FieldLogger) {
	ctx, cancel := context.WithTimeout(ctx, LingerForWorkers)
	defer cancel()
	kv, err := s.js.KeyValue(ctx, schema.PresenceBucket)
	if err != nil {
		return
	}
	for {
		n, err := liveWorkers(ctx, kv, run)
		if err == nil && n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			if n > 0 {
				log.WithField("workers", n).Warn("stopping the embedded broker with workers of the run still present; they leave by themselves once they see the run ended, or when their --wait-for-run ends")
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// liveWorkers counts run's workers whose heartbeat is current.
func liveWorkers(ctx context.Context, kv jetstream.KeyValue, run string) (int, error) {
	keys, err := kv.ListKeysFiltered(ctx, schema.PresenceKey(run, "*"))
	if err != nil {
		return 0, err
	}
	n := 0
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // gone meanwhile
		}
		if p, err := schema.DecodePresence(e.Value()); err == nil && runstate.Alive(*p, e.Created(), time.Now()) {
			n++
		}
	}
	return n, nil
}

// runController runs the search and prints its summary; finish, when not
// nil, is called first (to end a live progress line).
func runController(ctx context.Context, s *session, cfg controller.Config, env Env, jsonOut bool, finish func()) error {
	ctl, err := controller.New(s.js, cfg)
	if err != nil {
		return configErr(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.storeFailed:
			cancel()
		case <-ctx.Done():
		}
	}()
	sum, err := ctl.Run(ctx)
	if finish != nil {
		finish()
	}
	select {
	case <-s.storeFailed:
		return fmt.Errorf("%w: the embedded broker cannot write its store: %s", controller.ErrStoreFull, s.storeErr)
	default:
	}
	if err != nil && ctx.Err() != nil && sum == nil {
		s := ctl.Summary()
		return fmt.Errorf("interrupted after %d of %d evaluations; the run is kept: start the controller again with --run %s on the same store to continue it",
			s.Evaluations, ctl.Config().Budget, cfg.Run)
	}
	if err != nil {
		return failedErr(configErr(err))
	}
	return printSummary(env.Stdout, sum, jsonOut)
}

// checkAccount checks that the broker's account can hold a run, retrying
// what waiting mends (a cluster electing its JetStream leader) for up to
// controller.StartRetry, and refusing at once what it does not.
func checkAccount(ctx context.Context, s *session, log logrus.FieldLogger) error {
	b := broker.Backoff{Limit: controller.StartRetry, OnRetry: func(err error, wait time.Duration) {
		log.WithError(err).WithField("retry_in", wait).Warn("checking the broker's account failed; retrying")
	}}
	err := broker.Retry(ctx, b, func() error { return broker.CheckAccount(ctx, s.js) })
	var re *broker.RetryError
	if errors.As(err, &re) {
		return fmt.Errorf("check the broker's account: %w", re.Last)
	}
	return err
}
