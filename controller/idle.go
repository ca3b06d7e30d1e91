package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// IdleAlarmDefault is how long a slot may sit idle, while the budget still
// has designs to hand out, before the controller warns.
const IdleAlarmDefault = 30 * time.Second

// IdleAlarmOff, as Config.IdleAlarm, turns the idle alarm off.
const IdleAlarmOff time.Duration = -1

// idleSince remembers since when each worker has had idle slots.
type idleSince map[string]time.Time

// observeIdle updates, from the live workers' heartbeats, since when each
// has had an idle slot.
func (c *Controller) observeIdle(now time.Time) {
	seen := map[string]bool{}
	for id, w := range c.slots.workers {
		if !w.alive(now) || w.p.Busy >= w.p.Slots {
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
	idle, slots := c.longIdle(now)
	if len(idle) == 0 || now.Sub(c.lastAlarm) < c.cfg.IdleAlarm {
		return
	}
	c.lastAlarm = now
	diag, advice := c.diagnose(ctx)
	c.log.WithFields(logrus.Fields{"idle_workers": strings.Join(idle, ","), "idle_slots": slots,
		"idle_for": ">" + c.cfg.IdleAlarm.String(), "diagnosis": diag, "advice": advice,
		"in_flight": c.InFlight(), "target": c.target(), "budget_left": c.cfg.Budget - c.fold.Terminal()}).
		Warn("slots idle while the budget has work")
}

// longIdle lists the workers idle for longer than IdleAlarm, and their
// idle slots.
func (c *Controller) longIdle(now time.Time) ([]string, int) {
	var ids []string
	slots := 0
	for id, since := range c.idle {
		if now.Sub(since) >= c.cfg.IdleAlarm {
			w := c.slots.workers[id]
			ids = append(ids, id)
			slots += w.p.Slots - w.p.Busy
		}
	}
	sort.Strings(ids)
	return ids, slots
}

// diagnose reads the consumer's counters and says what keeps slots idle.
func (c *Controller) diagnose(ctx context.Context) (string, string) {
	info, err := c.cons.Info(ctx)
	if err != nil {
		return "the work queue cannot be read: " + err.Error(), "check the broker"
	}
	cfg := info.Config
	switch {
	case cfg.MaxAckPending > 0 && info.NumAckPending >= cfg.MaxAckPending:
		return fmt.Sprintf("consumer limit: %d designs delivered and unacked = MaxAckPending %d", info.NumAckPending, cfg.MaxAckPending),
			"raise MaxAckPending (the controller raises it as slots join; a consumer made elsewhere keeps its own)"
	case cfg.MaxWaiting > 0 && info.NumWaiting >= cfg.MaxWaiting:
		return fmt.Sprintf("consumer limit: %d pull requests waiting = MaxWaiting %d", info.NumWaiting, cfg.MaxWaiting),
			"start a new run with --expect-slots at least the number of slots"
	case info.NumPending > 0:
		return fmt.Sprintf("%d designs queued but not pulled: the idle slots ask for no designs", info.NumPending),
			"check the idle workers: stuck, cut off from the broker, or serving another run"
	case c.InFlight() < c.target() && int(c.published) < c.cfg.Budget:
		return fmt.Sprintf("queue empty: %d designs in flight, below the target %d", c.InFlight(), c.target()),
			"the controller is behind; look for broker errors in its log"
	default:
		return fmt.Sprintf("queue empty: every design is on a slot (%d in flight, target %d)", c.InFlight(), c.target()),
			"wait: the budget's last designs are running"
	}
}
