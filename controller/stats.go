package controller

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
	slotsUsed   map[slotKey]time.Time // each slot's first start
	gaps        histogram
}

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
	return &Stats{slotsUsed: map[slotKey]time.Time{}, recent: make([]interval, 0, 256)}
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
	k := slotKey{r.Worker, r.Slot}
	if first, ok := s.slotsUsed[k]; !ok || r.Start.Before(first) {
		s.slotsUsed[k] = r.Start
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

// Utilization is busy slot-time within the window over slots × window.
func (s *Stats) Utilization(slots int) float64 {
	w := s.Window()
	if w <= 0 || slots < 1 {
		return 0
	}
	busy := s.busy
	for _, iv := range s.recent {
		if iv.stop.After(s.lastStart) {
			busy -= iv.stop.Sub(maxTime(iv.start, s.lastStart))
		}
	}
	return busy.Seconds() / (float64(slots) * w.Seconds())
}

// BeforeFirst is the share of slots × window that the slots spent before
// their first design: what Utilization lacks of 1 through the start (the
// designs handed out one slot after another) rather than between designs.
// A slot that never evaluated is counted for the whole window.
func (s *Stats) BeforeFirst(slots int) float64 {
	w := s.Window()
	if w <= 0 || slots < 1 {
		return 0
	}
	var before time.Duration
	for _, first := range s.slotsUsed {
		before += first.Sub(s.firstStart)
	}
	before += time.Duration(max(slots-len(s.slotsUsed), 0)) * w
	return before.Seconds() / (float64(slots) * w.Seconds())
}

// GapQuantile is the q-quantile of the time from storing one result to
// starting the next design on the same slot.
func (s *Stats) GapQuantile(q float64) time.Duration { return s.gaps.quantile(q) }

func maxTime(a, b time.Time) time.Time {
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
