package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/internal/mlp"
	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/evoq/evoq/worker"
	"github.com/sirupsen/logrus"
)

// logFlags configure logging.
type logFlags struct {
	format, level string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*logrus.Logger, error) {
	log := logrus.New()
	log.SetOutput(w)
	lvl, err := logrus.ParseLevel(l.level)
	if err != nil {
		return nil, usageErr("--log-level %q: want debug, info, warn or error", l.level)
	}
	log.SetLevel(lvl)
	switch l.format {
	case "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "15:04:05.000",
			DisableColors: !isTerminal(w)})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	default:
		return nil, usageErr("--log-format %q: want text or json", l.format)
	}
	return log, nil
}

func (l *logFlags) args() []string {
	return []string{"--log-format", l.format, "--log-level", l.level}
}

// brokerFlags choose the embedded broker or an external one.
type brokerFlags struct {
	dir, listen, nats string
	sync, maxStore    string
	cfg               broker.Config // parsed by validate
	sec               securityFlags
	// run is the run a controller serves: in operator mode its
	// connection is a user of the run's account.
	run string
}

func (b *brokerFlags) register(fs *flag.FlagSet, withNats bool) {
	fs.StringVar(&b.dir, "dir", broker.DirDefault, "JetStream store directory of the embedded broker")
	fs.StringVar(&b.listen, "listen", broker.ListenDefault, "host:port the embedded broker listens on (port 0: any free port)")
	fs.StringVar(&b.sync, "sync", "2m", "store fsync: always (every write survives a machine crash; slower), or an interval (a process crash loses nothing, a machine crash up to the interval)")
	fs.StringVar(&b.maxStore, "max-store", "", "cap on the embedded broker's store, e.g. 500MB or 20GB (default: the disk's free space)")
	if withNats {
		fs.StringVar(&b.nats, "nats", "", "URL of an external NATS server with JetStream (instead of the embedded broker)")
	}
	b.sec.register(fs, true, withNats)
}

func (b *brokerFlags) validate() error {
	if b.nats == "" && b.sec.connect == "" && (b.sec.creds != "" || b.sec.nkey != "") {
		// A credential of a site's NATS: the broker is that one.
		if b.nats = os.Getenv("NATS_URL"); b.nats == "" {
			return usageErr("--creds or --nkey: give the URL of the broker they are for with --nats (or $NATS_URL)")
		}
	}
	if b.nats != "" || b.sec.connect != "" {
		if b.nats != "" && b.sec.connect != "" {
			return usageErr("--nats and --connect: give one or the other")
		}
		urls, _, err := b.sec.client()
		if urls != "" {
			b.nats = urls
		}
		return err
	}
	if b.dir == "" {
		return usageErr("--dir: empty store directory")
	}
	host, _, err := broker.SplitListen(b.listen)
	if err != nil {
		return usageErr("%v", err)
	}
	b.cfg = broker.Config{Dir: b.dir, Listen: b.listen}
	if err := b.sec.server(host, &b.cfg); err != nil {
		return err
	}
	if err := parseSync(b.sync, &b.cfg); err != nil {
		return err
	}
	if b.maxStore != "" {
		n, err := parseBytes(b.maxStore)
		if err != nil || n < 1<<20 {
			return usageErr("--max-store %q: want a size of at least 1MB, e.g. 500MB or 20GB", b.maxStore)
		}
		b.cfg.MaxStore = n
	}
	return nil
}

func parseSync(s string, cfg *broker.Config) error {
	if s == "always" {
		cfg.SyncAlways = true
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return usageErr("--sync %q: want always or an interval such as 2m or 1s", s)
	}
	cfg.SyncInterval = d
	return nil
}

// parseBytes reads a size such as 64MB or 2GiB (powers of 1024 either way).
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10},
		{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}}
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, x := range units {
		if strings.HasSuffix(u, x.suffix) {
			u, mult = strings.TrimSpace(strings.TrimSuffix(u, x.suffix)), x.mult
			break
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q", s)
	}
	return n * mult, nil
}

// searchFlags configure the controller.
type searchFlags struct {
	spacePath, run, replace         string
	budget, init, pool, tournament  int
	margin, expectSlots, maxDeliver int
	errorRetries, quarantineAfter   int
	failFast                        int
	seed                            uint64
	earlyStop, maxStepGene          string
	rungSelect                      string
	minStep, maxStep                int64
	eta                             int
	brackets                        int
	ackWait, progress, idleAlarm    time.Duration
	inherit                         bool
	checkpointDir, maxCheckpoint    string
	keepCheckpoints                 string
	objectives, hvRef               string
	constraints                     repeated
	crossover, mutationRate         float64
	costTie                         float64
	novel                           bool
	target                          float64
	plateau                         int
	timeBudget                      time.Duration
}

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

func (s *searchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.spacePath, "config", "", "search space YAML file (default: the built-in mlp space)")
	fs.StringVar(&s.run, "run", "", "run ID (default: run-<date>-<time>)")
	fs.IntVar(&s.budget, "budget", controller.BudgetDefault, "designs to evaluate; the run ends when each has a terminal result")
	fs.IntVar(&s.init, "init", controller.InitDefault, "random designs evaluated before mutants are made")
	fs.IntVar(&s.pool, "pool", controller.PoolDefault, "pool size (at most --init)")
	fs.StringVar(&s.replace, "replace", string(controller.ReplaceDefault), "pool replacement: worst, or oldest (regularized evolution)")
	fs.IntVar(&s.tournament, "tournament", controller.TournamentDefault, "tournament size for parent selection (at most --pool)")
	fs.Uint64Var(&s.seed, "seed", 1, "random seed")
	fs.IntVar(&s.margin, "margin", 0, "designs queued beyond the live slots (0: 5% of the live slots, at least 2)")
	fs.IntVar(&s.expectSlots, "expect-slots", 0, "slots the consumer limits are sized for (0: --slots for run, else 1; never below 4096 waiting pulls)")
	fs.IntVar(&s.maxDeliver, "max-deliver", broker.MaxDeliverDefault, "deliveries of a design before it is recorded as lost")
	fs.IntVar(&s.errorRetries, "error-retries", controller.ErrorRetriesDefault, "retry a design whose evaluation failed (error or timeout) up to this many times, on another worker or host, before the failure counts (0: off; fixed for the run)")
	fs.IntVar(&s.quarantineAfter, "quarantine-after", controller.QuarantineAfterDefault, "quarantine a slot after this many failed evaluations in a row while other slots succeed (0: off)")
	fs.DurationVar(&s.ackWait, "ack-wait", broker.AckWaitDefault, "time without an ack or heartbeat before a design is redelivered")
	fs.DurationVar(&s.progress, "progress", controller.ProgressDefault, "period of the progress log line")
	fs.IntVar(&s.failFast, "fail-fast", runstate.FailFastDefault, "stop the run, exit 3, when its first N evaluations all end in error or timeout (default: 10, or --expect-slots or --wait-slots if larger; 0: off)")
	fs.DurationVar(&s.idleAlarm, "idle-alarm", controller.IdleAlarmDefault, "warn, with a diagnosis, when slots idle this long while designs remain (0: off)")
	fs.StringVar(&s.earlyStop, "early-stop", controller.RuleNone, "stop designs whose reports fall behind at a rung: none, median (below the median of the running means there) or asha (outside the top 1/eta there); fixed for the run")
	fs.Int64Var(&s.minStep, "min-step", controller.MinStepDefault, "with --early-stop: the first rung, in the evaluator's report steps; the rungs are min-step times powers of --eta")
	fs.Int64Var(&s.maxStep, "max-step", 0, "with --early-stop: the step of full training; no rung at or past it (0: no bound, so a design can be stopped at its last report)")
	fs.StringVar(&s.maxStepGene, "max-step-gene", "", "with --early-stop: the gene that holds each design's own training length in report steps, such as epochs; a design's report at or past it is its last, never judged at a rung (fixed for the run)")
	fs.IntVar(&s.eta, "eta", controller.EtaDefault, "with --early-stop: the rungs' ratio; asha keeps the top 1/eta at each rung")
	fs.IntVar(&s.brackets, "brackets", 1, "with --early-stop asha: asynchronous Hyperband's brackets; a design's bracket is its sequence number modulo N, bracket b's first rung is --min-step times eta^b, and each ranks its own designs, so that some designs are judged late or never (fixed for the run)")
	fs.StringVar(&s.rungSelect, "rung-select", "", "with --early-stop: off keeps parents to designs that trained to their end; reached lets a stopped design be a parent, competing with the fitness it reached at its rung; promoted does so only for a design stopped at or past the second rung (default: "+controller.SelectDefault+" with asha, "+controller.SelectMedianDefault+" with median; fixed for the run)")
	fs.BoolVar(&s.inherit, "inherit", false, "each mutant starts from its parent's checkpoint (EVOQ_PARENT_CHECKPOINT), when the parent's evaluator saved one to EVOQ_CHECKPOINT_OUT")
	fs.StringVar(&s.checkpointDir, "checkpoint-dir", "", "keep checkpoints in this shared directory, an absolute path every worker mounts (default: the broker's object store; fixed for the run)")
	fs.StringVar(&s.maxCheckpoint, "max-checkpoint", "1GiB", "largest checkpoint stored (such as 200MB or 2GiB); a larger one is refused and the result kept")
	fs.StringVar(&s.objectives, "objectives", "fitness:max", "what the search optimizes: name:max or name:min, comma-separated, each name fitness or a key of the results' metrics (zdt1, zdt2: f1:min,f2:min); two or more rank the pool by Pareto dominance; fixed for the run")
	fs.Var(&s.constraints, "constraint", "a bound on fitness or a metric, such as params<=60000 (<=, >=, <, >); repeatable; designs that meet every constraint rank first, the others by their total violation; fixed for the run")
	fs.StringVar(&s.hvRef, "hv-ref", "", "the hypervolume's reference point, one value per objective in its own units, comma-separated (default: the initial designs' worst values widened by 10% of their range; zdt1, zdt2: 1.1,1.1)")
	fs.Float64Var(&s.costTie, "cost-tie", controller.CostTieDefault, "tournament entrants whose fitness differ by at most this are compared by the slot-seconds their evaluations took (a design stopped early: scaled to its end, by --max-step-gene or --max-step), the cheaper winning (0: fitness alone; fixed for the run)")
	fs.Float64Var(&s.crossover, "crossover", controller.CrossoverDefault, "probability that a new design is the crossover of two tournament winners rather than a copy of one (fixed for the run)")
	fs.BoolVar(&s.novel, "novel", controller.NovelDefault, "make a child again (up to 20 draws) while its genome is that of one of the run's last 10,000 evaluated designs, so that no evaluation repeats one already measured; false lets children repeat them, as runs recorded before the flag did (fixed for the run)")
	fs.Float64Var(&s.mutationRate, "mutation-rate", controller.MutationRateDefault, "probability that a mutation alters each parameter, at least one; 0: exactly one parameter (fixed for the run)")
	fs.Float64Var(&s.target, "target", 0, "end the run once its best fitness reaches this: designs in flight finish, no new ones start (default: none; recorded with the run)")
	fs.IntVar(&s.plateau, "plateau", 0, "end the run once this many results in a row did not improve its best (default: none; recorded with the run)")
	fs.DurationVar(&s.timeBudget, "time-budget", 0, "end the run this long after it first started, such as 1h30m: no design starts that the measured evaluation times say cannot finish by then (default: none; the end is recorded with the run, so a restart keeps it)")
	fs.StringVar(&s.keepCheckpoints, "keep-checkpoints", controller.KeepDefault, "checkpoints kept after the run: best, pool or all (during the run each lives while its design is in the pool or the parent of a design in flight)")
}

// checkpoints are the checkpoint settings the flags give.
func (s *searchFlags) checkpoints(fs *flag.FlagSet) (controller.CheckpointConfig, error) {
	var c controller.CheckpointConfig
	if isSet(fs, "checkpoint-dir") {
		if s.checkpointDir == "" {
			return c, usageErr("--checkpoint-dir '': give a directory, or leave the flag out for the broker's object store")
		}
		c.Dir = s.checkpointDir
	}
	if isSet(fs, "max-checkpoint") {
		n, err := parseBytes(s.maxCheckpoint)
		if err != nil || n < 1 {
			return c, usageErr("--max-checkpoint %q: want a size of at least 1 byte, such as 500MB or 2GiB", s.maxCheckpoint)
		}
		c.Max = n
	}
	if isSet(fs, "keep-checkpoints") {
		c.Keep = s.keepCheckpoints
	}
	if isSet(fs, "inherit") {
		c.Inherit = new(s.inherit)
	}
	return c, nil
}

// search sets the objectives, constraints, reference point and operators
// the flags give.
func (s *searchFlags) search(fs *flag.FlagSet, cfg *controller.Config) error {
	if isSet(fs, "objectives") {
		objs, err := pareto.ParseObjectives(s.objectives)
		if err != nil {
			return usageErr("--objectives %q: %v", s.objectives, err)
		}
		cfg.Objectives.Objs = objs
	}
	for _, c := range s.constraints {
		con, err := pareto.ParseConstraint(c)
		if err != nil {
			return usageErr("--constraint: %v", err)
		}
		cfg.Objectives.Cons = append(cfg.Objectives.Cons, con)
	}
	if len(cfg.Objectives.Cons) > 0 && cfg.Objectives.Objs == nil {
		// Constraints on the default objective: say it, so that a
		// restart compares like with like.
		cfg.Objectives.Objs = cfg.Objectives.List()
	}
	if isSet(fs, "hv-ref") {
		for _, part := range strings.Split(s.hvRef, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return usageErr("--hv-ref %q: want one number per objective, comma-separated, such as 1.1,1.1", s.hvRef)
			}
			cfg.HVRef = append(cfg.HVRef, v)
		}
	}
	if isSet(fs, "crossover") {
		cfg.Crossover = new(s.crossover)
	}
	if isSet(fs, "cost-tie") {
		cfg.CostTie = new(s.costTie)
	}
	if isSet(fs, "novel") {
		cfg.Novel = new(s.novel)
	}
	if isSet(fs, "mutation-rate") {
		cfg.MutationRate = new(s.mutationRate)
	}
	return nil
}

// earlyStopRule is the rule the flags give, or nil when --early-stop is not
// given (the record's rule, or none). Its parameters alone are refused:
// they mean nothing without a rule, and a restart compares the rule whole.
func (s *searchFlags) earlyStopRule(fs *flag.FlagSet) (*schema.EarlyStop, error) {
	if !isSet(fs, "early-stop") {
		for _, name := range []string{"min-step", "max-step", "max-step-gene", "eta", "rung-select", "brackets"} {
			if isSet(fs, name) {
				return nil, usageErr("--%s needs --early-stop median or asha", name)
			}
		}
		return nil, nil
	}
	switch s.earlyStop {
	case controller.RuleNone, schema.RuleMedian, schema.RuleASHA:
	default:
		return nil, usageErr("--early-stop %q: want none, median or asha", s.earlyStop)
	}
	if s.earlyStop == controller.RuleNone {
		for _, name := range []string{"min-step", "max-step", "max-step-gene", "eta", "rung-select", "brackets"} {
			if isSet(fs, name) {
				return nil, usageErr("--%s needs --early-stop median or asha, not none", name)
			}
		}
	}
	if isSet(fs, "max-step-gene") && s.maxStepGene == "" {
		return nil, usageErr("--max-step-gene '': name the gene that holds each design's training length, or leave the flag out")
	}
	sel := ""
	if isSet(fs, "rung-select") {
		// Left out, it is the record's on a restart, the default on a new run.
		if s.rungSelect == "" || !schema.SelectValid(s.rungSelect) {
			return nil, usageErr("--rung-select %q: want off, reached or promoted", s.rungSelect)
		}
		sel = s.rungSelect
	}
	brackets := 0 // one bracket, recorded as runs before the field were
	if isSet(fs, "brackets") {
		switch {
		case s.brackets < 1:
			return nil, usageErr("--brackets %d: need at least 1", s.brackets)
		case s.brackets > 1 && s.earlyStop != schema.RuleASHA:
			return nil, usageErr("--brackets %d needs --early-stop asha: the median rule has one bracket", s.brackets)
		case s.brackets > 1:
			brackets = s.brackets
		}
	}
	return &schema.EarlyStop{Rule: s.earlyStop, MinStep: s.minStep, MaxStep: s.maxStep, Eta: s.eta, MaxStepGene: s.maxStepGene, Select: sel, Brackets: brackets}, nil
}

// config builds the controller config from the flags given explicitly: a
// flag left at its default leaves the setting unset, so that a run that
// continues takes it from its record (controller.Continue) and a new run
// from the controller's defaults, which the flags' defaults show.
func (s *searchFlags) config(fs *flag.FlagSet, log logrus.FieldLogger) (controller.Config, error) {
	if err := s.validate(fs); err != nil {
		return controller.Config{}, err
	}
	cfg := controller.Config{Run: s.run, ExpectSlots: s.expectSlots, Progress: s.progress, IdleAlarm: s.idleAlarm, Logger: log}
	if s.idleAlarm == 0 {
		cfg.IdleAlarm = controller.IdleAlarmOff
	}
	given := func(name string) bool { return isSet(fs, name) }
	if given("config") {
		if fi, err := os.Stat(s.spacePath); err == nil && fi.Mode().IsRegular() {
			if err := checkSpaceSize(s.spacePath, fi.Size()); err != nil {
				return cfg, err // before reading it
			}
		}
		sp, err := space.Load(s.spacePath)
		if err != nil {
			return cfg, usageErr("--config: %v", err)
		}
		if err := checkSpaceSize(s.spacePath, int64(len(sp.Source()))); err != nil {
			return cfg, err
		}
		cfg.Space = sp
	}
	if given("replace") {
		replace, err := runstate.ParseReplace(s.replace)
		if err != nil {
			return cfg, usageErr("%v", err)
		}
		cfg.Replace = replace
	}
	if given("seed") {
		cfg.Seed = new(s.seed)
	}
	if given("margin") {
		cfg.Margin = s.margin
		if s.margin == 0 {
			cfg.Margin = controller.MarginAuto
		}
	}
	for name, v := range map[string]struct{ from, to *int }{"budget": {&s.budget, &cfg.Budget}, "init": {&s.init, &cfg.Init},
		"pool": {&s.pool, &cfg.Pool}, "tournament": {&s.tournament, &cfg.Tournament}, "max-deliver": {&s.maxDeliver, &cfg.MaxDeliver}} {
		if given(name) {
			*v.to = *v.from
		}
	}
	if given("ack-wait") {
		cfg.AckWait = s.ackWait
	}
	if given("fail-fast") {
		cfg.FailFast = s.failFast
		if s.failFast == 0 {
			cfg.FailFast = runstate.FailFastOff
		}
	}
	if given("error-retries") {
		cfg.ErrorRetries = new(s.errorRetries)
	}
	if given("target") {
		if math.IsNaN(s.target) || math.IsInf(s.target, 0) {
			return cfg, usageErr("--target %v: want a finite fitness", s.target)
		}
		cfg.Target = new(s.target)
	}
	if given("plateau") {
		if s.plateau < 1 {
			return cfg, usageErr("--plateau %d: want at least 1 result", s.plateau)
		}
		cfg.Plateau = s.plateau
	}
	if given("time-budget") {
		if s.timeBudget <= 0 {
			return cfg, usageErr("--time-budget %s: want a positive duration, such as 2h", s.timeBudget)
		}
		cfg.TimeBudget = s.timeBudget
	}
	if given("quarantine-after") {
		cfg.QuarantineAfter = new(s.quarantineAfter)
	}
	es, err := s.earlyStopRule(fs)
	if err != nil {
		return cfg, err
	}
	cfg.EarlyStop = es
	if cfg.Checkpoints, err = s.checkpoints(fs); err != nil {
		return cfg, err
	}
	if err := s.search(fs, &cfg); err != nil {
		return cfg, err
	}
	// What can be checked before the run's record is read, before any
	// store is opened.
	return cfg, configErr(cfg.ValidateGiven())
}

// checkSpaceSize refuses a --config file of n bytes too large for the
// run's record, which carries it whole: found before anything starts, not
// when the controller first records the run, after the broker and the
// workers have started.
func checkSpaceSize(path string, n int64) error {
	if n > schema.MaxSpaceSource {
		return usageErr("--config %s is %d bytes, over the %d-byte limit for a search space: "+
			"the run's record carries it whole, in one message of at most %d bytes; describe the space in fewer bytes",
			path, n, schema.MaxSpaceSource, schema.MaxMessageSize)
	}
	return nil
}

// defaultSpace is the search space of a new run that names none.
func defaultSpace() (*space.Space, error) { return space.Parse(mlp.DefaultSpace) }

// validate refuses what the controller's Config cannot tell from a
// setting left unset: an explicit 0 for a flag whose 0 in the Config means
// "the record's or the default". Everything else is the library's to
// check (controller.Config.Validate), named back as flags by configErr.
func (s *searchFlags) validate(fs *flag.FlagSet) error {
	for _, v := range []struct {
		name string
		val  int
	}{{"budget", s.budget}, {"init", s.init}, {"pool", s.pool}, {"tournament", s.tournament}, {"max-deliver", s.maxDeliver}} {
		if v.val == 0 && isSet(fs, v.name) {
			return usageErr("--%s 0: need at least 1", v.name)
		}
	}
	if s.ackWait == 0 && isSet(fs, "ack-wait") {
		return usageErr("--ack-wait 0s: need at least %s", broker.MinAckWait)
	}
	if s.idleAlarm < 0 {
		return usageErr("--idle-alarm %s: must be >= 0 (0 turns it off)", s.idleAlarm)
	}
	if s.failFast < 0 {
		return usageErr("--fail-fast %d: must be >= 0 (0 turns the check off)", s.failFast)
	}
	if s.margin < 0 {
		return usageErr("--margin %d: must be >= 0 (0 derives it from the live slots)", s.margin)
	}
	return nil
}

func defaultRunID() string {
	return fmt.Sprintf("run-%s-%04x", time.Now().Format("20060102-150405"), os.Getpid()&0xffff)
}

// workerFlags configure a worker's slots; ev its evaluator.
type workerFlags struct {
	id                 string
	ev                 evalFlags
	slots, slotsPerGPU int
	gpus               string
	slotsSet           bool     // --slots given explicitly
	gpuIDs             []string // resolved by resolveGPUs
	evalLogs           string
	walltime, minEval  time.Duration
	walltimeMargin     time.Duration
	deadline           time.Time // resolved by resolveDeadline
	checkpointMount    string
}

// register registers the worker's flags but not the evaluator's: a
// command registers those once (ev.register), as run shares them between
// its controller and its workers.
func (w *workerFlags) register(fs *flag.FlagSet, slotsDefault int, gpusDefault string) {
	fs.StringVar(&w.gpus, "gpus", gpusDefault, "GPUs to use: auto (CUDA_VISIBLE_DEVICES, else nvidia-smi -L, else ROCR_VISIBLE_DEVICES), none, or ids like 0,1,2; one slot per GPU unless --slots")
	fs.IntVar(&w.slotsPerGPU, "slots-per-gpu", 1, "slots sharing each GPU")
	fs.StringVar(&w.evalLogs, "eval-logs", "", "keep --eval-cmd evaluators' whole stdout and stderr in files under DIR/<run>/ (default: not kept, but evoq run keeps them in --dir/eval-logs)")
	fs.IntVar(&w.slots, "slots", slotsDefault, "evaluation slots")
	fs.DurationVar(&w.walltime, "walltime", 0, "time this worker may run (0: from SLURM_JOB_END_TIME or PBS_WALLTIME, else unlimited)")
	fs.DurationVar(&w.minEval, "min-eval-time", 0, "typical evaluation time before any is measured, for the walltime check")
	fs.DurationVar(&w.walltimeMargin, "walltime-margin", worker.WalltimeMarginDefault, "leave this long before the walltime ends, handing back unfinished designs")
	fs.StringVar(&w.checkpointMount, "checkpoint-mount", "", "where this node mounts the run's --checkpoint-dir, when not at the same path (default: the run's)")
}

// evalFlags say what evaluates the designs. They are part of the run's
// record: the command that starts a run records them, and a controller
// that continues it or a worker that joins it takes them from the record
// unless given (see spec).
type evalFlags struct {
	evaluator, evalCmd     string
	persistent             bool
	simMean, simFail       float64
	simSigma               float64
	simCurve, simProgress  bool
	simFixedTime           bool
	simSteps               int
	simCheckpoint          string
	simCheckpointBytes     int64 // resolved by validate
	nb201Noise             float64
	evalTimeout, stopGrace time.Duration
	fs                     *flag.FlagSet // the flags' set, for which were given
}

// evalFlagNames are the flags of evalFlags.
var evalFlagNames = []string{"evaluator", "eval-cmd", "persistent", "eval-timeout", "stop-grace",
	"sim-mean", "sim-sigma", "sim-fail", "sim-curve", "sim-steps", "sim-checkpoint", "sim-progress", "sim-fixed-time", "nb201-noise"}

func (e *evalFlags) register(fs *flag.FlagSet) {
	e.fs = fs
	fs.StringVar(&e.evaluator, "evaluator", schema.EvaluatorMLP, "built-in evaluator: mlp, sim, noop, the test problems zdt1 and zdt2, or nb201 (a lookup in NAS-Bench-201's ImageNet16-120 accuracies); recorded with the run, like every evaluator flag (a worker or a continuing run given none takes the run's)")
	fs.StringVar(&e.evalCmd, "eval-cmd", "", "external evaluator command, run with sh -c per design (design JSON on stdin); recorded with the run")
	fs.BoolVar(&e.persistent, "persistent", false, "with --eval-cmd: one long-lived evaluator process per slot, one JSON line per design and per result")
	fs.Float64Var(&e.simMean, "sim-mean", 0.2, "sim: mean evaluation time in seconds (lognormal, sigma --sim-sigma)")
	fs.Float64Var(&e.simSigma, "sim-sigma", evaluators.SimSigma, "sim: sigma of the lognormal evaluation time (the spread; the mean stays --sim-mean)")
	fs.Float64Var(&e.simFail, "sim-fail", 0.0, "sim: share of designs that are infeasible and return at once")
	fs.BoolVar(&e.simCurve, "sim-curve", false, "sim: report a learning curve of --sim-steps steps, so that early stopping has something to decide; the time per design is the same, spread over the steps")
	fs.IntVar(&e.simSteps, "sim-steps", evaluators.SimStepsDefault, "sim with --sim-curve: steps, and reports, of a full training")
	fs.BoolVar(&e.simProgress, "sim-progress", false, "sim with --sim-curve: save the design's step after each step, and resume an interrupted design (the walltime, a worker lost) from its last saved step, as a trainer that saves progress checkpoints does")
	fs.BoolVar(&e.simFixedTime, "sim-fixed-time", false, "sim: draw each design's time from the design alone, so that every attempt of it takes as long, as a real training does (default: each attempt draws its own)")
	fs.DurationVar(&e.stopGrace, "stop-grace", worker.StopGraceDefault, "time an evaluator stopped early has to end its design (one-shot: after SIGTERM, then SIGKILL; persistent: after the stop answer, then its process is killed)")
	fs.DurationVar(&e.evalTimeout, "eval-timeout", 0, "time limit of one evaluation (0: none)")
	fs.Float64Var(&e.nb201Noise, "nb201-noise", 0, "nb201: standard deviation, in accuracy points, of normal noise added to each evaluation, so that the same cell evaluated twice differs as two trainings would (0: none)")
	fs.StringVar(&e.simCheckpoint, "sim-checkpoint", "0", "sim: write a checkpoint of this size per design (such as 64KB), and check the parent's it inherits (0: none)")
}

func (e *evalFlags) validate() error {
	if e.evalCmd != "" && isSet(e.fs, "evaluator") {
		return usageErr("--evaluator %q and --eval-cmd: give one or the other", e.evaluator)
	}
	if isSet(e.fs, "eval-cmd") && strings.TrimSpace(e.evalCmd) == "" {
		return usageErr("--eval-cmd '': give a command, or leave the flag out")
	}
	if !(e.simMean > 0 && e.simMean < 1e6) {
		return usageErr("--sim-mean %v: want seconds > 0", e.simMean)
	}
	if !(e.simSigma > 0 && e.simSigma <= 3) {
		return usageErr("--sim-sigma %v: want a sigma in (0, 3]", e.simSigma)
	}
	if !(e.simFail >= 0 && e.simFail <= 1) {
		return usageErr("--sim-fail %v: want a share in 0..1", e.simFail)
	}
	if !(e.nb201Noise >= 0 && e.nb201Noise <= 100) {
		return usageErr("--nb201-noise %v: want accuracy points in 0..100", e.nb201Noise)
	}
	if isSet(e.fs, "nb201-noise") && (e.evalCmd != "" || e.evaluator != schema.EvaluatorNB201) {
		return usageErr("--nb201-noise goes with --evaluator nb201")
	}
	if e.evalTimeout < 0 {
		return usageErr("--eval-timeout %s: must be >= 0", e.evalTimeout)
	}
	if e.simSteps < 1 {
		return usageErr("--sim-steps %d: need at least 1", e.simSteps)
	}
	n, err := parseBytes(e.simCheckpoint)
	if err != nil {
		return usageErr("--sim-checkpoint %q: want a size such as 64KB, or 0", e.simCheckpoint)
	}
	e.simCheckpointBytes = n
	if e.stopGrace <= 0 {
		return usageErr("--stop-grace %s: must be > 0", e.stopGrace)
	}
	if e.persistent && e.evalCmd == "" && isSet(e.fs, "evaluator") {
		return usageErr("--persistent needs --eval-cmd")
	}
	switch e.evaluator {
	case schema.EvaluatorMLP, schema.EvaluatorSim, schema.EvaluatorNoop, schema.EvaluatorZDT1, schema.EvaluatorZDT2, schema.EvaluatorNB201:
	default:
		return usageErr("--evaluator %q: want mlp, sim, noop, zdt1, zdt2 or nb201, or give --eval-cmd", e.evaluator)
	}
	return nil
}

// given reports whether any evaluator flag was given.
func (e *evalFlags) given() bool {
	for _, name := range evalFlagNames {
		if isSet(e.fs, name) {
			return true
		}
	}
	return false
}

// spec is the evaluator the flags give on top of rec, the run's recorded
// one: each flag given replaces the recorded setting, and every setting
// not given is the record's. With no record (a new run), the settings not
// given are the flags' defaults. A default never replaces a recorded
// value.
func (e *evalFlags) spec(rec *schema.Evaluator) (*schema.Evaluator, error) {
	set := func(name string) bool { return isSet(e.fs, name) }
	var s schema.Evaluator
	if rec != nil {
		s = *rec
		if rec.Sim != nil {
			sim := *rec.Sim
			s.Sim = &sim
		}
		if rec.NB201 != nil {
			n := *rec.NB201
			s.NB201 = &n
		}
	} else {
		s = schema.Evaluator{Builtin: e.evaluator, Cmd: e.evalCmd, Persistent: e.persistent, Timeout: e.evalTimeout, StopGrace: e.stopGrace}
		if e.evalCmd != "" {
			s.Builtin = ""
		}
	}
	switch {
	case set("eval-cmd"):
		s.Cmd, s.Builtin = e.evalCmd, ""
	case set("evaluator"):
		s.Builtin, s.Cmd = e.evaluator, ""
		if !set("persistent") {
			s.Persistent = false
		}
	}
	if set("persistent") {
		s.Persistent = e.persistent
	}
	if set("eval-timeout") {
		s.Timeout = e.evalTimeout
	}
	if set("stop-grace") {
		s.StopGrace = e.stopGrace
	}
	s.Sim = e.simSpec(s.Sim, s.Builtin == schema.EvaluatorSim, set)
	s.NB201 = e.nb201Spec(s.NB201, s.Builtin == schema.EvaluatorNB201, set)
	if s.Sim != nil && s.Sim.Progress && !s.Sim.Curve {
		return nil, usageErr("--sim-progress needs --sim-curve: sim saves the step of its curve, and without one it has none")
	}
	if s.Persistent && s.Cmd == "" {
		return nil, usageErr("--persistent needs --eval-cmd (the run's evaluator is the built-in %s)", s.Builtin)
	}
	if err := s.Validate(); err != nil {
		return nil, usageErr("evaluator: %v", err)
	}
	return &s, nil
}

// simSpec is the sim evaluator's settings: rec's with the flags given on
// top, or the flags' when rec holds none; nil for another evaluator.
func (e *evalFlags) simSpec(rec *schema.SimEvaluator, sim bool, set func(string) bool) *schema.SimEvaluator {
	if !sim {
		return nil
	}
	s := schema.SimEvaluator{Mean: time.Duration(e.simMean * float64(time.Second)), Sigma: e.simSigma, Fail: e.simFail,
		Curve: e.simCurve, Steps: e.simSteps, Checkpoint: e.simCheckpointBytes, Progress: e.simProgress, FixedTime: e.simFixedTime}
	if rec == nil {
		return &s
	}
	out := *rec
	for name, take := range map[string]func(){
		"sim-mean": func() { out.Mean = s.Mean }, "sim-sigma": func() { out.Sigma = s.Sigma }, "sim-fail": func() { out.Fail = s.Fail },
		"sim-curve": func() { out.Curve = s.Curve }, "sim-steps": func() { out.Steps = s.Steps },
		"sim-checkpoint": func() { out.Checkpoint = s.Checkpoint }, "sim-progress": func() { out.Progress = s.Progress },
		"sim-fixed-time": func() { out.FixedTime = s.FixedTime }} {
		if set(name) {
			take()
		}
	}
	if out.Curve && out.Steps < 1 {
		out.Steps = s.Steps
	}
	return &out
}

// nb201Spec is the nb201 evaluator's settings: rec's, with --nb201-noise
// on top when given, or the flag's when rec holds none; nil for another
// evaluator.
func (e *evalFlags) nb201Spec(rec *schema.NB201Evaluator, nb bool, set func(string) bool) *schema.NB201Evaluator {
	switch {
	case !nb:
		return nil
	case rec == nil || set("nb201-noise"):
		return &schema.NB201Evaluator{Noise: e.nb201Noise}
	}
	out := *rec
	return &out
}

// buildEvaluator returns the evaluator spec names; logDir keeps external
// evaluators' output (see --eval-logs).
func buildEvaluator(spec *schema.Evaluator, logDir string) (worker.Evaluator, error) {
	grace := spec.StopGrace
	if grace <= 0 {
		grace = worker.StopGraceDefault
	}
	switch {
	case spec.Cmd != "" && spec.Persistent:
		return &worker.Persistent{Cmd: spec.Cmd, LogDir: logDir, StopGrace: grace}, nil
	case spec.Cmd != "":
		return worker.Command{Cmd: spec.Cmd, LogDir: logDir, StopGrace: grace}, nil
	}
	switch spec.Builtin {
	case schema.EvaluatorMLP:
		return evaluators.MLP{}, nil
	case schema.EvaluatorSim:
		s := spec.Sim
		return evaluators.Sim{Mean: s.Mean, Fail: s.Fail, Sigma: s.Sigma, Curve: s.Curve, Steps: s.Steps, Checkpoint: s.Checkpoint,
			Progress: s.Progress, FixedTime: s.FixedTime}, nil
	case schema.EvaluatorNoop:
		return evaluators.Noop{}, nil
	case schema.EvaluatorZDT1, schema.EvaluatorZDT2:
		return evaluators.ZDT{Problem: spec.Builtin}, nil
	case schema.EvaluatorNB201:
		n := evaluators.NB201{}
		if spec.NB201 != nil {
			n.Noise = spec.NB201.Noise
		}
		return n, nil
	}
	return nil, usageErr("evaluator %q: want mlp, sim, noop, zdt1, zdt2 or nb201, or a command", spec.Builtin)
}

// resolveDeadline sets the worker's deadline from --walltime or the batch
// system (its environment, else its commands). A batch system that does
// not answer is a warning: the worker runs without a walltime, as it did
// before, and the warning says what to give.
func (w *workerFlags) resolveDeadline(ctx context.Context, log logrus.FieldLogger) error {
	if w.walltime < 0 || w.minEval < 0 || w.walltimeMargin <= 0 {
		return usageErr("--walltime, --min-eval-time and --walltime-margin must not be negative (margin > 0)")
	}
	now := time.Now()
	src := "--walltime"
	if w.walltime > 0 {
		w.deadline = now.Add(w.walltime)
	} else {
		var err error
		w.deadline, src, err = worker.BatchDeadline(ctx, os.Getenv, now)
		switch {
		case errors.Is(err, worker.ErrBatchLookup):
			log.WithError(err).Warn("walltime: running without one, so the batch system may kill evaluations at the job's end; give --walltime (a little under the job's time limit)")
			return nil
		case err != nil:
			return usageErr("%v", err)
		}
	}
	if w.deadline.IsZero() {
		return nil
	}
	left := time.Until(w.deadline)
	if left <= w.walltimeMargin {
		return usageErr("walltime from %s ends in %s, within --walltime-margin %s: no time to evaluate anything", src, left.Round(time.Second), w.walltimeMargin)
	}
	log.WithFields(logrus.Fields{"from": src, "ends": w.deadline.Format(time.RFC3339), "left": left.Round(time.Second),
		"margin": w.walltimeMargin}).Info("walltime")
	return nil
}

func (w *workerFlags) validate(fs *flag.FlagSet) error {
	w.slotsSet = isSet(fs, "slots")
	if w.slots < 1 {
		return usageErr("--slots %d: need at least 1", w.slots)
	}
	if w.slotsPerGPU < 1 {
		return usageErr("--slots-per-gpu %d: need at least 1", w.slotsPerGPU)
	}
	if w.checkpointMount != "" && !filepath.IsAbs(w.checkpointMount) {
		return usageErr("--checkpoint-mount %q: need an absolute path", w.checkpointMount)
	}
	return nil
}

// args are the worker flags, but for the slots and the evaluator, for a
// child worker process.
func (w *workerFlags) args() []string {
	a := []string{"--eval-logs", w.evalLogs}
	if w.checkpointMount != "" {
		a = append(a, "--checkpoint-mount", w.checkpointMount)
	}
	a = append(a, "--min-eval-time", w.minEval.String(), "--walltime-margin", w.walltimeMargin.String())
	if w.walltime > 0 {
		a = append(a, "--walltime", w.walltime.String())
	}
	return a
}

// resolveGPUs finds the GPUs --gpus names and, unless --slots was given,
// sets one slot per GPU times --slots-per-gpu. It warns when GPUs would
// idle.
func (w *workerFlags) resolveGPUs(ctx context.Context, log logrus.FieldLogger) error {
	ids, src, err := worker.DetectGPUs(ctx, w.gpus, os.Getenv)
	if err != nil {
		return usageErr("%v", err)
	}
	w.gpuIDs = ids
	if len(ids) == 0 {
		if w.gpus != "none" {
			log.WithField("gpus", w.gpus).Info("no GPU found; slots run without one")
		}
		return nil
	}
	if !w.slotsSet {
		w.slots = len(ids) * w.slotsPerGPU
	}
	log.WithFields(logrus.Fields{"gpus": strings.Join(ids, ","), "from": src, "slots": w.slots,
		"slots_per_gpu": w.slotsPerGPU}).Info("GPU slots")
	if w.slots < len(ids) {
		log.WithFields(logrus.Fields{"slots": w.slots, "gpus": len(ids)}).
			Warn("fewer slots than visible GPUs: some GPUs will idle; drop --slots to get one slot per GPU")
	}
	return nil
}

// slotGPUs is the GPU of each slot, or nil without GPUs.
func (w *workerFlags) slotGPUs() []string {
	if len(w.gpuIDs) == 0 {
		return nil
	}
	return worker.SlotGPUs(w.gpuIDs, w.slots, w.slotsPerGPU)
}

// slotGPUUUIDs are the UUIDs of the slots' GPUs, or nil without GPUs.
// Without them the run goes on: they only label the results.
func (w *workerFlags) slotGPUUUIDs(ctx context.Context, log logrus.FieldLogger) []string {
	gpus := w.slotGPUs()
	if gpus == nil {
		return nil
	}
	uuids, err := worker.GPUUUIDs(ctx, os.Getenv)
	if err != nil {
		log.WithError(err).Warn("GPU UUIDs not found: results record the GPU index only")
	}
	out := worker.SlotUUIDs(gpus, uuids)
	log.WithField("gpu_uuids", strings.Join(out, ",")).Debug("GPU UUIDs of the slots")
	return out
}
