package controller

import (
	"slices"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
)

// slotTracker keeps the live workers of a run from their presence
// heartbeats. A worker is live while its last heartbeat is less than
// three of its intervals old and it is not leaving. A heartbeat's time is
// when it was stored: one read from the bucket at start is as old as the
// broker says, not as new as the moment it was read, or every worker
// killed before the controller started would count as live.
type slotTracker struct {
	workers map[string]*seenWorker
	// spans are the live stretches of workers no longer live, for
	// MaxLive; spansMax is the most slots live at once among those
	// already dropped from spans (see compact).
	spans    []liveSpan
	spansMax int
	// firstLive is when a slot was first live.
	firstLive time.Time
	// held are a worker's slots the controller holds quarantined; nil:
	// none. A quarantined slot takes no design, so counting it among the
	// live slots would keep designs in flight for it and starve nothing
	// else but mislead every figure.
	held func(worker string, p *schema.Presence) []int
}

type seenWorker struct {
	p    schema.Presence
	seen time.Time // when the heartbeat was stored, on the controller's clock
	// span is its live stretch so far: from the heartbeat that made it
	// live to its latest, with the same usable slots.
	span liveSpan
	// joined: it has been live.
	joined bool
}

// liveSpan is a stretch of time from one heartbeat to a later one when a
// worker was live with slots usable slots.
type liveSpan struct {
	from, to time.Time
	slots    int
}

// liveCount is a snapshot of the live workers. slots excludes the
// quarantined ones, which quarantined counts.
type liveCount struct {
	workers, slots, busy, quarantined int
}

func newSlotTracker() *slotTracker { return &slotTracker{workers: map[string]*seenWorker{}} }

// put records a heartbeat received now; it reports whether the worker
// joined (see putAt).
func (t *slotTracker) put(p *schema.Presence, now time.Time) bool { return t.putAt(p, now, now) }

// putAt records a heartbeat stored at seen, read at now; it reports
// whether the worker joined: it is live for the first time. A heartbeat
// older than the worker's latest (one read from the bucket at start after
// a newer one arrived) is dropped, and a worker whose stored heartbeat is
// no longer current has not joined.
func (t *slotTracker) putAt(p *schema.Presence, seen, now time.Time) bool {
	seen = runstate.MinTime(seen, now)
	w, ok := t.workers[p.Worker]
	if ok && seen.Before(w.seen) {
		return false
	}
	if !ok {
		w = &seenWorker{}
		t.workers[p.Worker] = w
	}
	// The worker was live up to this heartbeat when its last one was
	// current at it.
	going := ok && w.alive(seen)
	w.p, w.seen = *p, seen
	t.extend(p.Worker, w, going, now)
	if t.firstLive.IsZero() && t.live(now).slots > 0 {
		t.firstLive = now
	}
	joined := !w.joined && w.alive(now)
	w.joined = w.joined || joined
	return joined
}

// extend stretches w's live span to its latest heartbeat, or starts a new
// one when it was not live up to it or its usable slots changed. A
// heartbeat read from the bucket that is no longer current (a worker
// gone before the controller started) starts none.
func (t *slotTracker) extend(id string, w *seenWorker, going bool, now time.Time) {
	n := 0
	if w.alive(now) {
		n = t.usable(id, w)
	}
	if going && n > 0 && n == w.span.slots {
		w.span.to = w.seen
		return
	}
	t.closeSpan(w)
	if n > 0 {
		w.span = liveSpan{from: w.seen, to: w.seen, slots: n}
	}
}

func (t *slotTracker) closeSpan(w *seenWorker) {
	if w.span.slots > 0 {
		t.spans = append(t.spans, w.span)
	}
	w.span = liveSpan{}
}

func (t *slotTracker) remove(worker string) {
	if w, ok := t.workers[worker]; ok {
		t.closeSpan(w)
		delete(t.workers, worker)
	}
}
func (w *seenWorker) alive(now time.Time) bool { return runstate.Alive(w.p, w.seen, now) }

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
			t.closeSpan(w)
			delete(t.workers, id)
		}
	}
	t.compact(now)
}

// spansKeep is the most closed spans kept before compact drops the old.
const spansKeep = 1024

// compact drops the closed spans that end before every span still open
// and before now: no span to come overlaps them (a heartbeat stored
// later extends an open span, or starts one, after that), so the most
// slots live at once among them is final.
func (t *slotTracker) compact(now time.Time) {
	if len(t.spans) < spansKeep {
		return
	}
	t.spansMax = t.MaxLive()
	cut := now
	for _, w := range t.workers {
		if w.span.slots > 0 {
			cut = runstate.MinTime(cut, w.span.to)
		}
	}
	t.spans = slices.DeleteFunc(t.spans, func(s liveSpan) bool { return s.to.Before(cut) })
}

// MaxLive is the largest number of slots live at once, each worker's
// counted from the heartbeat that made it live to its last: a worker
// killed stops counting at its last heartbeat, not three intervals later,
// so a replacement that joins meanwhile is not counted beside it.
func (t *slotTracker) MaxLive() int {
	type edge struct {
		at time.Time
		d  int
	}
	edges := make([]edge, 0, 2*(len(t.spans)+len(t.workers)))
	add := func(s liveSpan) {
		if s.slots > 0 {
			edges = append(edges, edge{s.from, s.slots}, edge{s.to, -s.slots})
		}
	}
	for _, s := range t.spans {
		add(s)
	}
	for _, w := range t.workers {
		add(w.span)
	}
	// Spans that meet at an instant both count: one heartbeat of each.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return b.d - a.d
	})
	n, most := 0, t.spansMax
	for _, e := range edges {
		n += e.d
		most = max(most, n)
	}
	return most
}

// FirstLive is when a slot was first live; zero while none has been.
func (t *slotTracker) FirstLive() time.Time { return t.firstLive }
