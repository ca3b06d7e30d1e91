package controller

import (
	"context"
	"fmt"
	"slices"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// A feature that is on but does nothing looks, from the outside, like a
// feature that works: early stopping with an evaluator that never
// reports, inheritance with one that saves no checkpoint. That silence is
// the incident evoq exists for. So once the run's first Init results are
// in, the controller checks each feature for the effect it should have
// had, and warns once when there is none; workers' warnings (an evaluator
// that differs from the run's, one that never answered) join them. The
// warnings are logged, kept in the run's record (so that `evoq status`
// shows them after the run too, and a restart keeps them), and listed in
// the summary's warnings.

// warnOnce adds msg to the run's warnings, and logs it, unless it is
// there already.
func (c *Controller) warnOnce(msg string, fields logrus.Fields) {
	if slices.Contains(c.warnings, msg) {
		return
	}
	c.warnings = append(c.warnings, msg)
	c.warningsDirty = true
	c.log.WithFields(fields).Warn(msg)
}

// Warnings are the run's warnings so far, oldest first.
func (c *Controller) Warnings() []string { return slices.Clone(c.warnings) }

// startWarnings warns of what the settings alone show will not work as
// a user expects.
func (c *Controller) startWarnings() {
	if w := EarlyStopWarning(c.cfg.EarlyStop); w != "" {
		c.warnOnce(w, logrus.Fields{"early_stop": runstate.EarlyStopText(c.cfg.EarlyStop)})
	}
	if c.cfg.Evaluator == nil {
		c.warnOnce("the run records no evaluator: every worker must name its own (--evaluator or --eval-cmd), and nothing checks that they agree",
			logrus.Fields{})
	}
}

// noteResult counts what the inert checks need of a result.
func (c *Controller) noteResult(r *schema.Result) {
	if r != nil && r.Checkpoint != nil {
		c.checkpointsSeen++
	}
}

// ScratchRunWarning is the run's warning once an interrupted design was
// evaluated again from scratch; the summary's warnings add how many and
// what that cost (runstate.ScratchWarning).
const ScratchRunWarning = "interrupted designs are retrained from scratch: their evaluator saves no progress to resume from " +
	"(evoq_eval.save_progress; see EVALUATORS.md, Saving progress); the summary's progress.from_scratch_cost_s says what that costs"

// noteScratch warns, once, of a counted design that was retrained from
// scratch (runstate.RetrainedFromScratch).
func (c *Controller) noteScratch(r *schema.Result) {
	if runstate.RetrainedFromScratch(r) {
		c.warnOnce(ScratchRunWarning, logrus.Fields{"design": r.DesignID, "attempt": r.Attempt})
	}
}

// checkInert warns of a feature that is on but has done nothing by the
// time the run's first Init results are in.
func (c *Controller) checkInert() {
	if !c.live || c.inertChecked || c.fold.Terminal() < c.cfg.Init {
		return
	}
	c.inertChecked = true
	n := c.fold.Terminal()
	if c.stopper != nil && c.stopper.reports() == 0 {
		c.warnOnce(fmt.Sprintf("early stopping (%s) is on, but none of the run's first %d results came with a report: "+
			"its evaluator reports no training progress, so nothing is stopped early; have it report each epoch "+
			"(evoq_eval.report(step, fitness), or a {\"report\": ...} line; see SCHEMA.md)", runstate.EarlyStopText(c.cfg.EarlyStop), n),
			logrus.Fields{"results": n})
	}
	if c.cfg.Checkpoints.Inherit != nil && *c.cfg.Checkpoints.Inherit && c.checkpointsSeen == 0 {
		c.warnOnce(fmt.Sprintf("--inherit is on, but none of the run's first %d results stored a checkpoint: "+
			"its evaluator saves none where EVOQ_CHECKPOINT_OUT says (evoq_eval.save(obj)), so no mutant inherits", n),
			logrus.Fields{"results": n})
	}
	if ok := c.fold.Count(schema.StatusOK); c.fold.Pool().Ranked() && ok > 0 && c.fold.Unmeasured() == ok {
		c.warnOnce(fmt.Sprintf("objectives %s: none of the run's first %d ok results carries every objective and constrained value, "+
			"so the pool ranks none of them; check the metric names the evaluator sends", c.cfg.Objectives.String(), ok),
			logrus.Fields{"ok": ok})
	}
}

// workerWarnings takes a worker's standing warnings from its heartbeat.
func (c *Controller) workerWarnings(worker string, p *schema.Presence) {
	for _, w := range p.Warnings {
		c.warnOnce(fmt.Sprintf("worker %s (host %s): %s", worker, p.Host, w), logrus.Fields{"worker": worker, "host": p.Host})
	}
}

// recordWarnings writes new warnings into the run's record.
func (c *Controller) recordWarnings(ctx context.Context) {
	if !c.warningsDirty || c.phase == "" {
		return
	}
	if err := c.setPhase(ctx, c.phase); err != nil {
		c.log.WithError(err).Warn("recording the run's warnings failed; retrying with the next")
		return
	}
	c.warningsDirty = false
}
