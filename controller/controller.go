// Package controller runs evoq's asynchronous steady-state search. It folds
// the results stream into a bounded pool and keeps the number of designs in
// flight equal to the live worker slots plus a small margin, whatever the
// initial population: random designs until Init have a result, then mutants
// of tournament-selected pool members, until Budget designs have a terminal
// result.
//
// The controller's state is a pure fold over the run's results stream, so a
// restarted controller replays the stream from the start and continues
// where the last one stopped; design IDs are deterministic and published
// with a Nats-Msg-Id, so nothing is published twice.
package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// Controller runs one search.
type Controller struct {
	js  jetstream.JetStream
	cfg Config
	log logrus.FieldLogger
	// parents are the canonical genomes of the pool members chosen as
	// parents (vary).
	parents parentCache
	// debug is whether the log takes debug lines: one per result is only
	// built when it does.
	debug bool

	fold       *runstate.Fold
	lease      *lease
	leaseLost  chan error
	record     *schema.Run     // the run's record when this controller started; nil for a new run
	changes    []schema.Change // settings changed by restarts, recorded with the run
	published  uint64          // designs 1..published are on the queue or done
	slots      *slotTracker
	cons       jetstream.Consumer
	designs    jetstream.Stream
	runKV      jetstream.KeyValue
	phase      schema.Phase
	created    time.Time
	liveSince  time.Time // first publish, or end of replay if designs were already out
	lastResult time.Time
	replayed   int  // results folded during replay, before liveSince
	live       bool // replay is over: published is known
	ahead      int  // counted results of seqs above published (see skipCounted)
	// pending counts the genome keys (runstate.GenomeKey) of the designs
	// this controller published that have no counted result yet, so that
	// a novel run's children differ from those in flight too, the fold
	// knowing only the counted ones; a restart starts it with the designs
	// on the work queue (pendQueued).
	pending   map[uint64]int
	idle      idleSince
	lastAlarm time.Time
	noSlot    noSlotAlarm
	limitsFor int // live slots the consumer's limits were last checked for
	// The fail-fast check (see FailFast): its window starts after stream
	// sequence failFrom; failure is its verdict once the run failed.
	failFast *runstate.FailFast
	failFrom uint64
	madeUp   int // designs of the budget made up for failed starts
	failure  *schema.Failure
	// stopping is why the run is ending, once new designs stopped, and
	// stopReason why it ended, once it has (see ending).
	stopping, stopReason schema.StopReason

	results chan resultMsg
	// The consumer of the results stream (see ResultsStall).
	stopResults  func()
	resultsGen   int       // its generation: what earlier ones read is dropped
	resultsSeq   uint64    // stream sequence of the last result read
	resultsAt    time.Time // when it was read
	resultsCheck time.Time // when the broker was last asked for unread results
	presence     chan presenceEvent
	lost         chan uint64
	alerts       chan string
	lastLog      time.Time
	resumed      *runstate.Replay // what replay found in the stream; nil for a fresh run
	// retries are the designs awaiting, or out on, a retry (see
	// retry.go); as many as designs in flight at most.
	retries map[uint64]*pendingRetry
	// controlSent is when each worker was last told its quarantined
	// slots (see control.go).
	controlSent map[string]time.Time
	// heldEarly are the slots not fed since they failed their first
	// designs while the run's expected slots were joining (see
	// holdEarly), by worker, and when each worker's were last held.
	heldEarly   map[string][]int
	heldEarlyAt map[string]time.Time
	// warnings are the run's standing warnings (see warnings.go);
	// warningsDirty: some are not in the run's record yet.
	warnings        []string
	warningsDirty   bool
	inertChecked    bool
	checkpointsSeen int
	lastCkptSweep   time.Time // the last listing of the checkpoint store (see sweepCheckpoints)
	firstWork       time.Time // the start of the first evaluation counted live (see workTime)
	// stopper runs the early-stopping rule; nil for a run without one.
	stopper *stopper
	// ckpt applies the checkpoint store's rule (see checkpoints.go).
	ckpt *ckptTracker
	// extends are the requests of `evoq run extend` waiting for the loop
	// (see extend.go); stopExtendsSub ends their subscription.
	extends        chan extendReq
	stopExtendsSub func()
}

// New returns a controller; Run runs the search. Settings cfg leaves
// unset are taken from the run's record when the run exists (see
// Continue), else from the defaults; New checks only what it can without
// the record: the run ID, and the settings when cfg names a search space.
// Resolve checks all of them against the broker.
func New(js jetstream.JetStream, cfg Config) (*Controller, error) {
	if err := cfg.ValidateGiven(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.StandardLogger()
	}
	c := &Controller{
		js:          js,
		cfg:         cfg,
		log:         cfg.Logger.WithField("run", cfg.Run),
		debug:       debugEnabled(cfg.Logger),
		slots:       newSlotTracker(),
		idle:        idleSince{},
		results:     make(chan resultMsg, 4096),
		presence:    make(chan presenceEvent, 1024),
		lost:        make(chan uint64, 64),
		alerts:      make(chan string, 1),
		leaseLost:   make(chan error, 1),
		retries:     map[uint64]*pendingRetry{},
		controlSent: map[string]time.Time{},
	}
	c.slots.held = c.heldSlots
	return c, nil
}

// Config is the controller's effective configuration: valid once Run has
// resolved it against the run's record.
func (c *Controller) Config() Config { return c.cfg }

// Run takes the run's lease, continues the run from its record or
// declares a new one, replays its results, and runs the search until
// Budget designs have a terminal result or ctx ends. It stops reading the
// results stream before it returns, so the caller may close the
// connection at once.
func (c *Controller) Run(ctx context.Context) (*runstate.Summary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.declare(ctx); err != nil {
		return nil, err
	}
	// The lease is renewed until Run returns, then given up, so that a
	// next controller need not wait for it to expire; the renewals end
	// before the release, which must see the last revision.
	leaseCtx, stopLease := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() { defer close(kept); c.lease.keep(leaseCtx, c.leaseLost) }()
	defer func() { stopLease(); <-kept; c.lease.release(context.WithoutCancel(ctx)) }()
	defer func() { c.ckpt.stopServing() }() // opened by declareRun
	if err := c.declareRun(ctx); err != nil {
		return nil, err
	}
	if err := c.startWatches(ctx); err != nil {
		return nil, err
	}
	if err := startRetry(ctx, c.log, "take run extend requests", c.startExtends); err != nil {
		return nil, err
	}
	// Requests that come once the loop is over are answered that the run
	// has ended: raising its limits then would change nothing.
	defer c.stopExtends()
	if err := c.startStopper(ctx); err != nil {
		return nil, err
	}
	defer c.stopStopper()
	ckptCtx, stopCkpt := context.WithCancel(ctx)
	go c.ckpt.run(ckptCtx)
	// The deletions queued are done before Run returns, and before the
	// summary of a run done: the store is then as the rule says.
	deleted := sync.OnceFunc(func() { stopCkpt(); <-c.ckpt.done })
	defer deleted()
	defer func() { c.stopResults() }() // the consumer in use then: a restart replaces it
	if err := c.replay(ctx); err != nil {
		return nil, err
	}
	if c.failure == nil {
		if err := c.waitSlots(ctx); err != nil {
			return nil, err
		}
		err := c.loop(ctx)
		if err != nil {
			c.recordInterrupted(ctx)
		}
		c.stopExtends()
		if err != nil {
			return nil, err
		}
	}
	if c.failure != nil {
		return nil, c.fail(ctx)
	}
	if c.stopper != nil {
		c.stopper.catchUp(ctx)
	}
	// The run is done: its last counted result is folded, and a worker's
	// checkpoint commit, which precedes its result, was served. A commit
	// now would store what the sweeps and settle below no longer see (the
	// saved progress of a closed design), so commits end here, and a late
	// save fails on its worker's side.
	c.ckpt.stopServing()
	c.ckpt.finish()
	c.sweepCheckpoints(ctx)
	deleted()
	if c.ckpt != nil {
		if n := c.ckpt.settle(ctx, c.designOpen); n > 0 {
			c.log.WithField("checkpoints", n).Info("deleted checkpoints stored as the run ended")
		}
		c.ckpt.measure(ctx, c.log)
	}
	if err := c.setPhase(ctx, schema.PhaseDone); err != nil {
		c.log.WithError(err).Warn("could not mark the run done; standalone workers will not stop by themselves")
	}
	// Stop reading results before saying the run is done: the caller
	// closes the connection next, which a consumer still reading would
	// report as a failure.
	c.stopResults()
	s := c.Summary()
	c.log.WithFields(s.Fields()).Info("run done")
	return s, nil
}

// startStopper starts the run's early-stopping rule, when it has one,
// from the first stored report.
func (c *Controller) startStopper(ctx context.Context) error {
	if c.cfg.EarlyStop == nil {
		return nil
	}
	var reported func()
	if m, ok := c.cfg.Metrics.(interface{ Reported() }); ok {
		reported = m.Reported
	}
	s := newStopper(c.js, c.cfg.Run, c.cfg.EarlyStop, c.log, reported)
	if err := startRetry(ctx, c.log, "start the early-stopping rule", func() error { return s.start(ctx) }); err != nil {
		return err
	}
	c.stopper = s
	return nil
}

func (c *Controller) stopStopper() {
	if c.stopper != nil {
		c.stopper.stop()
	}
}

// declare declares the streams and buckets and takes the run's lease.
func (c *Controller) declare(ctx context.Context) error {
	replicas := max(c.cfg.Replicas, 1)
	err := startRetry(ctx, c.log, "declare the streams and buckets", func() error {
		return broker.Declare(ctx, c.js, broker.WithReplicas(replicas))
	})
	if err != nil {
		return err
	}
	err = startRetry(ctx, c.log, "open bucket "+schema.RunBucket, func() (err error) {
		c.runKV, err = c.js.KeyValue(ctx, schema.RunBucket)
		return err
	})
	if err != nil {
		return err
	}
	var leases jetstream.KeyValue
	err = startRetry(ctx, c.log, "open bucket "+schema.LeaseBucket, func() (err error) {
		leases, err = c.js.KeyValue(ctx, schema.LeaseBucket)
		return err
	})
	if err != nil {
		return err
	}
	now := time.Now
	if c.cfg.Now != nil {
		now = c.cfg.Now
	}
	c.lease = newLease(leases, c.cfg.Run, now(), c.log)
	return c.lease.acquire(ctx)
}

// declareRun resolves the settings against the run's record, records the
// run and declares its consumer.
func (c *Controller) declareRun(ctx context.Context) error {
	var err error
	if c.record, err = LoadRun(ctx, c.js, c.cfg.Run, c.log); err != nil {
		return err
	}
	cfg, k, err := resolve(c.record, c.cfg, time.Now)
	if err != nil {
		return err
	}
	c.cfg = cfg
	if k != nil {
		c.created = c.record.Created
		c.changes = append(c.record.Changes, k.Changes...)
		c.failFrom, c.madeUp = c.record.FailFastFrom, c.record.MadeUp
		// A continuing run keeps its warnings: they said what its
		// results lack, and the results are the same.
		c.warnings = slices.Clone(c.record.Warnings)
		if c.record.Phase == schema.PhaseFailed {
			if err := c.continueFailed(ctx); err != nil {
				return err
			}
		}
	}
	c.initState()
	if err := c.openCheckpoints(ctx); err != nil {
		return err
	}
	c.log.WithFields(c.cfg.Fields()).Info("controller starting")
	if k != nil {
		c.log.WithFields(k.Fields()).Info("continuing the run with its recorded settings")
		for _, w := range c.warnings {
			c.log.Warn("the run's warning: " + w)
		}
	}
	c.startWarnings()
	// The run state, with its search space, exists before the consumer, so
	// a worker that finds the consumer finds the space too.
	if err := c.setPhase(ctx, schema.PhaseStarting); err != nil {
		return err
	}
	err = startRetry(ctx, c.log, "declare the run's consumer", func() (err error) {
		c.cons, err = broker.DeclareConsumer(ctx, c.js, c.cfg.Run, broker.ConsumerConfig{
			Slots: c.cfg.ExpectSlots, AckWait: c.cfg.AckWait, MaxDeliver: c.cfg.MaxDeliver, Replicas: c.cfg.Replicas,
		})
		return err
	})
	if err != nil {
		return err
	}
	err = startRetry(ctx, c.log, "open stream "+schema.DesignStream, func() (err error) {
		c.designs, err = c.js.Stream(ctx, schema.DesignStream)
		return err
	})
	if err != nil {
		return err
	}
	info := c.cons.CachedInfo()
	c.log.WithFields(logrus.Fields{"consumer": info.Name, "max_waiting": info.Config.MaxWaiting,
		"max_ack_pending": info.Config.MaxAckPending, "ack_wait": info.Config.AckWait,
		"max_deliver": info.Config.MaxDeliver, "replicas": c.cfg.Replicas}).Info("work queue ready")
	return nil
}

// initState makes what the controller folds the results stream into, for
// the settings resolved against the run's record: the fold and the
// fail-fast check.
func (c *Controller) initState() {
	c.fold = runstate.NewFoldFor(runstate.NewTally(c.cfg.Run, c.cfg.Budget, c.cfg.Rules()), c.cfg.Init, c.cfg.Pool, c.cfg.Replace, c.cfg.Objectives, c.cfg.HVRef)
	if c.novel() {
		c.fold.TrackSeen()
	}
	c.fold.SetStopRule(runstate.StopRule{Target: c.cfg.Target, Plateau: c.cfg.Plateau})
	c.fold.SetSelect(c.cfg.EarlyStop)
	c.fold.Pool().SetCostTie(derefF(c.cfg.CostTie))
	c.failFast = runstate.NewFailFast(c.cfg.FailFast, c.failFrom)
}

// StartRetry bounds the retries of the controller's first requests to the
// broker: a JetStream cluster that is starting, or electing new leaders
// after losing a node, refuses or leaves unanswered its requests for a few
// seconds.
const StartRetry = time.Minute

// startRetry is retry for StartRetry at most; it gives up at once on a
// full store and on replicas the broker cannot place (broker.ErrReplicas),
// and when it gives up it returns the broker's reason, not the deadline's.
func startRetry(ctx context.Context, log logrus.FieldLogger, what string, op func() error) error {
	b := backoff(log, what)
	b.Limit = StartRetry
	b.Permanent = func(err error) bool {
		return broker.StoreFull(err) || errors.Is(err, broker.ErrReplicas) || errors.Is(err, ErrRecord)
	}
	err := broker.Retry(ctx, b, op)
	var re *broker.RetryError
	switch {
	case errors.As(err, &re):
		return fmt.Errorf("%s: %w", what, re.Last)
	case broker.StoreFull(err):
		return fmt.Errorf("%s: %w: %v", what, ErrStoreFull, err)
	}
	return err
}

// setPhase records the run's phase in the run bucket, retrying across a
// broker outage until ctx ends.
func (c *Controller) setPhase(ctx context.Context, p schema.Phase) error {
	now := c.cfg.Now()
	if c.created.IsZero() {
		c.created = now
	}
	c.phase = p
	var failure *schema.Failure
	if p == schema.PhaseFailed {
		failure = c.failure
	}
	objs, cons := c.cfg.Objectives.Record()
	data, err := schema.EncodeRun(&schema.Run{
		Run: c.cfg.Run, Phase: p, Budget: c.cfg.Budget, Space: c.cfg.Space.Name(),
		SpaceYAML: c.cfg.Space.Source(), Seed: *c.cfg.Seed, AckWait: c.cfg.AckWait,
		Init: c.cfg.Init, Pool: c.cfg.Pool, Replace: string(c.cfg.Replace),
		Tournament: c.cfg.Tournament, Margin: c.cfg.Margin, MaxDeliver: c.cfg.MaxDeliver,
		ErrorRetries: c.cfg.ErrorRetries, QuarantineAfter: c.cfg.QuarantineAfter,
		SeedsFrom: c.cfg.SeedsFrom, Seeds: c.cfg.Seeds, Changes: c.changes,
		FailFast: c.cfg.FailFast, FailFastFrom: c.failFrom, MadeUp: c.madeUp, Failure: failure,
		EarlyStop: c.cfg.EarlyStop, Checkpoints: c.cfg.Checkpoints.record(),
		Objectives: objs, Constraints: cons, HVRef: c.cfg.HVRef, Variation: c.cfg.variation(),
		Evaluator: c.cfg.Evaluator, Warnings: c.warnings, Created: c.created, Updated: now,
		Target: c.cfg.Target, Plateau: c.cfg.Plateau, TimeBudget: c.cfg.TimeBudget, Deadline: c.cfg.Deadline,
		StopReason: c.stopReason,
	})
	if err != nil {
		return err
	}
	return retry(ctx, c.log, "record run phase "+string(p), func() error {
		_, err := c.runKV.Put(ctx, c.cfg.Run, data)
		return err
	})
}

// retry calls op until it succeeds or ctx ends, with a warning per
// failure; a full store ends it at once with ErrStoreFull.
func retry(ctx context.Context, log logrus.FieldLogger, what string, op func() error) error {
	b := backoff(log, what)
	b.Permanent = broker.StoreFull
	err := broker.Retry(ctx, b, op)
	var re *broker.RetryError
	switch {
	case errors.As(err, &re):
		return fmt.Errorf("%s: %w", what, re.Stop)
	case err != nil:
		return fmt.Errorf("%s: %w: %v", what, ErrStoreFull, err)
	}
	return nil
}

// backoff is how the controller retries the broker: from 50 ms, since a
// leader election or a reconnect is usually over within a moment, up to
// every 2 s, with a warning per failure.
func backoff(log logrus.FieldLogger, what string) broker.Backoff {
	return broker.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second,
		OnRetry: func(err error, _ time.Duration) { log.WithError(err).Warn(what + " failed; retrying") }}
}

// ErrStoreFull means the broker's store has no room left: the run stops,
// with everything stored so far kept, and can be continued once there is
// room (free disk, or a larger --max-store).
var ErrStoreFull = errors.New("the broker's store is full (free disk space or raise --max-store, then continue the run)")

// waitSlots waits until WaitSlots slots are live, or WaitSlotsTimeout.
func (c *Controller) waitSlots(ctx context.Context) error {
	if c.cfg.WaitSlots > 0 {
		c.awaitSlots(ctx)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return c.setPhase(ctx, schema.PhaseRunning)
}

func (c *Controller) awaitSlots(ctx context.Context) {
	deadline := time.NewTimer(c.cfg.WaitSlotsTimeout)
	defer deadline.Stop()
	// The no-slot alarm ticks here too: with workers started for another
	// run, this wait is where the controller spends WaitSlotsTimeout.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	c.warnNoSlot(ctx, c.cfg.Now()) // starts its clock with the ticker
	c.log.WithField("wait_slots", c.cfg.WaitSlots).Info("waiting for worker slots")
	for live := c.liveSlots(); live < c.cfg.WaitSlots; live = c.liveSlots() {
		select {
		case ev := <-c.presence:
			c.onPresence(ctx, ev)
		case r := <-c.extends:
			c.onExtend(ctx, r)
		case <-tick.C:
			c.warnNoSlot(ctx, c.cfg.Now())
		case <-deadline.C:
			c.log.WithFields(logrus.Fields{"live_slots": live, "wait_slots": c.cfg.WaitSlots}).
				Warn("not every expected slot joined in time; starting with the slots present, more are used as they join")
			return
		case <-ctx.Done():
			return
		}
	}
}

// debugEnabled reports whether log takes debug lines; true when it cannot
// tell.
func debugEnabled(log logrus.FieldLogger) bool {
	switch l := log.(type) {
	case *logrus.Logger:
		return l.IsLevelEnabled(logrus.DebugLevel)
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(logrus.DebugLevel)
	}
	return true
}
