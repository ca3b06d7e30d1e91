package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// EveryDefault is how often the follower reads the run's record, lease and
// heartbeats and publishes a snapshot.
const EveryDefault = time.Second

// Follower reads one run's streams into a Model and publishes its
// snapshots to a Hub.
//
// The results (unless Fed) and reports are followed with nats.go ordered
// consumers:
// each is the follower's own, in memory, recreated from the next sequence
// when it stalls (a broker restart), and removed by the broker once the
// follower is gone (InactiveThreshold), so a reader's credential, which
// may not delete consumers, leaves nothing behind. The record, lease and
// heartbeats are small and read once per tick.
type Follower struct {
	JS    jetstream.JetStream
	RunID string
	Hub   *Hub
	// Every defaults to EveryDefault.
	Every time.Duration
	Log   logrus.FieldLogger
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// Fed says that the results come from the controller of this process
	// (Dashboard.Feed), not from the stream. The reports are still read
	// from theirs.
	Fed   bool
	model *Model
}

// Model is the follower's model, once Run has read the run's record.
func (f *Follower) Model() *Model { return f.model }

// Run follows the run until ctx ends.
func (f *Follower) Run(ctx context.Context, ready ...chan<- *Model) error {
	if f.Every <= 0 {
		f.Every = EveryDefault
	}
	if f.Now == nil {
		f.Now = time.Now
	}
	r := history.FromJS(f.JS)
	ri, err := f.waitRun(ctx, r)
	if err != nil {
		return err
	}
	m, err := NewModel(ri.ID, ri.Run)
	if err != nil {
		return err
	}
	f.model = m
	for _, r := range ready {
		r <- m
	}
	if !f.Fed {
		stopRes, err := f.follow(ctx, schema.ResultStream, schema.ResultSubject(ri.ID), func(seq uint64, at time.Time, data []byte) {
			res, err := schema.DecodeResult(data)
			m.Result(seq, at, res, err)
		})
		if err != nil {
			return err
		}
		defer stopRes()
	}
	stopRep, err := f.follow(ctx, schema.ReportStream, schema.ReportSubject(ri.ID), func(_ uint64, _ time.Time, data []byte) {
		if rep, err := schema.DecodeReport(data); err == nil {
			m.Report(rep)
		}
	})
	if err != nil {
		// The results make the page; a broker or credential that cannot
		// read the reports costs only the learning curves.
		f.Log.WithError(err).Warn("dashboard: intermediate reports not followed, no learning curves")
	} else {
		defer stopRep()
	}
	t := time.NewTicker(f.Every)
	defer t.Stop()
	for {
		f.tick(ctx, r, ri.ID)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// waitRun reads the run's record; a run its controller has yet to
// create (the dashboard of `evoq run` starts with it) is waited for.
func (f *Follower) waitRun(ctx context.Context, r *history.Reader) (history.RunInfo, error) {
	for {
		ri, err := r.Pick(ctx, f.RunID)
		if err == nil {
			return ri, nil
		}
		if !errors.Is(err, history.ErrNoRun) && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return ri, fmt.Errorf("dashboard: run %s: %w", f.RunID, err)
		}
		select {
		case <-ctx.Done():
			return ri, ctx.Err()
		case <-time.After(f.Every):
		}
	}
}

// follow hands fn every message of subject on stream, in stream order,
// until the returned function is called.
func (f *Follower) follow(ctx context.Context, stream, subject string, fn func(uint64, time.Time, []byte)) (func(), error) {
	c, err := f.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject},
		InactiveThreshold: broker.SnapshotIdle})
	if err != nil {
		return nil, fmt.Errorf("dashboard: follow %s: %w", subject, err)
	}
	cc, err := c.Consume(func(msg jetstream.Msg) {
		meta, err := msg.Metadata()
		if err != nil {
			return
		}
		fn(meta.Sequence.Stream, meta.Timestamp, msg.Data())
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, context.Canceled) {
			f.Log.WithError(err).Debug("dashboard: follow " + subject)
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("dashboard: follow %s: %w", subject, err)
	}
	return cc.Stop, nil
}

// tick reads the run's record, lease and heartbeats, and publishes a
// snapshot.
func (f *Follower) tick(ctx context.Context, r *history.Reader, run string) {
	m := f.model
	if ri, err := r.Pick(ctx, run); err == nil {
		m.Record(ri.Run)
	}
	lv, err := broker.ReadLease(ctx, f.JS, run)
	switch {
	case err != nil:
		m.Lease("", "", false, false)
	case lv == nil || lv.Lease == nil:
		m.Lease("", "", false, true)
	default:
		m.Lease(lv.Lease.Holder, lv.Lease.Host, lv.Live(), true)
	}
	if c, err := f.JS.Consumer(ctx, schema.DesignStream, schema.ConsumerName(run)); err == nil {
		if info, err := c.Info(ctx); err == nil {
			m.Queue(int(info.NumPending))
		}
	}
	now := f.Now()
	if ps, err := r.Presence(ctx, run); err == nil {
		pres := make([]schema.Presence, len(ps))
		stored := make([]time.Time, len(ps))
		for i, p := range ps {
			pres[i], stored[i] = p.Presence, p.Stored
		}
		m.Workers(pres, stored, now)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The charts are SVG: escaped for HTML, each < would cost six bytes,
	// on every page, every second.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m.Snapshot(now)); err != nil {
		f.Log.WithError(err).Warn("dashboard: snapshot not encoded")
		return
	}
	f.Hub.Publish(bytes.TrimSpace(buf.Bytes()))
}
