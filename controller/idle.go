package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// IdleAlarmDefault is how long a slot may sit idle, while the budget still
// has designs to hand out, before the controller warns.
const IdleAlarmDefault = 30 * time.Second

// IdleAlarmOff, as Config.IdleAlarm, turns the idle alarm off.
const IdleAlarmOff time.Duration = -1

// The rule of which slots idle for want of a design, and why, is written
// once, here, as pure functions over figures: the controller's idle alarm
// and `evoq status` both apply it, each to the figures it has.

// QueueFiguresOf reads the figures of a consumer's info.
func QueueFiguresOf(info *jetstream.ConsumerInfo) runstate.QueueFigures {
	return runstate.QueueFigures{Queued: int(info.NumPending), Delivered: info.NumAckPending, Waiting: info.NumWaiting,
		MaxAckPending: info.Config.MaxAckPending, MaxWaiting: info.Config.MaxWaiting}
}

// DiagnoseIdle says, from the work queue's counters, what keeps slots
// idle, and what to do about it.
func DiagnoseIdle(q runstate.QueueFigures, b runstate.BudgetFigures) (diagnosis, advice string) {
	switch {
	case q.Err != nil:
		return "the work queue cannot be read: " + q.Err.Error(), "check the broker"
	case q.MaxAckPending > 0 && q.Delivered >= q.MaxAckPending:
		return fmt.Sprintf("consumer limit: %d designs delivered and unacked = MaxAckPending %d", q.Delivered, q.MaxAckPending),
			"raise MaxAckPending (the controller raises it as slots join; a consumer made elsewhere keeps its own)"
	case q.MaxWaiting > 0 && q.Waiting >= q.MaxWaiting:
		return fmt.Sprintf("consumer limit: %d pull requests waiting = MaxWaiting %d", q.Waiting, q.MaxWaiting),
			"start a new run with --expect-slots at least the number of slots"
	case q.Queued > 0:
		return fmt.Sprintf("%d designs queued but not pulled: the idle slots ask for no designs", q.Queued),
			"check the idle workers: stuck, cut off from the broker, or serving another run"
	case b.InFlight < b.Target && b.Open:
		return fmt.Sprintf("queue empty: %d designs in flight, below the target %d", b.InFlight, b.Target),
			"the controller is behind; look for broker errors in its log"
	}
	return fmt.Sprintf("queue empty: every design is on a slot (%d in flight, target %d)", b.InFlight, b.Target),
		"wait: the budget's last designs are running"
}

// idleSince remembers since when each worker has had idle slots.
type idleSince map[string]time.Time

// observeIdle updates, from the live workers' heartbeats, since when each
// has had an idle slot.
func (c *Controller) observeIdle(now time.Time) {
	seen := map[string]bool{}
	for id, w := range c.slots.workers {
		// A quarantined slot idles on purpose.
		if !w.alive(now) || w.p.Busy >= c.slots.usable(id, w) {
			continue
		}
		seen[id] = true
		if _, ok := c.idle[id]; !ok {
			c.idle[id] = w.seen
		}
	}
	for id := range c.idle {
		if !seen[id] {
			delete(c.idle, id)
		}
	}
}

// idleAlarm warns, at most once per IdleAlarm, when slots have been idle
// longer than IdleAlarm while designs remain to be handed out, and says
// why: the evidence is the work queue's own counters.
func (c *Controller) idleAlarm(ctx context.Context, now time.Time) {
	c.observeIdle(now)
	if c.cfg.IdleAlarm <= 0 || int(c.published) >= c.cfg.Budget {
		return // off, or draining: nothing is left to hand out
	}
	long := c.longIdle(now)
	if len(long) == 0 || now.Sub(c.lastAlarm) < c.cfg.IdleAlarm {
		return
	}
	c.lastAlarm = now
	var q runstate.QueueFigures
	if info, err := c.cons.Info(ctx); err != nil {
		q.Err = err
	} else {
		q = QueueFiguresOf(info)
	}
	b := runstate.BudgetFigures{Budget: c.cfg.Budget, Done: c.fold.Terminal(), Open: true, InFlight: c.InFlight(), Target: c.target()}
	idle := runstate.IdleWorkers(long, q, b)
	if len(idle) == 0 {
		return
	}
	ids, slots := make([]string, len(idle)), 0
	for i, w := range idle {
		ids[i], slots = w.Worker, slots+w.Idle
	}
	diag, advice := DiagnoseIdle(q, b)
	c.log.WithFields(logrus.Fields{"idle_workers": strings.Join(ids, ","), "idle_slots": slots,
		"idle_for": ">" + c.cfg.IdleAlarm.String(), "diagnosis": diag, "advice": advice,
		"in_flight": b.InFlight, "target": b.Target, "budget_left": b.Budget - b.Done}).
		Warn("slots idle while the budget has work")
}

// longIdle lists, by ID, the workers idle for longer than IdleAlarm.
func (c *Controller) longIdle(now time.Time) []runstate.WorkerLoad {
	var ws []runstate.WorkerLoad
	for id, since := range c.idle {
		if now.Sub(since) >= c.cfg.IdleAlarm {
			w := c.slots.workers[id]
			ws = append(ws, runstate.WorkerLoad{Worker: id, Slots: c.slots.usable(id, w), Busy: w.p.Busy, Live: w.alive(now), Evaluations: int(w.p.Done)})
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Worker < ws[j].Worker })
	return ws
}
