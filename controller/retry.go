package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// A failed attempt that the tally judges Retried leaves its design in
// flight: the controller publishes it again, the same design (ID, seq,
// genome) with Retry set to the number of failures so far and the
// Nats-Msg-Id schema.DesignMsgID gives it, so that each retry is stored
// once. Which attempts are retried is the tally's to say, from the stream
// alone; where the retry should not run (AvoidHosts, AvoidWorkers) is a
// live choice made from the workers' heartbeats, and it is recorded in
// the retry itself, on the queue and echoed in its result.

// pendingRetry is a design waiting for, or out on, its next attempt.
type pendingRetry struct {
	design    schema.Design // as the failed attempt echoed it
	retry     int           // the retry to publish: the failures so far
	published bool
}

// noteRetried records that r, judged Retried, asks for its design's next
// attempt, which the next top-up publishes.
func (c *Controller) noteRetried(r *schema.Result) {
	f := c.fold.Tally().Failing(r.Design.Seq)
	c.retries[r.Design.Seq] = &pendingRetry{design: r.Design, retry: f.N}
	if !c.live {
		return
	}
	c.log.WithFields(logrus.Fields{"design": r.DesignID, "status": r.Status, "worker": r.Worker, "host": r.Host,
		"slot": r.Slot, "gpu": r.GPU, "attempt": r.Attempt, "retry": f.N, "error": runstate.ErrorGist(r.Error)}).
		Info("design failed; retrying it on another worker")
}

// publishRetries publishes every retry not yet published, in seq order.
func (c *Controller) publishRetries(ctx context.Context) error {
	var seqs []uint64
	for seq, p := range c.retries {
		if !p.published {
			seqs = append(seqs, seq)
		}
	}
	if len(seqs) == 0 {
		return nil
	}
	slices.Sort(seqs)
	batch := make([]*schema.Design, len(seqs))
	for i, seq := range seqs {
		batch[i] = c.retryDesign(seq)
	}
	if err := c.publish(ctx, batch); err != nil {
		return err
	}
	for _, seq := range seqs {
		c.retries[seq].published = true
	}
	return nil
}

// retryDesign is the design of seq's next attempt.
func (c *Controller) retryDesign(seq uint64) *schema.Design {
	p := c.retries[seq]
	d := p.design
	d.V, d.Retry = schema.Version, p.retry
	d.AvoidHosts, d.AvoidWorkers = c.avoid(c.fold.Tally().Failing(seq))
	return &d
}

// avoid says where a retry should not run: on the hosts where the design
// failed, when a live worker with a free-to-feed slot is on another host;
// else on the workers where it failed, when another such worker is live;
// else anywhere goes, since a retry that no slot takes would wait for
// ever. Two workers on one host (one per GPU group, say) share what breaks
// a host, so another host is the better bet.
func (c *Controller) avoid(f *runstate.Failures) (hosts, workers []string) {
	if f == nil {
		return nil, nil
	}
	now := c.cfg.Now()
	otherHost, otherWorker := false, false
	for id, w := range c.slots.workers {
		if !w.alive(now) || c.slots.usable(id, w) == 0 {
			continue
		}
		otherHost = otherHost || !slices.Contains(f.Hosts, w.p.Host)
		otherWorker = otherWorker || !slices.Contains(f.Workers, id)
	}
	// Slots the run expects that have not joined yet are on other hosts
	// as far as anyone knows: a design that failed on the first node up
	// waits for them (a hand-back of worker.AvoidDelay) rather than fail
	// there again.
	otherHost = otherHost || c.othersComing()
	switch {
	case otherHost && len(f.Hosts) > 0:
		return slices.Clone(f.Hosts), nil
	case otherWorker && len(f.Workers) > 0:
		return nil, slices.Clone(f.Workers)
	}
	return nil, nil
}

// queueState is what the work queue holds of the run when a controller
// starts: the highest design seq on it, and which retries.
type queueState struct {
	last    uint64
	retries map[retryKey]bool
	// keys are the genome keys of the designs on the queue, by seq, in a
	// novel run: the designs in flight, which its children avoid (see
	// pending).
	keys map[uint64]uint64
}

type retryKey struct {
	seq   uint64
	retry int
}

// readQueue reads the work queue before the results are replayed. Designs
// are stored in seq order, retries after them: the last message tells the
// highest seq unless it is a retry, and retries can be on the queue only
// in a run that retries. Then every design of the run on the queue is
// read, one request each: the queue holds the designs in flight, not the
// run's history.
func (c *Controller) readQueue(ctx context.Context) (queueState, error) {
	q := queueState{retries: map[retryKey]bool{}, keys: map[uint64]uint64{}}
	subject := schema.DesignSubject(c.cfg.Run)
	raw, err := c.designs.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return q, nil
	}
	if err != nil {
		return q, fmt.Errorf("read the work queue: %w", err)
	}
	d, err := schema.DecodeDesign(raw.Data)
	if d == nil {
		return q, fmt.Errorf("read the work queue: last design: %w", err)
	}
	q.last = d.Seq
	if d.Retry == 0 && c.cfg.Rules().ErrorRetries == 0 && !c.novel() {
		return q, nil
	}
	return q, c.eachQueued(ctx, func(d *schema.Design) {
		q.last = max(q.last, d.Seq)
		if d.Retry > 0 {
			q.retries[retryKey{d.Seq, d.Retry}] = true
		}
		if c.novel() {
			q.keys[d.Seq] = c.key(d.Genome)
		}
	})
}

// eachQueued calls fn with every design of the run on the work queue, in
// stream order, one request each; what does not decode is skipped.
func (c *Controller) eachQueued(ctx context.Context, fn func(*schema.Design)) error {
	subject := schema.DesignSubject(c.cfg.Run)
	for seq := uint64(1); ; {
		raw, err := c.designs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the work queue: %w", err)
		}
		if d, _ := schema.DecodeDesign(raw.Data); d != nil {
			fn(d)
		}
		seq = raw.Sequence + 1
	}
}

// pendQueued, before replay, notes as pending the genomes of the designs
// on the queue, once a seq (a design and its retry may both be on it), so
// that a restarted novel run's children avoid what is in flight as its
// first controller's did. Replay unpends each of them whose result it
// counts, as the loop does live: what stays pending is what is in flight.
func (c *Controller) pendQueued(q queueState) {
	for _, k := range q.keys {
		c.pend(k)
	}
}

// restoreRetries, after replay, marks as published the outstanding
// retries that were on the queue before the results were read: the next
// top-up publishes the others. A retry missing from the queue then was
// never stored (its controller stopped first), or its attempt ended and
// its result, stored before its ack, was replayed, which would have moved
// its design on to a later retry or to a counted result. So nothing is
// published twice, whatever the stream's duplicate window; within it,
// the Nats-Msg-Id would drop a second copy anyway.
func (c *Controller) restoreRetries(q queueState) {
	for seq, p := range c.retries {
		p.published = q.retries[retryKey{seq, p.retry}]
	}
	if n := len(c.retries); n > 0 {
		c.log.WithFields(logrus.Fields{"retries": n, "on_queue": len(q.retries)}).
			Info("designs awaiting a retry after failed attempts; publishing those not on the queue")
	}
}
