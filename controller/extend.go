package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// extendQueue bounds the requests to raise the run's limits waiting for
// the loop; one beyond it is answered at once that the controller is busy.
const extendQueue = 16

// extendReq is one request of `evoq run extend`, for the loop.
type extendReq struct {
	msg *nats.Msg
	e   *schema.Extend
	at  time.Time // when the controller received it
}

// startExtends subscribes to the requests of `evoq run extend` for the
// run. They are carried out by the loop, between two results, like every
// change of the controller's state; the handler only queues them. On a
// broker with auth only the admin credential may publish on the subject:
// neither the worker's nor the reader's permissions name it.
func (c *Controller) startExtends() error {
	c.extends = make(chan extendReq, extendQueue)
	sub, err := c.js.Conn().Subscribe(schema.ExtendSubject(c.cfg.Run), func(m *nats.Msg) {
		if m.Reply == "" {
			return // nowhere to answer; a request always has an inbox
		}
		e, err := schema.DecodeExtend(m.Data)
		if err == nil && e.Run != c.cfg.Run {
			err = fmt.Errorf("a request for run %q on run %q's subject", e.Run, c.cfg.Run)
		}
		// The refusals here leave out the run's limits: the loop owns them.
		if err != nil {
			c.reply(m, &schema.ExtendReply{Refused: "the request does not decode: " + err.Error()})
			return
		}
		select {
		case c.extends <- extendReq{msg: m, e: e, at: time.Now()}:
		default:
			c.reply(m, &schema.ExtendReply{Refused: "the controller has requests waiting; try again in a moment"})
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to run extend requests: %w", err)
	}
	c.stopExtendsSub = func() { _ = sub.Unsubscribe() }
	return nil
}

// stopExtends ends the subscription and answers the requests still
// queued: the run no longer takes a change. It is safe to call twice.
func (c *Controller) stopExtends() {
	if c.stopExtendsSub != nil {
		c.stopExtendsSub()
		c.stopExtendsSub = nil
	}
	for {
		select {
		case r := <-c.extends:
			c.answerExtend(r.msg, &schema.ExtendReply{Refused: EndedAdvice(c.cfg.Run, c.stopReason)})
		default:
			return
		}
	}
}

// answerExtend sends rep, with the run's limits now, to the request m.
// Only the loop calls it, or Run once the loop is over: the limits are
// theirs.
func (c *Controller) answerExtend(m *nats.Msg, rep *schema.ExtendReply) {
	rep.Budget = c.cfg.Budget - c.madeUp
	rep.TimeBudget, rep.Deadline = c.cfg.TimeBudget, c.cfg.Deadline
	c.reply(m, rep)
}

// reply sends rep to the request m.
func (c *Controller) reply(m *nats.Msg, rep *schema.ExtendReply) {
	rep.Run, rep.At = c.cfg.Run, time.Now()
	if b, err := schema.EncodeExtendReply(rep); err == nil {
		_ = m.Respond(b)
	}
}

// onExtend raises the run's limits as r asks, records the new ones with
// the run (and each as a change), then applies them and answers: a
// restart and `evoq replay` read the raised limits from the record, and
// the tally's budget is raised here, between two results, as a restart's
// is before its first. A limit is only raised; a request that would lower
// one, or one for a run that is ending for a reason it does not lift, is
// refused whole, and nothing changes.
func (c *Controller) onExtend(ctx context.Context, r extendReq) {
	now := c.cfg.Now()
	if waited := time.Since(r.at); waited > ExtendStale {
		// Its sender has given up, and told its user that nothing was
		// raised: so nothing is.
		c.log.WithFields(logrus.Fields{"budget": r.e.Budget, "time_budget": r.e.TimeBudget, "waited": waited.Round(time.Second)}).
			Warn("a run extend request waited too long to be taken; its sender has given up, so nothing was raised")
		c.answerExtend(r.msg, &schema.ExtendReply{Refused: "the request waited too long; nothing was raised: ask again"})
		return
	}
	if why := c.extendRefused(r.e); why != "" {
		c.log.WithFields(logrus.Fields{"budget": r.e.Budget, "time_budget": r.e.TimeBudget, "why": why}).Warn("refused to raise the run's limits")
		c.answerExtend(r.msg, &schema.ExtendReply{Refused: why})
		return
	}
	budget, timeBudget, deadline, changes := c.cfg.Budget, c.cfg.TimeBudget, c.cfg.Deadline, len(c.changes)
	if e := r.e; e.Budget > 0 {
		own := c.cfg.Budget - c.madeUp
		c.changes = append(c.changes, schema.Change{At: now, Setting: "budget", From: fmt.Sprint(own), To: fmt.Sprint(e.Budget), Via: schema.ViaExtend})
		c.cfg.Budget = e.Budget + c.madeUp
	}
	if e := r.e; e.TimeBudget > 0 {
		// The time budget counts from the run's first start, as the one
		// it replaces: the deadline moves by the difference.
		c.cfg.Deadline = c.cfg.Deadline.Add(e.TimeBudget - c.cfg.TimeBudget)
		c.changes = append(c.changes,
			schema.Change{At: now, Setting: "time_budget", From: c.cfg.TimeBudget.String(), To: e.TimeBudget.String(), Via: schema.ViaExtend},
			schema.Change{At: now, Setting: "deadline", From: deadlineText(deadline), To: deadlineText(c.cfg.Deadline), Via: schema.ViaExtend})
		c.cfg.TimeBudget = e.TimeBudget
	}
	stopping := c.stopping
	if c.stopping == schema.StopTime && !c.timeUp(now) {
		c.stopping = "" // the new deadline leaves time for new designs
	}
	phase := c.phase
	if phase == schema.PhaseDraining && c.stopping == "" && int(c.published) < c.cfg.Budget {
		phase = schema.PhaseRunning
	}
	if err := c.setPhase(ctx, phase); err != nil {
		c.cfg.Budget, c.cfg.TimeBudget, c.cfg.Deadline, c.changes, c.stopping = budget, timeBudget, deadline, c.changes[:changes], stopping
		c.log.WithError(err).Warn("could not record the run's raised limits; nothing was raised")
		c.answerExtend(r.msg, &schema.ExtendReply{Refused: "the raised limits could not be recorded: " + err.Error()})
		return
	}
	c.fold.Tally().Raise(c.cfg.Budget)
	f := logrus.Fields{"budget": c.cfg.Budget - c.madeUp, "phase": c.phase}
	if c.cfg.TimeBudget > 0 {
		f["time_budget"], f["deadline"] = c.cfg.TimeBudget, deadlineText(c.cfg.Deadline)
	}
	c.log.WithFields(f).Info("the run's limits were raised (evoq run extend); recorded with the run")
	c.answerExtend(r.msg, &schema.ExtendReply{})
}

// extendRefused says why e cannot be carried out, naming the flag and the
// run's value now; "" when it can.
func (c *Controller) extendRefused(e *schema.Extend) string {
	own := c.cfg.Budget - c.madeUp
	switch {
	case c.failure != nil:
		return EndedAdvice(c.cfg.Run, schema.StopFailed)
	case e.Budget > 0 && e.Budget <= own:
		return fmt.Sprintf("--budget %d: the run's budget is %d already; run extend only raises it: give more than %d", e.Budget, own, own)
	case e.TimeBudget > 0 && c.cfg.TimeBudget == 0:
		return fmt.Sprintf("--time-budget %s: the run has no time budget, so nothing bounds its time; run extend only raises a limit", e.TimeBudget)
	case e.TimeBudget > 0 && e.TimeBudget <= c.cfg.TimeBudget:
		return fmt.Sprintf("--time-budget %s: the run's time budget is %s already (it ends at %s); run extend only raises it: give more than %s",
			e.TimeBudget, c.cfg.TimeBudget, deadlineText(c.cfg.Deadline), c.cfg.TimeBudget)
	case c.stopping != "" && (c.stopping != schema.StopTime || e.TimeBudget == 0):
		return fmt.Sprintf("run %s is ending (stop reason %s): its designs in flight finish and no new ones start; raising %s does not change that. Once it is done, continue it by starting its controller again with the settings that let it go on (evoq controller --run %s with --budget, --target, --plateau or --time-budget)",
			c.cfg.Run, c.stopping, extendWhat(e), c.cfg.Run)
	}
	return ""
}

// extendWhat names the limits e raises.
func extendWhat(e *schema.Extend) string {
	switch {
	case e.Budget > 0 && e.TimeBudget > 0:
		return "--budget and --time-budget"
	case e.Budget > 0:
		return "--budget"
	}
	return "--time-budget"
}

// ExtendWait is how long `evoq run extend` waits for the controller's
// answer: the loop carries a request out between two results, and a
// controller replaying a long results stream answers once it is done.
const ExtendWait = 30 * time.Second

// ExtendStale is how long a request may wait in the controller before it
// is refused unapplied: past it, its sender, which waits ExtendWait from
// before the request reached the controller, may have given up and said
// that nothing was raised.
const ExtendStale = ExtendWait - 5*time.Second

// EndedAdvice says what to do instead of raising the limits of run, which
// has ended for reason: a finished run is continued, not extended.
func EndedAdvice(run string, reason schema.StopReason) string {
	if reason == schema.StopFailed {
		return fmt.Sprintf("run %s has failed: run extend raises a live run's limits only; fix its evaluator and continue it with --resume (evoq run --resume --run %s, or evoq controller --run %s --resume), with a larger --budget if you want one", run, run, run)
	}
	why := ""
	if reason != "" {
		why = " (stop reason " + string(reason) + ")"
	}
	return fmt.Sprintf("run %s has ended%s: run extend raises a live run's limits only; continue it instead by starting its controller again on its store with the larger limit (evoq controller --run %s --budget N, or evoq run --run %s --budget N; --time-budget D likewise)", run, why, run, run)
}
