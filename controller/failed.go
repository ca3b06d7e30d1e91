package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// judge runs the fail-fast check on a result just applied to the fold.
func (c *Controller) judge(m resultMsg, v runstate.Verdict) {
	if c.failure != nil {
		return
	}
	spent := c.fold.Terminal() >= c.cfg.Budget
	c.failFast.Observe(m.seq, m.res, v, spent)
	c.decideFailure(spent)
}

// decideFailure acts on a held fail-fast verdict once every live slot has
// failed in the window too, or the budget is spent (see FailFast.Observe):
// a broken node that fails at once must not fail a run whose healthy slots
// are still training their first designs. Nor must it fail a run whose
// other nodes have not joined yet: on an allocation the nodes start
// seconds apart. So failures from one host decide only once the slots the
// run expects (ExpectSlots, WaitSlots) are live, or JoinGrace after the
// run went live; until then the broken node is left to quarantine, and
// its failed designs are retried elsewhere (see avoid). While the results
// stream is replayed nothing is decided: the slots live now are known
// only after.
func (c *Controller) decideFailure(spent bool) {
	h := c.failFast.Held()
	if h == nil || c.failure != nil {
		return
	}
	if !spent && (!c.live || !(c.everyLiveSlotFailed() || c.heldAway()) || (c.failFast.Hosts() < 2 && c.othersComing())) {
		return
	}
	c.failure = h
}

// heldAway reports whether no slot is live because every slot that came
// failed its first designs and is no longer fed (see holdEarly): once the
// others are past waiting for, that is every slot there is failing.
func (c *Controller) heldAway() bool { return len(c.heldEarly) > 0 && c.liveSlots() == 0 }

// othersComing reports whether slots the run expects have not joined yet
// and the grace for them is not over.
func (c *Controller) othersComing() bool {
	return c.liveSlots() < c.expectedSlots() && c.cfg.Now().Sub(c.liveSince) < c.cfg.JoinGrace
}

// expectedSlots are the slots the run was told to expect.
func (c *Controller) expectedSlots() int { return max(c.cfg.ExpectSlots, c.cfg.WaitSlots) }

// everyLiveSlotFailed reports whether there is a live slot, and every
// live slot that takes designs has a failed attempt in the fail-fast
// window.
func (c *Controller) everyLiveSlotFailed() bool {
	n := 0
	now := c.cfg.Now()
	for id, w := range c.slots.workers {
		if !w.alive(now) {
			continue
		}
		for _, slot := range c.slots.usableSlots(id, w) {
			n++
			if !c.failFast.FailedOn(id, slot) {
				return false
			}
		}
	}
	return n > 0
}

// fail ends a run whose first attempts all failed: it records phase failed
// with the verdict, so that workers leave and the run's record says why,
// and returns a *FailedError.
func (c *Controller) fail(ctx context.Context) error {
	f := c.failure
	c.log.WithFields(logrus.Fields{"attempts": f.Attempts, "stream_seq": f.StreamSeq, "error": f.Error,
		"with_this_error": f.Count}).Error("the run's first evaluations all failed; stopping the run")
	c.stopReason = schema.StopFailed
	if err := c.setPhase(ctx, schema.PhaseFailed); err != nil {
		return fmt.Errorf("record the run as failed: %w", err)
	}
	c.stopResults()
	return &runstate.FailedError{Run: c.cfg.Run, Failure: *f}
}

// continueFailed continues a run that failed fast. The check's window
// moves past every result stored so far, so that the failures it judged
// are not judged again, and the budget grows by the designs the failed
// start spent on errors (MakeUp). Both are recorded with the run before any
// result is read, so a restart and replay judge from the same window and
// count to the same budget.
func (c *Controller) continueFailed(ctx context.Context) error {
	var last uint64
	err := startRetry(ctx, c.log, "read the run's last result", func() (err error) {
		last, err = c.lastResultSeq(ctx)
		return err
	})
	if err != nil {
		return err
	}
	m := &runstate.MakeUp{From: c.record.FailFastFrom, To: last}
	if last > m.From {
		t := runstate.NewTally(c.cfg.Run, c.record.Budget, runstate.RulesOf(c.record))
		err = broker.ReadResults(ctx, c.js, c.cfg.Run, func(seq uint64, _ time.Time, r *schema.Result, err error) error {
			m.Add(seq, r, t.Judge(r, err))
			if seq >= last {
				return broker.ErrStopReading
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("count the designs of the failed start: %w", err)
		}
	}
	now := c.cfg.Now()
	c.changes = append(c.changes, schema.Change{At: now, Setting: "fail_fast_from",
		From: strconv.FormatUint(c.failFrom, 10), To: strconv.FormatUint(last, 10)})
	if n := m.Designs(); n > 0 {
		c.changes = append(c.changes, schema.Change{At: now, Setting: "made_up",
			From: strconv.Itoa(c.madeUp), To: strconv.Itoa(c.madeUp + n)})
		c.madeUp += n
		c.cfg.Budget += n
	}
	c.failFrom = last
	f := logrus.Fields{"made_up": m.Designs(), "budget": c.cfg.Budget, "fail_fast_from": last}
	if rf := c.record.Failure; rf != nil {
		f["failed_with"] = rf.Error
	}
	c.log.WithFields(f).Info("continuing a failed run: its designs that ended in error or timeout are made up for, " +
		"and the evaluations are judged again from the next result")
	return nil
}
