// Package worker runs evoq evaluation slots: one goroutine per slot pulls
// exactly one design when it is free, evaluates it, stores the result and
// waits for the broker to confirm it, and only then acks the design.
//
// Shutdown order: Stop stops the slots from fetching, lets running
// evaluations finish and store their results, then removes the worker's
// presence. When Stop's ctx ends first, running evaluations are cancelled
// and their designs handed back (Nak) for another slot.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// Defaults of Config.
const (
	SlotsDefault     = 1
	HeartbeatDefault = broker.HeartbeatDefault
	FetchWaitDefault = 10 * time.Second
)

// ErrRunFailed means the worker left because the controller stopped its
// run: none of the run's first evaluations worked (schema.PhaseFailed).
var ErrRunFailed = errors.New("the run failed")

// ErrConfig means a Config field is invalid: the error is a
// *schema.FieldError naming it.
var ErrConfig = errors.New("invalid worker config")

// Config configures a Worker.
type Config struct {
	// Run is the ID of the run to serve. Required.
	Run string
	// ID names the worker in results and presence. Defaults to host-pid.
	ID string
	// Host is recorded in results. Defaults to os.Hostname().
	Host string
	// Slots is the number of concurrent evaluations. Defaults to 1.
	Slots int
	// Evaluator evaluates designs. Required unless Choose is set.
	Evaluator Evaluator
	// Choose, when Evaluator is nil, picks the evaluator once Start has
	// read the run's record (nil when the run has none), so that a worker
	// given no evaluator of its own runs the run's. Defaults to none.
	Choose func(rec *schema.Run) (Chosen, error)
	// SlotGPUs pins slot i to the GPU(s) SlotGPUs[i] (a CUDA_VISIBLE_DEVICES
	// value) and records it in results. Defaults to none; when set it has
	// one entry per slot (see SlotGPUs).
	SlotGPUs []string
	// SlotGPUUUIDs are the UUIDs of the slots' GPUs (see SlotUUIDs),
	// recorded in results so that a faulty GPU can be found again after
	// the fact; "" for a slot whose GPU's UUID is not known. Defaults to
	// none; when set it has one entry per slot.
	SlotGPUUUIDs []string
	// EvalTimeout bounds one evaluation; past it the result is a timeout.
	// Defaults to 0, no limit.
	EvalTimeout time.Duration
	// Deadline is when the allocation ends (zero: never). The worker takes
	// no design it cannot finish by Deadline - WalltimeMargin and hands
	// back what still runs then.
	Deadline time.Time
	// WalltimeMargin defaults to WalltimeMarginDefault.
	WalltimeMargin time.Duration
	// MinEvalTime is the least time an evaluation is expected to take,
	// before there are measurements. Defaults to 0.
	MinEvalTime time.Duration
	// Heartbeat is the presence period. Defaults to HeartbeatDefault.
	Heartbeat time.Duration
	// FetchWait is how long one pull request waits for a design before it
	// is renewed. Defaults to FetchWaitDefault.
	FetchWait time.Duration
	// JoinTimeout bounds the wait for the run to exist on the broker; past
	// it Start fails with ErrNoRun. Defaults to 0, wait forever (workers
	// may start before the controller).
	JoinTimeout time.Duration
	// RunsUnlisted says the worker's credential may not list the runs on
	// the broker: a worker credential reads its own run's entry only. A
	// worker waiting for a run that is not there then says so without
	// naming the runs in progress, and sends no request the broker would
	// refuse (a refused request is never answered: it would cost a
	// timeout). Defaults to false: the runs are listed.
	RunsUnlisted bool
	// CheckpointDir is where this node mounts the shared directory of a
	// run that keeps its checkpoints in one, when that is not where its
	// controller said (schema.Checkpoints.Dir). Defaults to the run's.
	CheckpointDir string
	// TempDir holds the worker's files passing between evaluators and
	// the broker's object store (checkpoints). Defaults to os.TempDir().
	TempDir string
	// OnStored is called with every result the broker confirmed (metrics);
	// it must not block. Defaults to nothing.
	OnStored func(*schema.Result)
	// Logger defaults to logrus.StandardLogger().
	Logger logrus.FieldLogger
}

func (c Config) withDefaults() Config {
	if c.Host == "" {
		c.Host, _ = os.Hostname()
		if c.Host == "" {
			c.Host = "localhost"
		}
	}
	if c.ID == "" {
		c.ID = fmt.Sprintf("%s-%d", tokenize(c.Host), os.Getpid())
	}
	if c.Slots == 0 {
		c.Slots = SlotsDefault
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = HeartbeatDefault
	}
	if c.FetchWait <= 0 {
		c.FetchWait = FetchWaitDefault
	}
	if c.WalltimeMargin <= 0 {
		c.WalltimeMargin = WalltimeMarginDefault
	}
	if c.Logger == nil {
		c.Logger = logrus.StandardLogger()
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	return c
}

// validate checks c after defaults. Its errors are *schema.FieldError
// naming the Config field, and match ErrConfig.
func (c Config) validate() error {
	checks := []struct {
		bad    bool
		field  string
		value  any
		reason string
	}{
		{schema.ValidToken(c.Run) != nil, "Run", c.Run, reasonOf(schema.ValidToken(c.Run))},
		{schema.ValidToken(c.ID) != nil, "ID", c.ID, reasonOf(schema.ValidToken(c.ID))},
		{c.Slots < 1, "Slots", c.Slots, "need at least 1"},
		{c.Evaluator == nil && c.Choose == nil, "Evaluator", nil, "no evaluator"},
		{c.SlotGPUs != nil && len(c.SlotGPUs) != c.Slots, "SlotGPUs", nil, fmt.Sprintf("%d GPU assignments for %d slots", len(c.SlotGPUs), c.Slots)},
		{c.SlotGPUUUIDs != nil && len(c.SlotGPUUUIDs) != c.Slots, "SlotGPUUUIDs", nil, fmt.Sprintf("%d GPU UUIDs for %d slots", len(c.SlotGPUUUIDs), c.Slots)},
		{c.EvalTimeout < 0, "EvalTimeout", c.EvalTimeout, "is negative"},
		{c.FetchWait < 100*time.Millisecond, "FetchWait", c.FetchWait, "need at least 100ms"},
	}
	for _, ch := range checks {
		if ch.bad {
			return &schema.FieldError{Err: ErrConfig, Field: ch.field, Value: ch.value, Reason: ch.reason}
		}
	}
	return nil
}

func tokenize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c == '-' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
			b[i] = '-'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}

// Worker serves one run with Config.Slots slots.
type Worker struct {
	js   jetstream.JetStream
	cfg  Config
	log  logrus.FieldLogger
	cons jetstream.Consumer

	ackWait   time.Duration
	evalTimes durations
	space     *space.Space      // the run's search space, when the run publishes it
	rule      *schema.EarlyStop // the run's early-stopping rule; nil: none
	// objectives are the run's: an ok result lacking one is an error.
	objectives pareto.Objectives
	ckpt       *ckpts // the run's checkpoint store; nil: the run keeps none
	// saving are the evaluations running with a progress file, asked to
	// save before a hand-back (askSaves).
	savingMu sync.Mutex
	saving   map[*attemptProgress]struct{}
	// storing runs the slots' result stores; nil until the slots start.
	storing *storers
	// warnings are the worker's standing conditions, sent with every
	// heartbeat (schema.Presence.Warnings).
	warnMu    sync.Mutex
	warnings  []string
	askMu     sync.Mutex
	askWarned time.Time // the last warning that stop questions go unanswered
	busy      atomic.Int64
	done      atomic.Int64
	started   time.Time
	// lateForRun: the run was done when the worker joined it.
	lateForRun bool
	// failed is why the worker left a failed run; nil otherwise.
	failed atomic.Pointer[error]

	// The walltime check: now and walltimeEvery are time.Now and
	// walltimeCheckEvery, which tests change to force a late design;
	// walltimeOnce stops the worker taking designs once.
	now           func() time.Time
	walltimeEvery time.Duration
	walltimeOnce  sync.Once

	// maxDeliver is the consumer's delivery limit (-1: none), read as the
	// worker joins: a design that avoids this worker is evaluated here
	// rather than handed back into its limit (see avoided).
	maxDeliver int

	fetchCtx    context.Context // cancelled by Stop: no new designs
	fetchCancel context.CancelFunc
	// feed pulls designs for the slots.
	feed       *feeder
	prog       *progress       // the InProgress of the designs being evaluated
	evalCtx    context.Context // cancelled by a hard stop: running evaluations end
	evalCancel context.CancelFunc
	slots      sync.WaitGroup
	bg         sync.WaitGroup
	stopOnce   sync.Once
	slotsDone  chan struct{} // closed when every slot has returned
	doneCh     chan struct{}
	q          quarantine
	err        error // why the worker left on its own; set before doneCh closes
}

// New checks cfg and returns a worker; Start begins serving.
func New(js jetstream.JetStream, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.WithFields(logrus.Fields{"run": cfg.Run, "worker": cfg.ID})
	return &Worker{js: js, cfg: cfg, log: log, now: time.Now, walltimeEvery: walltimeCheckEvery,
		slotsDone: make(chan struct{}), doneCh: make(chan struct{}),
		q: quarantine{slots: map[int]bool{}, lastErr: map[int]string{}}}, nil
}

// Chosen is the evaluator a worker runs, picked by Config.Choose.
type Chosen struct {
	Evaluator Evaluator
	// Timeout bounds one evaluation, as Config.EvalTimeout.
	Timeout time.Duration
	// Differs says how the evaluator differs from the run's recorded one,
	// a line per setting; nil when it is the run's. The worker logs it
	// and its heartbeat carries it, so that status shows it.
	Differs []string
}

// choose runs Config.Choose, when the worker was given no evaluator.
func (w *Worker) choose(rec *schema.Run) error {
	if w.cfg.Evaluator != nil {
		return nil
	}
	c, err := w.cfg.Choose(rec)
	if err != nil {
		return err
	}
	w.cfg.Evaluator, w.cfg.EvalTimeout = c.Evaluator, c.Timeout
	for _, d := range c.Differs {
		w.addWarning("evaluator differs from the run's: " + d)
	}
	if len(c.Differs) > 0 {
		w.log.WithField("differs", strings.Join(c.Differs, "; ")).
			Warn("this worker's evaluator differs from the run's recorded one: its results may not compare with the others'")
	}
	return nil
}

// addWarning makes msg one of the worker's standing warnings, once.
func (w *Worker) addWarning(msg string) {
	w.warnMu.Lock()
	defer w.warnMu.Unlock()
	if !slices.Contains(w.warnings, msg) && len(w.warnings) < maxWarnings {
		w.warnings = append(w.warnings, msg)
	}
}

// standingWarnings are the worker's warnings, for a heartbeat.
func (w *Worker) standingWarnings() []string {
	w.warnMu.Lock()
	defer w.warnMu.Unlock()
	return slices.Clone(w.warnings)
}

// maxWarnings bounds a worker's standing warnings, so that a heartbeat
// stays small whatever goes wrong.
const maxWarnings = 16

// ID is the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Start waits for the run's consumer to exist, then starts the slots, the
// presence heartbeat and the watch on the run's state. Cancelling ctx is a
// hard stop. Start returns once the slots run.
func (w *Worker) Start(ctx context.Context) error {
	cons, err := w.join(ctx)
	if err != nil {
		return err
	}
	w.cons = cons
	info := cons.CachedInfo()
	w.ackWait, w.maxDeliver = info.Config.AckWait, info.Config.MaxDeliver
	if err := w.checkLimits(info); err != nil {
		return err
	}
	// Retried a while: a broker cluster may be electing a leader.
	b := broker.Backoff{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Limit: time.Minute,
		OnRetry: func(err error, _ time.Duration) {
			w.log.WithError(err).Warn("reading the run's search space failed; retrying")
		}}
	var rec *schema.Run
	err = broker.Retry(ctx, b, func() (err error) {
		w.space, rec, err = w.runSpace(ctx)
		return err
	})
	if err != nil {
		return err
	}
	if err := w.choose(rec); err != nil {
		return err
	}
	var ckpt *schema.Checkpoints
	if rec != nil {
		w.rule, ckpt = rec.EarlyStop, rec.Checkpoints
		if w.objectives, err = pareto.ObjectivesOf(rec); err != nil {
			return err
		}
	}
	if err := w.openCheckpoints(ctx, ckpt); err != nil {
		return err
	}
	// A done run keeps its work queue, so joining it succeeds; the worker
	// then leaves at once, and says why (see leaveDone).
	if phase, err := runPhase(ctx, w.js, w.cfg.Run); err == nil && phase == schema.PhaseDone {
		w.lateForRun = true
	}
	// Subscribed before the slots start, so that an order sent as the
	// first heartbeat arrives is not missed.
	if err := w.watchControl(); err != nil {
		return err
	}
	w.started = time.Now()
	w.evalCtx, w.evalCancel = context.WithCancel(ctx)
	w.fetchCtx, w.fetchCancel = context.WithCancel(w.evalCtx)
	w.log.WithFields(logrus.Fields{"slots": w.cfg.Slots, "evaluator": w.cfg.Evaluator.Name(),
		"ack_wait": w.ackWait, "in_progress_every": w.progressEvery()}).Info("worker joined run")
	if w.feed, err = newFeeder(w.js.Conn(), w.cfg.Run, w.cfg.Slots, w.cfg.FetchWait, w.log); err != nil {
		return err
	}
	w.prog = newProgress(w.progressEvery(), design.InProgress)
	w.storing = newStorers()
	for i := range w.cfg.Slots {
		w.slots.Add(1)
		go w.slot(i)
	}
	w.bg.Add(4)
	go func() { defer w.bg.Done(); w.prog.run(w.slotsDone) }()
	go w.presence()
	go w.watchRun()
	go w.watchWalltime()
	go w.closeWhenDone()
	return nil
}

func (w *Worker) checkLimits(info *jetstream.ConsumerInfo) error {
	if info.Config.MaxWaiting < w.cfg.Slots {
		return &schema.FieldError{Err: ErrConfig, Field: "Slots", Value: w.cfg.Slots,
			Reason: fmt.Sprintf("exceeds the run consumer's MaxWaiting %d, which is fixed when the run is created: use fewer slots, or start a new run sized for at least %d slots", info.Config.MaxWaiting, w.cfg.Slots)}
	}
	if w.ackWait < 3*w.cfg.Heartbeat {
		return &schema.FieldError{Err: ErrConfig, Field: "Heartbeat", Value: w.cfg.Heartbeat,
			Reason: fmt.Sprintf("the run's AckWait %s is shorter than 3 presence heartbeats", w.ackWait)}
	}
	return nil
}

// join waits until the run's consumer exists, saying why while it waits
// (see NewWaitWarnings), for JoinTimeout at most.
func (w *Worker) join(ctx context.Context) (jetstream.Consumer, error) {
	joinCtx := ctx
	if w.cfg.JoinTimeout > 0 {
		var cancel context.CancelFunc
		joinCtx, cancel = context.WithTimeout(ctx, w.cfg.JoinTimeout)
		defer cancel()
	}
	began := time.Now()
	warnings := NewWaitWarnings(began)
	b := broker.Backoff{Initial: 250 * time.Millisecond, Max: 250 * time.Millisecond, OnRetry: func(error, time.Duration) {
		w.noteWait(joinCtx, warnings, began)
	}}
	var cons jetstream.Consumer
	err := broker.Retry(joinCtx, b, func() (err error) {
		cons, err = w.js.Consumer(joinCtx, schema.DesignStream, schema.ConsumerName(w.cfg.Run))
		if err == nil {
			err = w.notFailed(joinCtx)
		}
		return err
	})
	var re *broker.RetryError
	switch {
	case errors.As(err, &re) && joinCtx.Err() != nil && ctx.Err() == nil:
		// The wait is over, not the worker: the run's state and the
		// runs in progress say what went wrong.
		s := SightRun(ctx, w.js, w.cfg.Run, w.cfg.RunsUnlisted)
		waited := time.Since(began).Round(100 * time.Millisecond)
		return nil, fmt.Errorf("join run %s: %w after %s of waiting: %s", w.cfg.Run, ErrNoRun, waited, s)
	case errors.As(err, &re):
		return nil, fmt.Errorf("join run %s: %w (last error: %v)", w.cfg.Run, re.Stop, re.Last)
	}
	return cons, err
}

// errRunFailed is a join's reason to wait: the run failed and keeps its
// work queue, but no controller serves it until one continues the run.
var errRunFailed = errors.New("the run failed; waiting for a controller to continue it")

// notFailed refuses to join a failed run. A worker started for it (a job
// script started again after a fix, or `evoq run --resume` starting its
// workers before its controller records the run as continued) waits until
// a controller continues the run, instead of leaving with ErrRunFailed at
// once. When the phase cannot be read the worker joins: its watch on the
// run's state sees the phase later.
func (w *Worker) notFailed(ctx context.Context) error {
	phase, err := runPhase(ctx, w.js, w.cfg.Run)
	switch {
	case err == nil && phase == schema.PhaseFailed:
		return errRunFailed
	case err != nil && ctx.Err() != nil:
		// The join's wait ran out during the read: that says nothing of
		// the run, and is no reason to join it.
		return ctx.Err()
	}
	return nil
}

// runSpace reads the run's record and search space from its run state,
// so that the worker can refuse genomes outside it; the record has its
// early-stopping rule, so that the slots know at which reports to ask the
// controller, its checkpoint settings, and its objectives, which every ok
// result must carry. A run without a space is not checked; one without a
// rule never stops early; one without checkpoint settings keeps none; a
// run not recorded yet has no record.
func (w *Worker) runSpace(ctx context.Context) (*space.Space, *schema.Run, error) {
	kv, err := w.js.KeyValue(ctx, schema.RunBucket)
	if err != nil {
		return nil, nil, fmt.Errorf("open bucket %s: %w", schema.RunBucket, err)
	}
	e, err := kv.Get(ctx, w.cfg.Run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read run %s: %w", w.cfg.Run, err)
	}
	r, err := schema.DecodeRun(e.Value())
	if err != nil {
		return nil, nil, err
	}
	if len(r.SpaceYAML) == 0 {
		return nil, r, nil
	}
	sp, err := space.Parse(r.SpaceYAML)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s: its search space: %w", w.cfg.Run, err)
	}
	return sp, r, nil
}

func (w *Worker) progressEvery() time.Duration { return max(w.ackWait/3, 10*time.Millisecond) }

// Stop stops fetching and waits for running evaluations to finish and store
// their results. If ctx ends first, they are cancelled and their designs
// handed back. Stop then waits for the worker to be done.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() {
		w.log.WithField("busy", w.busy.Load()).Info("worker stopping: no new designs")
		w.stopFetching()
	})
	select {
	case <-w.doneCh:
		return nil
	case <-ctx.Done():
		w.log.WithField("busy", w.busy.Load()).Warn("drain time over: cancelling running evaluations and handing their designs back")
		w.askSaves(DrainSaveWait)
		w.evalCancel()
		<-w.doneCh
		return ctx.Err()
	}
}

// stopNow stops fetching and cancels running evaluations without
// recording them: used when the run is done, so nothing running can count.
func (w *Worker) stopNow() {
	w.stopOnce.Do(func() {})
	w.stopFetching()
	w.evalCancel()
}

// stopFetching stops the slots asking for designs and ends the worker's
// pull requests at the broker. A request still out (a batch for two
// slots that has brought one design) would otherwise take designs for a
// worker that evaluates no more, each handed back at the cost of a
// delivery: a design handed back because it arrived too late for the
// walltime came straight back to the same worker.
func (w *Worker) stopFetching() {
	w.fetchCancel()
	w.feed.close()
}

// Done is closed when every slot has stopped and presence is removed.
func (w *Worker) Done() <-chan struct{} { return w.doneCh }

// Err says, once Done is closed, why the worker left when that was no
// normal end: an error matching ErrRunFailed when its run failed, or
// ErrQuarantined when every slot was quarantined. Nil otherwise.
func (w *Worker) Err() error {
	if p := w.failed.Load(); p != nil {
		return *p
	}
	select {
	case <-w.doneCh:
		return w.err
	default:
		return nil
	}
}

// Busy is the number of slots evaluating now.
func (w *Worker) Busy() int { return int(w.busy.Load()) }

func (w *Worker) closeWhenDone() {
	w.slots.Wait()
	w.storing.close() // each slot waited for its last result's store
	w.feed.close()
	if w.fetchCtx.Err() == nil && w.allQuarantined() {
		w.leaveQuarantined()
	}
	w.fetchCancel()
	close(w.slotsDone)
	if c, ok := w.cfg.Evaluator.(io.Closer); ok {
		_ = c.Close()
	}
	w.bg.Wait()
	w.evalCancel()
	w.closeCheckpoints()
	close(w.doneCh)
}

// reasonOf is err's reason, or "" when there is no error.
func reasonOf(err error) string {
	if err == nil {
		return ""
	}
	return schema.Reason(err)
}
