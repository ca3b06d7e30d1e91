package runstate

import (
	"math"
	"slices"
	"time"

	"github.com/evoq/evoq/schema"
)

// Stats accumulates the run's timing figures in memory bounded by the
// number of slots, not by the number of evaluations.
type Stats struct {
	evaluations int
	firstStart  time.Time
	lastStart   time.Time // when the latest design was handed to a slot
	busy        time.Duration
	recent      []interval // the latest results, to clip busy time at lastStart
	next        int
	slotsUsed   map[slotKey]*slotSpan
	gaps        histogram
	durations   histogram // each counted evaluation's, start to stop
}

// slotSpan is a slot's life as its results show it: its first design's
// start and its last design's stop. A worker killed and started again
// comes back under another ID, so its slots are new slots with spans of
// their own, and a dead slot stops counting at its last result.
type slotSpan struct{ first, last time.Time }

type interval struct{ start, stop time.Time }

type slotKey struct {
	worker string
	slot   int
}

// recentKeep is the least the ring of recent results holds; results still
// running when the last design was handed out are among the latest, at
// most one per slot, so the ring holds twice the slots seen when that is
// more.
const recentKeep = 1 << 16

// NewStats returns empty statistics.
func NewStats() *Stats {
	return &Stats{slotsUsed: map[slotKey]*slotSpan{}, recent: make([]interval, 0, 256)}
}

// Add records one counted result. Lost results have no timing.
func (s *Stats) Add(r *schema.Result) {
	if r.Status == schema.StatusLost || r.Start.IsZero() {
		return
	}
	s.evaluations++
	if s.firstStart.IsZero() || r.Start.Before(s.firstStart) {
		s.firstStart = r.Start
	}
	if r.Start.After(s.lastStart) {
		s.lastStart = r.Start
	}
	s.busy += r.Stop.Sub(r.Start)
	s.durations.add(r.Stop.Sub(r.Start))
	k := slotKey{r.Worker, r.Slot}
	switch sp := s.slotsUsed[k]; {
	case sp == nil:
		s.slotsUsed[k] = &slotSpan{first: r.Start, last: r.Stop}
	default:
		sp.first, sp.last = MinTime(sp.first, r.Start), MaxTime(sp.last, r.Stop)
	}
	s.remember(interval{r.Start, r.Stop})
	if r.Gap >= 0 {
		s.gaps.add(r.Gap)
	}
}

func (s *Stats) remember(iv interval) {
	keep := max(recentKeep, 2*len(s.slotsUsed))
	if len(s.recent) < keep {
		if s.next > 0 { // grown after it wrapped: oldest first again
			s.recent = slices.Concat(s.recent[s.next:], s.recent[:s.next])
			s.next = 0
		}
		s.recent = append(s.recent, iv)
		return
	}
	s.recent[s.next] = iv
	s.next = (s.next + 1) % len(s.recent)
}

// SlotsUsed is the number of slots that evaluated at least one design.
func (s *Stats) SlotsUsed() int { return len(s.slotsUsed) }

// Window is the steady-state window: from the first evaluation's start to
// the moment the last design was handed to a slot.
func (s *Stats) Window() time.Duration { return s.lastStart.Sub(s.firstStart) }

// Utilization is the busy slot-time within the window over the slot-time
// the slots were live in it. A slot is live from its worker's first
// design's start (its worker was there and fed) to its own last design's
// stop; so a worker killed, or started late, counts for the time it was
// there, not for the whole window, and the figure comes from the results
// alone: a replay of the results stream gives the same. A slot that never
// evaluated is not in it: SlotsUsed against the live slots shows those.
func (s *Stats) Utilization() float64 {
	live := s.liveTime()
	if live <= 0 {
		return 0
	}
	busy := s.busy
	for _, iv := range s.recent {
		if iv.stop.After(s.lastStart) {
			busy -= iv.stop.Sub(MaxTime(iv.start, s.lastStart))
		}
	}
	return busy.Seconds() / live.Seconds()
}

// BeforeFirst is the share of the slot-time in Utilization that slots
// spent before their first design (a worker's slots get their first
// designs one after another), rather than between designs: what
// Utilization lacks of 1 through the start.
func (s *Stats) BeforeFirst() float64 {
	live := s.liveTime()
	if live <= 0 {
		return 0
	}
	joined := s.workersFirst()
	var before time.Duration
	for k, sp := range s.slotsUsed {
		before += max(MinTime(sp.first, s.lastStart).Sub(joined[k.worker]), 0)
	}
	return before.Seconds() / live.Seconds()
}

// liveTime is the slot-time the slots were live within the window: each
// from its worker's first start to its own last stop, up to the window's
// end.
func (s *Stats) liveTime() time.Duration {
	if s.Window() <= 0 {
		return 0
	}
	joined := s.workersFirst()
	var live time.Duration
	for k, sp := range s.slotsUsed {
		live += max(MinTime(sp.last, s.lastStart).Sub(joined[k.worker]), 0)
	}
	return live
}

// workersFirst is each worker's first design's start.
func (s *Stats) workersFirst() map[string]time.Time {
	out := map[string]time.Time{}
	for k, sp := range s.slotsUsed {
		if f, ok := out[k.worker]; !ok || sp.first.Before(f) {
			out[k.worker] = sp.first
		}
	}
	return out
}

// MaxSlots is the largest number of slots live at once by their results:
// each from its worker's first start to its own last stop. Slots of a
// killed worker end before those of its replacement begin, so it never
// counts more slots than existed at once.
func (s *Stats) MaxSlots() int {
	type edge struct {
		at time.Time
		d  int
	}
	joined := s.workersFirst()
	edges := make([]edge, 0, 2*len(s.slotsUsed))
	for k, sp := range s.slotsUsed {
		edges = append(edges, edge{joined[k.worker], 1}, edge{sp.last, -1})
	}
	// A slot that ends as another begins does not overlap it.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.d
		most = max(most, n)
	}
	return most
}

// GapQuantile is the q-quantile of the time from storing one result to
// starting the next design on the same slot.
func (s *Stats) GapQuantile(q float64) time.Duration { return s.gaps.quantile(q) }

// DurationQuantile is the q-quantile of the counted evaluations' durations
// (to the histogram's 2%), or 0 before any.
func (s *Stats) DurationQuantile(q float64) time.Duration { return s.durations.quantile(q) }

// MinTime is the earlier of a and b.
func MinTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// MaxTime is the later of a and b.
func MaxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// histogram is a log-bucketed histogram of durations from 1µs to about
// 30 hours with 2% relative resolution.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histGrowth  = 1.02
	histBuckets = 1300
)

var histLog = math.Log(histGrowth)

func (h *histogram) add(d time.Duration) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	if us > 1 {
		i = min(int(math.Log(us)/histLog)+1, histBuckets-1)
	}
	h.counts[i]++
	h.n++
}

func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= max(rank, 1) {
			return bucketValue(i)
		}
	}
	return bucketValue(histBuckets - 1)
}

// bucketValue is the upper bound of bucket i.
func bucketValue(i int) time.Duration {
	if i == 0 {
		return time.Microsecond
	}
	return time.Duration(math.Pow(histGrowth, float64(i)) * float64(time.Microsecond))
}
