package controller

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/evoq/evoq/checkpoint"
	"github.com/sirupsen/logrus"
)

// The store is the rule, whatever the results claim. A worker's upload
// can succeed while its acknowledgement is lost (the result then says
// checkpoint_error, or nothing, and the tracker never hears of the
// object); a deletion can fail while the broker is out. So the controller
// lists the store every CkptSweepEvery and once more at the end of the
// run, and deletes every checkpoint the rule does not keep: one of a
// design with a terminal result that is neither in the pool, nor the
// parent of a design in flight, nor (Keep best) the best. A design still
// without a terminal result keeps its checkpoint: its result may yet come
// and count. Failed deletions are retried, with a warning each time, and
// the summary reports what the store lists at the end, not the tracker's
// belief.

// CkptSweepEvery is how often the controller lists the checkpoint store
// during a run.
const CkptSweepEvery = 30 * time.Second

// FinalDeleteWait bounds the retries of the deletions due at the end of a
// run: a broker that is out longer leaves them to the run's next
// controller, and the summary says how many remain.
const FinalDeleteWait = 30 * time.Second

// sweep lists the store and queues the deletion of every checkpoint the
// rule does not keep; open reports whether a design has no terminal
// result yet. It returns how many it queued.
func (t *ckptTracker) sweep(ctx context.Context, open func(id string) bool) (int, error) {
	t.mu.Lock()
	t.gone = map[string]bool{}
	t.mu.Unlock()
	refs, err := t.store.List(ctx)
	// What was deleted during the listing, is being deleted, or waits to
	// be: the listing may name it, and it is not queued again.
	t.mu.Lock()
	pending := t.gone
	t.gone = nil
	for _, id := range append(t.queue, t.failed...) {
		pending[id] = true
	}
	for id := range t.deleting {
		pending[id] = true
	}
	t.mu.Unlock()
	if err != nil {
		return 0, err
	}
	queued := 0
	for _, r := range refs {
		id := r.Design
		if pending[id] {
			continue // its deletion is under way, or retried
		}
		if t.needed(id) || open(id) {
			t.stored[id] = true
			continue
		}
		t.stored[id] = true // drop deletes only what it believes stored
		t.drop(id, true)
		queued++
	}
	return queued, nil
}

// sweepCheckpoints runs the sweep with the fold's view of which designs
// are open, and warns of what it found that the results did not say.
func (c *Controller) sweepCheckpoints(ctx context.Context) {
	if c.ckpt == nil || !c.live {
		return
	}
	c.lastCkptSweep = c.cfg.Now()
	lctx, cancel := context.WithTimeout(ctx, DeleteWait)
	defer cancel()
	n, err := c.ckpt.sweep(lctx, c.designOpen)
	switch {
	case err != nil:
		c.log.WithError(err).Warn("listing the checkpoint store failed; the next sweep tries again")
	case n > 0:
		c.log.WithField("orphans", n).Info("checkpoint store swept: deleting checkpoints the results did not account for")
	}
	// What writers left unfinished, during the run too: the chunks of an
	// upload whose worker died, or whose commit was refused (a design
	// evaluated twice stores its checkpoint once), and partial files.
	left, err := c.ckpt.store.Sweep(lctx)
	switch {
	case err != nil:
		c.log.WithError(err).Warn("sweeping the checkpoint store for what writers left failed; the next sweep tries again")
	case left > 0:
		c.log.WithField("leftovers", left).Info("checkpoint store swept: purged uploads never committed")
	}
}

// designOpen reports whether design id of this run has no terminal result
// yet: published and in flight, awaiting a retry, or not yet published. An
// ID that is not of this run's form is no design of its: not open.
func (c *Controller) designOpen(id string) bool {
	seq, ok := seqOf(c.cfg.Run, id)
	if !ok {
		return false
	}
	return !c.fold.Has(seq)
}

// seqOf is the sequence number of design id of run (schema.DesignID).
func seqOf(run, id string) (uint64, bool) {
	s, ok := strings.CutPrefix(id, run+"-")
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	return seq, err == nil && seq > 0
}

// retryDeletes deletes what failed before, until none is left or wait
// ends; it returns how many are left.
func (t *ckptTracker) retryDeletes(ctx context.Context, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		t.mu.Lock()
		t.queue, t.failed = append(t.queue, t.failed...), nil
		t.mu.Unlock()
		t.flush(ctx)
		t.mu.Lock()
		left := len(t.failed)
		t.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			return left
		}
		select {
		case <-ctx.Done():
			return left
		case <-time.After(pause):
		}
	}
}

// measure lists the store once the run's deletions are done, for the
// summary: what it holds, not what the controller believes.
func (t *ckptTracker) measure(ctx context.Context, log logrus.FieldLogger) {
	ctx, cancel := context.WithTimeout(ctx, DeleteWait)
	defer cancel()
	u, err := checkpoint.Measure(ctx, t.store)
	if err != nil {
		log.WithError(err).Warn("listing the checkpoint store at the end of the run failed: the summary's count is the controller's belief")
		return
	}
	t.listed = &u
}

// settle, once the run's deletions are done, lists the store again and
// deletes at once what the rule does not keep, until a listing finds
// nothing to delete (at most settleRounds listings, a second apart): an
// upload that a worker was finishing as the run ended lands after the
// last sweep, and would outlive the run. Then, commits having ended, it
// purges once the chunks no object claims. It returns how many
// checkpoints it deleted.
func (t *ckptTracker) settle(ctx context.Context, open func(id string) bool) int {
	deleted := 0
	for round := range settleRounds {
		if round > 0 {
			select {
			case <-ctx.Done():
				return deleted
			case <-time.After(time.Second):
			}
		}
		lctx, cancel := context.WithTimeout(ctx, DeleteWait)
		refs, err := t.store.List(lctx)
		n := 0
		for _, r := range refs {
			if err != nil || t.needed(r.Design) || open(r.Design) {
				continue
			}
			if t.store.Delete(lctx, r.Design) == nil {
				n++
			}
		}
		cancel()
		deleted += n
		if err != nil || n == 0 {
			break
		}
	}
	t.mu.Lock()
	t.deleted += deleted
	t.mu.Unlock()
	// Commits have ended (stopServing): the chunks of an upload that
	// was not committed are purged now, or nobody would.
	lctx, cancel := context.WithTimeout(ctx, DeleteWait)
	defer cancel()
	switch left, err := t.store.Sweep(lctx); {
	case err != nil:
		t.log.WithError(err).Warn("sweeping the checkpoint store for uploads never committed failed as the run ended; they stay until the store is removed")
	case left > 0:
		t.log.WithField("leftovers", left).Info("checkpoint store swept as the run ended: purged uploads never committed")
	}
	return deleted
}

// settleRounds bounds the listings of settle.
const settleRounds = 3
