package controller

import (
	"slices"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// The tally decides which slots are quarantined (quarantine.go); this file
// acts on it live. The controller stops counting a quarantined slot among
// the live ones the moment it decides, so the designs in flight follow the
// slots that can take them, and tells the slot's worker with a Control
// message, which is plain NATS and may be lost: it is sent again whenever
// the worker's heartbeat does not list a slot the controller holds
// quarantined, and whenever such a slot's results keep coming.

// controlEvery bounds how often one worker is told its quarantined slots.
const controlEvery = time.Second

// heldSlots are the slots of worker id, whose last heartbeat is p, that
// the controller holds quarantined (see HeldSlots).
func (c *Controller) heldSlots(id string, p *schema.Presence) []int {
	if c.fold == nil {
		return nil
	}
	held := runstate.HeldSlots(c.fold.Tally(), id, p)
	for _, i := range c.heldEarly[id] {
		if !slices.Contains(held, i) && (p == nil || p.Started.IsZero() || !c.heldEarlyAt[id].Before(p.Started)) {
			held = append(held, i)
		}
	}
	slices.Sort(held)
	return held
}

// holdEarly stops feeding a suspect slot (its failures in a row reached
// QuarantineAfter while no other slot has succeeded) while the slots the
// run expects are still joining: the first node up of an allocation that
// fails at once would otherwise fail design after design before any other
// node could show whether the evaluator works. It is the controller's live
// choice of which slots to feed, like the tally's quarantine, and decides
// no result: once another slot succeeds, the tally quarantines the slot
// for good; if the others fail too, the fail-fast check fails the run.
func (c *Controller) holdEarly(s runstate.SlotHealth) {
	if !c.othersComing() || slices.Contains(c.heldEarly[s.Worker], s.Slot) {
		return
	}
	if c.heldEarlyAt == nil {
		c.heldEarly, c.heldEarlyAt = map[string][]int{}, map[string]time.Time{}
	}
	c.heldEarly[s.Worker] = append(c.heldEarly[s.Worker], s.Slot)
	c.heldEarlyAt[s.Worker] = c.cfg.Now()
	c.log.WithFields(slotFields(s)).WithFields(logrus.Fields{"live_slots": c.liveSlots(), "expected_slots": c.expectedSlots()}).
		Warn("slot failed its first designs before the run's other slots joined: not fed while they join, so that its failures do not decide the run")
	c.sendControl(s.Worker, nil, true)
}

// onSlotEvents acts on the changes in slot health the last result brought.
// Replayed results bring none of this: noteQuarantined sums them up after
// replay.
func (c *Controller) onSlotEvents(evs []runstate.SlotEvent) {
	if !c.live {
		return
	}
	for _, ev := range evs {
		s := ev.Slot
		switch ev.Kind {
		case runstate.SlotSuspect:
			if c.othersComing() {
				c.holdEarly(s)
				continue
			}
			c.log.WithFields(slotFields(s)).WithField("advice", "if every slot fails alike, check the workers' evaluator command and its environment on every node").
				Warn("slot failed its last designs, and no other slot has succeeded yet: not quarantined, since the evaluator or the search space may be at fault")
		case runstate.SlotQuarantined:
			c.warnQuarantined(s, "slot quarantined: it failed its last designs while other slots succeed")
			c.sendControl(s.Worker, nil, true)
		case runstate.SlotStillFailing:
			c.sendControl(s.Worker, nil, false)
		case runstate.SlotRecovered:
			c.log.WithFields(slotFields(s)).Info("quarantined slot succeeded: no longer quarantined")
		}
	}
}

// warnQuarantined says which slot is quarantined, why, and what to do, in
// the idle alarm's manner.
func (c *Controller) warnQuarantined(s runstate.SlotHealth, msg string) {
	f := slotFields(s)
	f["quarantined_slots"] = len(c.fold.Tally().QuarantinedSlots(s.Worker))
	if w, ok := c.slots.workers[s.Worker]; ok {
		f["worker_slots"] = w.p.Slots
	}
	f["advice"] = "check that node (nvidia-smi, dmesg, free disk, the evaluator's environment); " +
		"its designs are retried elsewhere, the worker stops feeding the slot and exits (code 4) once all its slots are quarantined; restart it when fixed"
	c.log.WithFields(f).Warn(msg)
}

// slotFields name a slot and its last failure for a log line.
func slotFields(s runstate.SlotHealth) logrus.Fields {
	f := logrus.Fields{"worker": s.Worker, "host": s.Host, "slot": s.Slot, "failures_in_a_row": s.Failures,
		"last_error": runstate.ErrorGist(s.LastError)}
	if s.GPU != "" {
		f["gpu"] = s.GPU
	}
	return f
}

// noteQuarantined warns, after replay, of every slot the replayed results
// left quarantined: the warnings given when they were quarantined are in
// an earlier controller's log.
func (c *Controller) noteQuarantined() {
	for _, s := range c.fold.Tally().Quarantined() {
		c.warnQuarantined(s, "slot quarantined by the run's earlier results")
	}
}

// sendControl tells worker which of its slots are quarantined; p is its
// last heartbeat, nil to look it up. Unless force, at most once per
// controlEvery. A worker that does not listen (or is gone) loses nothing:
// the controller has stopped counting those slots anyway.
func (c *Controller) sendControl(worker string, p *schema.Presence, force bool) {
	if p == nil {
		if w, ok := c.slots.workers[worker]; ok {
			p = &w.p
		}
	}
	slots := c.heldSlots(worker, p)
	now := c.cfg.Now()
	if len(slots) == 0 || (!force && now.Sub(c.controlSent[worker]) < controlEvery) {
		return
	}
	c.controlSent[worker] = now
	data, err := schema.EncodeControl(&schema.Control{Run: c.cfg.Run, Worker: worker, Quarantine: slots,
		Reason: "failed its last designs while other slots succeed", Sent: now})
	if err == nil {
		err = c.js.Conn().Publish(schema.ControlSubject(c.cfg.Run, worker), data)
	}
	if err != nil {
		c.log.WithError(err).WithField("worker", worker).Warn("could not tell the worker of its quarantined slots; trying again with its next heartbeat")
	}
}

// checkControl tells a worker again of its quarantined slots when its
// heartbeat p does not list them all: the control was lost, or came
// before the worker listened.
func (c *Controller) checkControl(worker string, p *schema.Presence) {
	for _, i := range c.heldSlots(worker, p) {
		if !slices.Contains(p.Quarantined, i) {
			c.sendControl(worker, p, false)
			return
		}
	}
}
