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
	"time"

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
	// debug is whether the log takes debug lines: one per result is only
	// built when it does.
	debug bool

	fold       *Fold
	published  uint64 // designs 1..published are on the queue or done
	slots      *slotTracker
	cons       jetstream.Consumer
	designs    jetstream.Stream
	runKV      jetstream.KeyValue
	phase      schema.Phase
	created    time.Time
	liveSince  time.Time // first publish, or end of replay if designs were already out
	lastResult time.Time
	replayed   int  // results folded during replay, before liveSince
	live       bool // replay is over: results beyond published are foreign
	idle       idleSince
	lastAlarm  time.Time
	limitsFor  int // live slots the consumer's limits were last checked for

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
}

// New checks cfg and returns a controller; Run runs the search.
func New(js jetstream.JetStream, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Controller{
		js:       js,
		cfg:      cfg,
		log:      cfg.Logger.WithField("run", cfg.Run),
		debug:    debugEnabled(cfg.Logger),
		fold:     NewFold(cfg.Init, cfg.Pool, cfg.Replace),
		slots:    newSlotTracker(),
		idle:     idleSince{},
		results:  make(chan resultMsg, 4096),
		presence: make(chan presenceEvent, 1024),
		lost:     make(chan uint64, 64),
		alerts:   make(chan string, 1),
	}, nil
}

// Run declares the run on the broker, replays its results, and runs the
// search until Budget designs have a terminal result or ctx ends. It stops
// reading the results stream before it returns, so the caller may close
// the connection at once.
func (c *Controller) Run(ctx context.Context) (*Summary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.log.WithFields(c.cfg.Fields()).Info("controller starting")
	if err := c.declare(ctx); err != nil {
		return nil, err
	}
	if err := c.startWatches(ctx); err != nil {
		return nil, err
	}
	defer func() { c.stopResults() }() // the consumer in use then: a restart replaces it
	if err := c.replay(ctx); err != nil {
		return nil, err
	}
	if err := c.waitSlots(ctx); err != nil {
		return nil, err
	}
	if err := c.loop(ctx); err != nil {
		return nil, err
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

func (c *Controller) declare(ctx context.Context) error {
	err := startRetry(ctx, c.log, "declare the streams and buckets", func() error {
		return broker.Declare(ctx, c.js, broker.WithReplicas(c.cfg.Replicas))
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

// StartRetry bounds the retries of the controller's first requests to the
// broker: a JetStream cluster that is starting, or electing new leaders
// after losing a node, refuses or leaves unanswered its requests for a few
// seconds.
const StartRetry = time.Minute

// startRetry is retry for StartRetry at most; it gives up at once on a
// replica count that does not fit the broker.
func startRetry(ctx context.Context, log logrus.FieldLogger, what string, op func() error) error {
	ctx, cancel := context.WithTimeout(ctx, StartRetry)
	defer cancel()
	var last error
	err := retry(ctx, log, what, func() error {
		last = op()
		if errors.Is(last, broker.ErrReplicas) {
			return nil
		}
		return last
	})
	switch {
	case errors.Is(last, broker.ErrReplicas):
		return last
	case err != nil && last != nil && !errors.Is(err, ErrStoreFull):
		return fmt.Errorf("%s: %w", what, last) // the broker's reason, not the deadline's
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
	data, err := schema.EncodeRun(&schema.Run{
		Run: c.cfg.Run, Phase: p, Budget: c.cfg.Budget, Space: c.cfg.Space.Name(),
		SpaceYAML: c.cfg.Space.Source(), Seed: c.cfg.Seed, AckWait: c.cfg.AckWait,
		Init: c.cfg.Init, Pool: c.cfg.Pool, Replace: string(c.cfg.Replace),
		Created: c.created, Updated: now,
	})
	if err != nil {
		return err
	}
	return retry(ctx, c.log, "record run phase "+string(p), func() error {
		_, err := c.runKV.Put(ctx, c.cfg.Run, data)
		return err
	})
}

// retry calls op until it succeeds or ctx ends, backing off to 2 s and
// warning on each failure. A full store is not retried.
func retry(ctx context.Context, log logrus.FieldLogger, what string, op func() error) error {
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := op()
		switch {
		case err == nil:
			return nil
		case broker.StoreFull(err):
			return fmt.Errorf("%s: %w: %v", what, ErrStoreFull, err)
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		log.WithError(err).Warn(what + " failed; retrying")
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(delay):
		}
	}
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
	c.log.WithField("wait_slots", c.cfg.WaitSlots).Info("waiting for worker slots")
	for live := c.liveSlots(); live < c.cfg.WaitSlots; live = c.liveSlots() {
		select {
		case ev := <-c.presence:
			c.onPresence(ctx, ev)
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
