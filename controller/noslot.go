package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// The idle alarm (idle.go) looks at slots that exist and idle. A run can
// also have no slot at all: every worker was started with a mistyped run
// ID, waits in the batch queue, or cannot reach the broker. Such a worker
// never heartbeats for this run, so the controller hears nothing from it;
// what it can see is which other runs on the broker do have workers.

// NoSlotRepeatMax caps the interval between repeated warnings about a run
// without a live slot.
const NoSlotRepeatMax = 5 * time.Minute

// noSlotAlarm schedules the warnings about a run without a live slot: the
// first once none has been live for the alarm period, the next ones at
// doubling intervals up to NoSlotRepeatMax. A run may lack slots for
// hours by design (workers queued behind other jobs of a batch system):
// warning every period would bury everything else in the log, while a
// warning at least every few minutes keeps the reason in any tail of it.
type noSlotAlarm struct {
	since    time.Time // zero while slots are live
	reminder *broker.Reminder
}

// due reports whether to warn at now, given the live slot count, and for
// how long the run has had no live slot.
func (a *noSlotAlarm) due(now time.Time, live int, alarm time.Duration) (bool, time.Duration) {
	if live > 0 || alarm <= 0 {
		*a = noSlotAlarm{}
		return false, 0
	}
	if a.reminder == nil {
		a.since, a.reminder = now, broker.NewReminder(now, alarm, NoSlotRepeatMax)
	}
	return a.reminder.Due(now), now.Sub(a.since)
}

// Heartbeat is one entry of the presence bucket: a worker's last
// heartbeat, the run its key names, and when the broker stored it.
type Heartbeat struct {
	Run      string
	Presence schema.Presence
	Stored   time.Time
}

// RunWorkers are the live workers of one run, and their slots.
type RunWorkers struct {
	Run            string
	Workers, Slots int
}

func (r RunWorkers) String() string {
	return fmt.Sprintf("%s (%d workers, %d slots)", r.Run, r.Workers, r.Slots)
}

// LiveRuns groups the live heartbeats (Alive at now) by run, sorted by
// run, leaving out run itself: its live workers are the controller's own
// count.
func LiveRuns(hb []Heartbeat, run string, now time.Time) []RunWorkers {
	by := map[string]*RunWorkers{}
	for _, h := range hb {
		if h.Run == run || !runstate.Alive(h.Presence, h.Stored, now) {
			continue
		}
		r := by[h.Run]
		if r == nil {
			r = &RunWorkers{Run: h.Run}
			by[h.Run] = r
		}
		r.Workers++
		r.Slots += h.Presence.Slots
	}
	out := make([]RunWorkers, 0, len(by))
	for _, r := range by {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Run < out[j].Run })
	return out
}

// DiagnoseNoSlot says why run has no live slot, and what to do, from the
// runs that have live workers on the broker (others; err when they could
// not be read).
func DiagnoseNoSlot(run string, others []RunWorkers, err error) (diagnosis, advice string) {
	how := "start workers for run " + run
	switch {
	case err != nil:
		return "no live worker slot, and the other runs' workers cannot be read: " + err.Error(), how
	case len(others) == 0:
		return "no live worker on this broker, for any run: the workers are not started, wait in the batch queue, " +
			"cannot reach this broker, or wait for a run of another name (they register nothing then; " +
			"their logs say the run is not on the broker)", how
	}
	names := make([]string, len(others))
	for i, r := range others {
		names[i] = r.String()
	}
	return "no live worker slot for this run, while workers serve other runs on this broker: " + strings.Join(names, ", "),
		"if those workers were meant for this run, restart them for run " + run + "; else " + how
}

// warnNoSlot warns, on the schedule of noSlotAlarm, while the run has had
// no live slot for IdleAlarm, naming the runs on the broker that do have
// workers, and how a worker joins this run (JoinHint).
func (c *Controller) warnNoSlot(ctx context.Context, now time.Time) {
	if c.cfg.IdleAlarm <= 0 {
		return
	}
	due, none := c.noSlot.due(now, c.liveSlots(), c.cfg.IdleAlarm)
	if !due {
		return
	}
	hb, err := heartbeats(ctx, c.js)
	others := LiveRuns(hb, c.cfg.Run, now)
	diag, advice := DiagnoseNoSlot(c.cfg.Run, others, err)
	names := make([]string, len(others))
	for i, r := range others {
		names[i] = r.String()
	}
	with := strings.Join(names, ", ")
	if err == nil && with == "" {
		with = "none"
	}
	f := logrus.Fields{"no_slot_for": none.Round(time.Second), "runs_with_workers": with,
		"diagnosis": diag, "advice": advice, "budget_left": c.cfg.Budget - c.fold.Terminal()}
	if c.cfg.JoinHint != "" {
		f["join"] = c.cfg.JoinHint
	}
	c.log.WithFields(f).Warn("no live worker slot for this run")
}

// heartbeats reads the whole presence bucket. A controller may: with auth
// it holds an admin credential, not a run's.
func heartbeats(ctx context.Context, js jetstream.JetStream) ([]Heartbeat, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	entries, err := broker.LastValues(ctx, js, schema.PresenceBucket)
	if err != nil {
		return nil, err
	}
	out := make([]Heartbeat, 0, len(entries))
	for _, e := range entries {
		run, _, ok := strings.Cut(e.Key(), ".")
		p, err := schema.DecodePresence(e.Value())
		if !ok || err != nil {
			continue
		}
		out = append(out, Heartbeat{Run: run, Presence: *p, Stored: e.Created()})
	}
	return out, nil
}
