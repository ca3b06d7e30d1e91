package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// resultMsg is one message of the results stream, decoded or not.
type resultMsg struct {
	res     *schema.Result
	err     error
	pending uint64 // messages still to come on the run's subject
	seq     uint64 // stream sequence
	gen     int    // the consumer that read it (see restartResults)
}

// ResultsStall is how long the controller waits, with designs in flight and
// no result read, before it asks the broker whether results are waiting
// unread; if they are, it restarts its consumer of the results stream.
//
// The consumer is an ordered consumer: one copy, held by one node of a
// cluster. When that node dies the client recreates it under the same
// name, and if the cluster had placed the new one on the dead node before
// it noticed the death, the client waits for it until the node returns,
// while the results pile up unread. A consumer made afresh is placed
// again, on a live node.
const ResultsStall = 5 * time.Second

// consumeResults reads the run's results, from the first or from the one
// after the last read, into c.results.
func (c *Controller) consumeResults(ctx context.Context) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schema.ResultSubject(c.cfg.Run)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if c.resultsSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, c.resultsSeq+1
	}
	cons, err := c.js.OrderedConsumer(ctx, schema.ResultStream, cfg)
	if err != nil {
		return fmt.Errorf("consume results: %w", err)
	}
	if c.resultsAt.IsZero() {
		// A stall is counted from when reading began: before the first
		// result, the time of the last one read is none.
		c.resultsAt = c.cfg.Now()
	}
	gen := c.resultsGen
	// stopped is set before the consumer is stopped on purpose (the run is
	// over, or a new consumer replaces it): what it reports after that,
	// such as the connection its owner closes next, is no news.
	var stopped atomic.Bool
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		m := resultMsg{gen: gen}
		m.res, m.err = schema.DecodeResult(msg.Data())
		if meta, err := msg.Metadata(); err == nil {
			m.pending, m.seq = meta.NumPending, meta.Sequence.Stream
		}
		select {
		case c.results <- m:
		case <-ctx.Done():
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if stopped.Load() || ctx.Err() != nil {
			return
		}
		c.log.WithError(err).Warn("reading the results stream: the consumer restarts from the last result read")
	}))
	if err != nil {
		return fmt.Errorf("consume results: %w", err)
	}
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { stopped.Store(true); cc.Stop(); close(done) }) }
	c.stopResults = stop
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-done:
		}
	}()
	return nil
}

// current reports whether m comes from the consumer now reading, and
// remembers how far it has read.
func (c *Controller) current(m resultMsg) bool {
	if m.gen != c.resultsGen {
		return false // read by a consumer since replaced: the new one reads it again
	}
	c.resultsAt = c.cfg.Now()
	if m.seq > 0 {
		c.resultsSeq = m.seq
	}
	return true
}

// checkResults restarts the consumer of the results stream when results
// wait unread (see ResultsStall).
func (c *Controller) checkResults(ctx context.Context) {
	now := c.cfg.Now()
	if c.InFlight() == 0 || len(c.results) > 0 || now.Sub(c.resultsAt) < ResultsStall || now.Sub(c.resultsCheck) < ResultsStall {
		return
	}
	c.resultsCheck = now
	last, err := c.lastResultSeq(ctx)
	if err != nil || last <= c.resultsSeq {
		return // the broker cannot say, or nothing waits: the workers are busy
	}
	c.log.WithFields(logrus.Fields{"read": c.resultsSeq, "stored": last, "quiet_for": now.Sub(c.resultsAt).Round(time.Second)}).
		Warn("results wait unread; restarting the consumer of the results stream")
	c.stopResults()
	c.resultsGen++
	if err := c.consumeResults(ctx); err != nil {
		c.log.WithError(err).Warn("restarting the consumer of the results stream failed; retrying")
		c.stopResults = func() {}
	}
}

// lastResultSeq is the stream sequence of the run's last stored result.
func (c *Controller) lastResultSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.js.Stream(ctx, schema.ResultStream)
	if err != nil {
		return 0, err
	}
	raw, err := st.GetLastMsgForSubject(ctx, schema.ResultSubject(c.cfg.Run))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return raw.Sequence, nil
}
