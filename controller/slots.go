package controller

import (
	"slices"
	"time"

	"github.com/evoq/evoq/schema"
)

// slotTracker keeps the live workers of a run from their presence
// heartbeats. A worker is live while its last heartbeat arrived less than
// three of its intervals ago and it is not leaving.
type slotTracker struct {
	workers map[string]*seenWorker
	maxLive int
	// held are a worker's slots the controller holds quarantined; nil:
	// none. A quarantined slot takes no design, so counting it among the
	// live slots would keep designs in flight for it and starve nothing
	// else but mislead every figure.
	held func(worker string, p *schema.Presence) []int
}

type seenWorker struct {
	p    schema.Presence
	seen time.Time // local receive time: immune to clock skew
}

// liveCount is a snapshot of the live workers. slots excludes the
// quarantined ones, which quarantined counts.
type liveCount struct {
	workers, slots, busy, quarantined int
}

func newSlotTracker() *slotTracker { return &slotTracker{workers: map[string]*seenWorker{}} }

// put records a heartbeat; it reports whether the worker is new.
func (t *slotTracker) put(p *schema.Presence, now time.Time) bool {
	w, ok := t.workers[p.Worker]
	if !ok {
		w = &seenWorker{}
		t.workers[p.Worker] = w
	}
	w.p, w.seen = *p, now
	t.maxLive = max(t.maxLive, t.live(now).slots)
	return !ok
}

func (t *slotTracker) remove(worker string) { delete(t.workers, worker) }

func (w *seenWorker) alive(now time.Time) bool { return Alive(w.p, w.seen, now) }

// Alive reports whether a worker is live at now, given its last heartbeat
// p and when that arrived: less than three of its intervals ago, and the
// worker is not leaving. Only a live worker's slots are fed; status shows
// the same workers as live.
func Alive(p schema.Presence, seen, now time.Time) bool {
	return !p.Leaving && now.Sub(seen) < 3*p.Interval
}

// live counts the live workers, their slots and busy slots.
func (t *slotTracker) live(now time.Time) liveCount {
	var l liveCount
	for id, w := range t.workers {
		if w.alive(now) {
			usable := t.usable(id, w)
			l.workers++
			l.slots += usable
			l.quarantined += w.p.Slots - usable
			l.busy += min(w.p.Busy, usable)
		}
	}
	return l
}

// usable is the number of w's slots that take designs (see usableSlots).
func (t *slotTracker) usable(id string, w *seenWorker) int {
	if len(w.p.Quarantined) == 0 && len(t.heldOf(id, w)) == 0 {
		return w.p.Slots
	}
	return len(t.usableSlots(id, w))
}

// usableSlots are the indices of w's slots that take designs: all but
// those its heartbeat reports quarantined and those the controller holds
// quarantined, whichever learned of it first.
func (t *slotTracker) usableSlots(id string, w *seenWorker) []int {
	held := t.heldOf(id, w)
	var out []int
	for i := range w.p.Slots {
		if !slices.Contains(w.p.Quarantined, i) && !slices.Contains(held, i) {
			out = append(out, i)
		}
	}
	return out
}

// heldOf are w's slots the controller holds quarantined.
func (t *slotTracker) heldOf(id string, w *seenWorker) []int {
	if t.held == nil {
		return nil
	}
	return t.held(id, &w.p)
}

// prune forgets workers silent for a minute.
func (t *slotTracker) prune(now time.Time) {
	for id, w := range t.workers {
		if now.Sub(w.seen) > time.Minute && now.Sub(w.seen) > 10*w.p.Interval {
			delete(t.workers, id)
		}
	}
}

// MaxLive is the largest number of live slots seen at once.
func (t *slotTracker) MaxLive() int { return t.maxLive }
