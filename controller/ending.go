package controller

import (
	"context"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// DurationQuantile is the quantile of the measured evaluation times that
// judges whether a new design can finish before the time budget's end: at
// the 90th percentile, one design in ten started near the end runs past
// it, rather than every slot idling for the last evaluation's length.
const DurationQuantile = 0.9

// ending is why the run is ending, or "" while it goes on. The first
// reason found stays (see stopping): the designs in flight then finish,
// and what they bring does not change why the run ended. The budget spent
// ends it at once, since nothing is left in flight; any other reason stops
// new designs, and the run ends when the designs in flight are done.
//
// The stop rule (target, plateau) is the fold's: a pure function of the
// results, so a restart and `evoq replay` reach it at the same result.
// The time budget is the controller's own decision, from the clock and
// the deadline recorded with the run; what it decided is recorded as the
// run's stop reason.
func (c *Controller) ending() schema.StopReason {
	if c.stopping != "" {
		return c.stopping
	}
	r, _ := c.fold.Stop()
	switch {
	case c.fold.Terminal() >= c.cfg.Budget:
		return schema.StopBudget
	case r != "":
	case c.timeUp(c.cfg.Now()):
		r = schema.StopTime
	default:
		return ""
	}
	c.stopping = r
	f := logrus.Fields{"stop_reason": r, "evaluations": c.fold.Terminal(), "in_flight": c.InFlight()}
	if b := c.fold.Best(); b != nil {
		f["best"] = b.Fitness
	}
	c.log.WithFields(f).Info("the run is ending: the designs in flight finish, no new ones start")
	return r
}

// timeUp reports whether a design started now could not finish before
// the time budget's end, by the evaluation times measured so far; before
// any, only the end itself stops new designs.
func (c *Controller) timeUp(now time.Time) bool {
	if c.cfg.Deadline.IsZero() {
		return false
	}
	return !now.Add(c.fold.Stats().DurationQuantile(DurationQuantile)).Before(c.cfg.Deadline)
}

// recordInterrupted records, when ctx ended the run's loop, that the run
// was interrupted, so that status says why it stopped. The record is
// written with a context of its own, since ctx is over; a restart clears
// the reason.
func (c *Controller) recordInterrupted(ctx context.Context) {
	if ctx.Err() == nil {
		return
	}
	c.stopReason = schema.StopInterrupted
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if err := c.setPhase(wctx, c.phase); err != nil {
		c.log.WithError(err).Warn("could not record that the run was interrupted")
	}
}
