package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// presenceEvent is a presence put or a removal (p nil).
type presenceEvent struct {
	worker string
	p      *schema.Presence
	// at is when a heartbeat read from the bucket was stored, on the
	// controller's clock; zero for one that just arrived.
	at time.Time
}

// stored is when the heartbeat was stored: now for one that just
// arrived.
func (ev presenceEvent) stored(now time.Time) time.Time {
	if ev.at.IsZero() {
		return now
	}
	return ev.at
}

// startWatches starts the results consumer (from the first result), the
// presence watch and the max-deliveries advisory subscription. They stop
// with ctx.
func (c *Controller) startWatches(ctx context.Context) error {
	if err := startRetry(ctx, c.log, "consume results", func() error { return c.consumeResults(ctx) }); err != nil {
		return err
	}
	if err := c.watchPresence(ctx); err != nil {
		return err
	}
	if err := c.watchAlerts(ctx); err != nil {
		return err
	}
	return c.watchLost(ctx)
}

// watchAlerts listens for workers' alerts: a worker whose result the
// broker refuses for lack of room says so, since the controller may have
// nothing to publish and would never find out itself.
func (c *Controller) watchAlerts(ctx context.Context) error {
	sub, err := c.js.Conn().Subscribe(schema.AlertSubject(c.cfg.Run), func(m *nats.Msg) {
		if strings.HasPrefix(string(m.Data), schema.AlertStoreFull) {
			select {
			case c.alerts <- string(m.Data):
			default:
			}
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to alerts: %w", err)
	}
	go func() { <-ctx.Done(); _ = sub.Unsubscribe() }()
	return nil
}

// watchPresence follows the run's presence heartbeats. It subscribes to
// the bucket's subjects with a plain NATS subscription, which the client
// renews by itself across broker restarts, then reads the entries already
// there, in one watch.
func (c *Controller) watchPresence(ctx context.Context) error {
	prefix := "$KV." + schema.PresenceBucket + "." + c.cfg.Run + "."
	sub, err := c.js.Conn().Subscribe(prefix+"*", func(m *nats.Msg) {
		op := m.Header.Get("KV-Operation")
		c.sendPresence(ctx, strings.TrimPrefix(m.Subject, prefix), m.Data, op == "DEL" || op == "PURGE")
	})
	if err != nil {
		return fmt.Errorf("watch presence: %w", err)
	}
	go func() { <-ctx.Done(); _ = sub.Unsubscribe() }()
	var entries []jetstream.KeyValueEntry
	err = startRetry(ctx, c.log, "read bucket "+schema.PresenceBucket, func() (err error) {
		entries, err = broker.LastValuesOf(ctx, c.js, schema.PresenceBucket, c.cfg.Run+".*")
		return err
	})
	if err != nil {
		return err
	}
	skew := c.brokerSkew(ctx)
	go func() {
		for _, e := range entries {
			c.sendPresenceAt(ctx, strings.TrimPrefix(e.Key(), c.cfg.Run+"."), e.Value(), false, e.Created().Add(skew))
		}
	}()
	return nil
}

// brokerSkew is how far the controller's clock is ahead of the broker's,
// which timed the stored heartbeats; 0 when the broker does not say.
func (c *Controller) brokerSkew(ctx context.Context) time.Duration {
	kv, err := c.js.KeyValue(ctx, schema.PresenceBucket)
	if err != nil {
		return 0
	}
	if bt, ok := broker.BrokerTime(ctx, kv); ok {
		return c.cfg.Now().Sub(bt)
	}
	return 0
}

// sendPresence decodes one presence entry and hands it to the loop.
func (c *Controller) sendPresence(ctx context.Context, worker string, data []byte, deleted bool) {
	c.sendPresenceAt(ctx, worker, data, deleted, time.Time{})
}

// sendPresenceAt is sendPresence for a heartbeat stored at at (zero: now).
func (c *Controller) sendPresenceAt(ctx context.Context, worker string, data []byte, deleted bool, at time.Time) {
	ev := presenceEvent{worker: worker, at: at}
	if !deleted {
		p, err := schema.DecodePresence(data)
		if err != nil {
			c.log.WithError(err).WithField("worker", worker).Warn("ignoring a malformed presence heartbeat")
			return
		}
		ev.p = p
	}
	select {
	case c.presence <- ev:
	case <-ctx.Done():
	}
}

// maxDeliveries is the part of the JetStream max-deliveries advisory used.
type maxDeliveries struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

func (c *Controller) watchLost(ctx context.Context) error {
	subject := fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", schema.DesignStream, schema.ConsumerName(c.cfg.Run))
	sub, err := c.js.Conn().Subscribe(subject, func(m *nats.Msg) {
		var a maxDeliveries
		if err := json.Unmarshal(m.Data, &a); err != nil || a.StreamSeq == 0 {
			c.log.WithField("advisory", string(m.Data)).Warn("ignoring a malformed max-deliveries advisory")
			return
		}
		select {
		case c.lost <- a.StreamSeq:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to max-deliveries advisories: %w", err)
	}
	go func() { <-ctx.Done(); _ = sub.Unsubscribe() }()
	return nil
}

// recordLost records a design that reached its redelivery limit as lost,
// then deletes it from the work queue, where it would otherwise stay.
func (c *Controller) recordLost(ctx context.Context, streamSeq uint64) error {
	raw, err := c.designs.GetMsg(ctx, streamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // already acked or deleted
	}
	if err != nil {
		return fmt.Errorf("read lost design at stream seq %d: %w", streamSeq, err)
	}
	return c.recordLostMsg(ctx, raw)
}

// sweepStuck records as lost the designs that reached the redelivery limit
// while nobody listened for the advisory (the controller was down): the
// work queue keeps them but never delivers them again. When the consumer
// has nothing pending delivery or ack, every design of the run still on
// the queue is such a one.
func (c *Controller) sweepStuck(ctx context.Context) error {
	info, err := c.cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer info: %w", err)
	}
	if info.NumPending > 0 || info.NumAckPending > 0 {
		return nil
	}
	subject := schema.DesignSubject(c.cfg.Run)
	for seq := uint64(1); ; {
		raw, err := c.designs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the work queue: %w", err)
		}
		if err := c.recordLostMsg(ctx, raw); err != nil {
			return err
		}
		seq = raw.Sequence + 1
	}
}

func (c *Controller) recordLostMsg(ctx context.Context, raw *jetstream.RawStreamMsg) error {
	streamSeq := raw.Sequence
	d, err := schema.DecodeDesign(raw.Data)
	if err != nil {
		c.log.WithError(err).WithField("stream_seq", streamSeq).Error("a malformed design reached its redelivery limit; deleting it")
		return c.designs.DeleteMsg(ctx, streamSeq)
	}
	if !c.fold.Has(d.Seq) {
		r := &schema.Result{Run: d.Run, DesignID: d.ID, Design: *d, Status: schema.StatusLost,
			Fitness: schema.InfeasibleFitness, Attempt: c.cfg.MaxDeliver,
			Error: fmt.Sprintf("redelivery limit %d reached: every attempt ended without a result", c.cfg.MaxDeliver)}
		if err := c.publishResult(ctx, r); err != nil {
			return err
		}
		c.log.WithField("design", d.ID).Warn("design lost: redelivery limit reached")
	}
	return c.designs.DeleteMsg(ctx, streamSeq)
}

func (c *Controller) publishResult(ctx context.Context, r *schema.Result) error {
	data, err := schema.EncodeResult(r)
	if err != nil {
		return err
	}
	_, err = c.js.Publish(ctx, schema.ResultSubject(r.Run), data, jetstream.WithMsgID(schema.AttemptMsgID(r.DesignID, r.Design.Retry, 0)))
	if err != nil {
		return fmt.Errorf("record result of %s: %w", r.DesignID, err)
	}
	return nil
}
