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

	fold       *Fold
	published  uint64 // designs 1..published are on the queue or done
	slots      *slotTracker
	cons       jetstream.Consumer
	designs    jetstream.Stream
	runKV      jetstream.KeyValue
	phase      schema.Phase
	created    time.Time
	firstPub   time.Time
	lastResult time.Time
	replayed   int // results folded before this controller published

	results  chan resultMsg
	presence chan presenceEvent
	lost     chan uint64
	lastLog  time.Time
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
		fold:     NewFold(cfg.Init, cfg.Pool, cfg.Replace),
		slots:    newSlotTracker(),
		results:  make(chan resultMsg, 4096),
		presence: make(chan presenceEvent, 1024),
		lost:     make(chan uint64, 64),
	}, nil
}

// Run declares the run on the broker, replays its results, and runs the
// search until Budget designs have a terminal result or ctx ends.
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
	s := c.Summary()
	c.log.WithFields(s.Fields()).Info("run done")
	return s, nil
}

func (c *Controller) declare(ctx context.Context) error {
	if err := broker.Declare(ctx, c.js); err != nil {
		return err
	}
	cons, err := broker.DeclareConsumer(ctx, c.js, c.cfg.Run, broker.ConsumerConfig{
		Slots: c.cfg.ExpectSlots, AckWait: c.cfg.AckWait, MaxDeliver: c.cfg.MaxDeliver,
	})
	if err != nil {
		return err
	}
	c.cons = cons
	if c.designs, err = c.js.Stream(ctx, schema.DesignStream); err != nil {
		return fmt.Errorf("open stream %s: %w", schema.DesignStream, err)
	}
	if c.runKV, err = c.js.KeyValue(ctx, schema.RunBucket); err != nil {
		return fmt.Errorf("open bucket %s: %w", schema.RunBucket, err)
	}
	info := cons.CachedInfo()
	c.log.WithFields(logrus.Fields{"consumer": info.Name, "max_waiting": info.Config.MaxWaiting,
		"max_ack_pending": info.Config.MaxAckPending, "ack_wait": info.Config.AckWait,
		"max_deliver": info.Config.MaxDeliver}).Info("work queue ready")
	return nil
}

// setPhase records the run's phase in the run bucket.
func (c *Controller) setPhase(ctx context.Context, p schema.Phase) error {
	now := c.cfg.Now()
	if c.created.IsZero() {
		c.created = now
	}
	c.phase = p
	data, err := schema.EncodeRun(&schema.Run{
		Run: c.cfg.Run, Phase: p, Budget: c.cfg.Budget, Space: c.cfg.Space.Name(),
		Seed: c.cfg.Seed, AckWait: c.cfg.AckWait, Created: c.created, Updated: now,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.runKV.Put(ctx, c.cfg.Run, data); err != nil {
		return fmt.Errorf("record run phase %s: %w", p, err)
	}
	return nil
}

// waitSlots waits until WaitSlots slots are live, or WaitSlotsTimeout.
func (c *Controller) waitSlots(ctx context.Context) error {
	if err := c.setPhase(ctx, schema.PhaseStarting); err != nil {
		return err
	}
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
