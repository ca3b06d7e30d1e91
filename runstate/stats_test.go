package runstate

import (
	"math"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// eval is one evaluation on a slot, in seconds from epoch.
type eval struct {
	worker      string
	slot        int
	start, stop float64
	gap         time.Duration
	status      schema.Status
}

func at(s float64) time.Time { return epoch.Add(time.Duration(s * float64(time.Second))) }

func (e eval) result() *schema.Result {
	st := e.status
	if st == "" {
		st = schema.StatusOK
	}
	r := &schema.Result{Status: st, Worker: e.worker, Slot: e.slot, Attempt: 1,
		Start: at(e.start), Stop: at(e.stop), Gap: e.gap}
	if st == schema.StatusLost {
		r.Worker, r.Start, r.Stop = "", time.Time{}, time.Time{}
	}
	return r
}

// back2back is n evaluations of length d, one after another from 0, on
// worker w slot s.
func back2back(w string, s, n int, d float64) []eval {
	out := make([]eval, n)
	for i := range out {
		out[i] = eval{worker: w, slot: s, start: float64(i) * d, stop: float64(i+1) * d, gap: -1}
	}
	return out
}

func statsOf(evals ...[]eval) *Stats {
	s := NewStats()
	for _, es := range evals {
		for _, e := range es {
			s.Add(e.result())
		}
	}
	return s
}

func TestUtilization(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		stats      *Stats
		want       float64
		wantWindow time.Duration
	}{
		{
			name:  "2 slots fully busy",
			stats: statsOf(back2back("a", 0, 10, 1), back2back("a", 1, 10, 1)),
			want:  1, wantWindow: 9 * time.Second,
		},
		{
			// Live slots that never evaluated are not in the results:
			// slots_used against slots shows them.
			name:  "a slot that never evaluated is not counted",
			stats: statsOf(back2back("a", 0, 10, 1)),
			want:  1, wantWindow: 9 * time.Second,
		},
		{
			name: "half of each slot idle",
			stats: statsOf(
				[]eval{{worker: "a", start: 0, stop: 1}, {worker: "a", start: 2, stop: 3}, {worker: "a", start: 4, stop: 5}},
				[]eval{{worker: "b", start: 0, stop: 1}, {worker: "b", start: 2, stop: 3}, {worker: "b", start: 4, stop: 5}},
			),
			// window 0..4: each slot busy 0..1 and 2..3 inside it.
			want: 0.5, wantWindow: 4 * time.Second,
		},
		{
			name: "an evaluation running past the last start is clipped",
			stats: statsOf([]eval{
				{worker: "a", slot: 0, start: 0, stop: 100},
				{worker: "a", slot: 1, start: 0, stop: 2}, {worker: "a", slot: 1, start: 2, stop: 4},
			}),
			// window 0..2: slot 0 busy 2 of it (not 100), slot 1 busy 2.
			want: 1, wantWindow: 2 * time.Second,
		},
		{
			name: "the last evaluation counts only up to its own start",
			stats: statsOf([]eval{
				{worker: "a", start: 0, stop: 1}, {worker: "a", start: 3, stop: 1000},
			}),
			want: 1.0 / 3, wantWindow: 3 * time.Second,
		},
		{
			name: "results out of order",
			stats: statsOf([]eval{
				{worker: "a", slot: 0, start: 4, stop: 6}, {worker: "a", slot: 1, start: 0, stop: 4},
				{worker: "a", slot: 0, start: 0, stop: 4}, {worker: "a", slot: 1, start: 4, stop: 5},
			}),
			want: 1, wantWindow: 4 * time.Second,
		},
		{
			// a is killed after its result at 6; its replacement b, a
			// new worker ID, starts at 7: each counts for its own life,
			// and the second between is nobody's.
			name: "a killed worker and its replacement",
			stats: statsOf(back2back("a", 0, 3, 2), []eval{
				{worker: "b", start: 7, stop: 9}, {worker: "b", start: 9, stop: 11}, {worker: "b", start: 11, stop: 13},
			}),
			want: 1, wantWindow: 11 * time.Second,
		},
		{
			// a's slots 0 and 1 are busy 0..10; a dies, b's two slots
			// evaluate 10..20 with a second's gap between designs: the
			// divisor is two slots throughout, not four.
			name: "replacements do not add to the divisor",
			stats: statsOf(back2back("a", 0, 5, 2), back2back("a", 1, 5, 2), []eval{
				{worker: "b", slot: 0, start: 10, stop: 12}, {worker: "b", slot: 0, start: 13, stop: 15}, {worker: "b", slot: 0, start: 16, stop: 18}, {worker: "b", slot: 0, start: 19, stop: 21},
				{worker: "b", slot: 1, start: 10, stop: 12}, {worker: "b", slot: 1, start: 13, stop: 15}, {worker: "b", slot: 1, start: 16, stop: 18}, {worker: "b", slot: 1, start: 19, stop: 21},
			}),
			// window 0..19: a's slots 10 s each, all busy; b's 9 s each,
			// busy 6 of them.
			want: (20.0 + 12) / (20 + 18), wantWindow: 19 * time.Second,
		},
		{
			name: "lost results are ignored",
			stats: statsOf(back2back("a", 0, 5, 1), []eval{
				{status: schema.StatusLost}, {status: schema.StatusLost},
			}),
			want: 1, wantWindow: 4 * time.Second,
		},
		{
			name:  "no window: one evaluation",
			stats: statsOf([]eval{{worker: "a", start: 0, stop: 5}}),
			want:  0, wantWindow: 0,
		},
		{
			name:  "empty",
			stats: NewStats(),
			want:  0, wantWindow: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.stats.Window(); got != tt.wantWindow {
				t.Errorf("Window = %v, want %v", got, tt.wantWindow)
			}
			if got := tt.stats.Utilization(); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Utilization = %.6f, want %.6f", got, tt.want)
			}
		})
	}
}

// TestBeforeFirst splits what utilization lacks of 1 into the time slots
// waited for their first design and the time between designs.
func TestBeforeFirst(t *testing.T) {
	t.Parallel()
	late := func(w string, slot int, from, to float64) []eval { // back to back, 1 s each, from..to
		var out []eval
		for x := from; x < to; x++ {
			out = append(out, eval{worker: w, slot: slot, start: x, stop: x + 1, gap: -1})
		}
		return out
	}
	tests := []struct {
		name              string
		stats             *Stats
		util, beforeFirst float64
	}{
		{
			// window 0..9: slot 0 busy all of it, slot 1 from 4.
			name:  "a slot that starts late",
			stats: statsOf(late("a", 0, 0, 10), late("a", 1, 4, 10)),
			util:  14.0 / 18, beforeFirst: 4.0 / 18,
		},
		{
			name:  "results out of order",
			stats: statsOf(late("a", 1, 7, 10), late("a", 0, 0, 10), late("a", 1, 4, 7)),
			util:  14.0 / 18, beforeFirst: 4.0 / 18,
		},
		{
			// b joins at 4: its slot counts from its own worker's first
			// design, not from the window's start.
			name:  "a worker that joins late",
			stats: statsOf(late("a", 0, 0, 10), late("b", 0, 4, 10)),
			util:  1, beforeFirst: 0,
		},
		{
			// slot 1 starts at 2, then idles 5..7: 2 s before its first
			// design, 2 s between designs.
			name:  "waiting before the first design and between designs",
			stats: statsOf(late("a", 0, 0, 10), late("a", 1, 2, 5), late("a", 1, 7, 10)),
			util:  14.0 / 18, beforeFirst: 2.0 / 18,
		},
		{
			name:  "every slot starts at once",
			stats: statsOf(late("a", 0, 0, 10), late("b", 0, 0, 10)),
			util:  1, beforeFirst: 0,
		},
		{
			name:  "no window",
			stats: statsOf([]eval{{worker: "a", start: 0, stop: 5}}),
			util:  0, beforeFirst: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.stats.Utilization(); math.Abs(got-tt.util) > 1e-9 {
				t.Errorf("Utilization = %.6f, want %.6f", got, tt.util)
			}
			if got := tt.stats.BeforeFirst(); math.Abs(got-tt.beforeFirst) > 1e-9 {
				t.Errorf("BeforeFirst = %.6f, want %.6f", got, tt.beforeFirst)
			}
		})
	}
}

// TestMaxSlots counts the slots live at once by the results: each from its
// worker's first design to its own last.
func TestMaxSlots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		stats *Stats
		want  int
	}{
		{"one worker of two slots", statsOf(back2back("a", 0, 5, 1), back2back("a", 1, 5, 1)), 2},
		{
			"a killed worker and its replacement never overlap",
			statsOf(back2back("a", 0, 3, 2), back2back("a", 1, 3, 2), []eval{
				{worker: "b", slot: 0, start: 7, stop: 9}, {worker: "b", slot: 1, start: 7.5, stop: 9},
			}), 2,
		},
		{
			"a replacement whose first design starts as the last one stops",
			statsOf([]eval{{worker: "a", start: 0, stop: 2}, {worker: "b", start: 2, stop: 4}}), 1,
		},
		{
			// a's slot 1 counts from a's first design, at 0.
			"a slot counts from its worker's first design",
			statsOf([]eval{{worker: "a", slot: 0, start: 0, stop: 10}, {worker: "a", slot: 1, start: 5, stop: 10},
				{worker: "b", start: 1, stop: 3}}), 3,
		},
		{"none", NewStats(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.stats.MaxSlots(); got != tt.want {
				t.Errorf("MaxSlots = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestUtilizationManySlots is a steady state of 50 slots with a fixed idle
// gap, beyond the ring's first growth.
func TestUtilizationManySlots(t *testing.T) {
	t.Parallel()
	const slots, n = 50, 200
	s := NewStats()
	for slot := range slots {
		for i := range n {
			// busy 0.8 s, idle 0.2 s, slots staggered by 10 ms
			start := float64(i) + float64(slot)/100
			s.Add(eval{worker: "w", slot: slot, start: start, stop: start + 0.8, gap: 200 * time.Millisecond}.result())
		}
	}
	if got := s.Utilization(); math.Abs(got-0.8) > 0.01 {
		t.Errorf("Utilization = %.4f, want 0.80 ± 0.01", got)
	}
	if got := s.SlotsUsed(); got != slots {
		t.Errorf("SlotsUsed = %d, want %d", got, slots)
	}
	if got := s.GapQuantile(0.5); !within(got, 200*time.Millisecond, 0.02) {
		t.Errorf("gap p50 = %v, want 200ms within 2%%", got)
	}
}

func within(got, want time.Duration, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*float64(want)
}

func TestGapQuantile(t *testing.T) {
	t.Parallel()
	ms := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(i+1) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name string
		gaps []time.Duration
		q    float64
		want time.Duration
	}{
		{"p50 of 1..100 ms", ms(100), 0.5, 50 * time.Millisecond},
		{"p99 of 1..100 ms", ms(100), 0.99, 99 * time.Millisecond},
		{"p100 of 1..100 ms", ms(100), 1, 100 * time.Millisecond},
		{"p0 is the least", ms(100), 0, time.Millisecond},
		{"p10 of 1..1000 ms", ms(1000), 0.1, 100 * time.Millisecond},
		{"one gap", []time.Duration{1234 * time.Microsecond}, 0.5, 1234 * time.Microsecond},
		{"a long gap", []time.Duration{3 * time.Hour}, 0.99, 3 * time.Hour},
		{"seconds", []time.Duration{2 * time.Second, 3 * time.Second, 7 * time.Second}, 0.5, 3 * time.Second},
		{"first designs (-1) are not gaps", []time.Duration{-1, -1, -1, 5 * time.Millisecond}, 0.01, 5 * time.Millisecond},
		{"no gaps", nil, 0.5, 0},
		{"only first designs", []time.Duration{-1, -1}, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewStats()
			for i, g := range tt.gaps {
				s.Add(eval{worker: "w", slot: i % 3, start: float64(i), stop: float64(i) + 0.5, gap: g}.result())
			}
			got := s.GapQuantile(tt.q)
			if tt.want == 0 {
				if got != 0 {
					t.Errorf("GapQuantile(%v) = %v, want 0", tt.q, got)
				}
				return
			}
			// Buckets are 2% wide and report their upper bound.
			if got < tt.want || !within(got, tt.want, 0.02) {
				t.Errorf("GapQuantile(%v) = %v, want %v to +2%%", tt.q, got, tt.want)
			}
		})
	}
}

// TestGapTiny checks the bottom bucket: a gap of zero or under a
// microsecond reads as 1µs.
func TestGapTiny(t *testing.T) {
	t.Parallel()
	for _, g := range []time.Duration{0, 1, 999} {
		s := NewStats()
		s.Add(eval{worker: "w", start: 0, stop: 1, gap: g}.result())
		if got := s.GapQuantile(0.5); got != time.Microsecond {
			t.Errorf("gap %v: p50 = %v, want 1µs", g, got)
		}
	}
}

func TestHistogramResolution(t *testing.T) {
	t.Parallel()
	// Every duration from 2µs to 24h reads back within +2%.
	for d := 2 * time.Microsecond; d < 24*time.Hour; d = d*13/10 + 7 {
		var h histogram
		h.add(d)
		got := h.quantile(0.5)
		if got < d*98/100 || !within(got, d, 0.021) {
			t.Fatalf("histogram of %v reads %v", d, got)
		}
	}
}

func TestSlotsUsed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		evals []eval
		want  int
	}{
		{"one slot many times", back2back("a", 0, 5, 1), 1},
		{"same slot index on two workers", []eval{
			{worker: "a", slot: 0, stop: 1}, {worker: "b", slot: 0, stop: 1},
		}, 2},
		{"2 workers x 4 slots", func() []eval {
			var out []eval
			for _, w := range []string{"a", "b"} {
				for s := range 4 {
					out = append(out, back2back(w, s, 3, 1)...)
				}
			}
			return out
		}(), 8},
		{"lost results have no slot", []eval{
			{worker: "a", slot: 0, stop: 1}, {status: schema.StatusLost}, {status: schema.StatusLost},
		}, 1},
		{"failures use a slot too", []eval{
			{worker: "a", slot: 0, stop: 1, status: schema.StatusInfeasible},
			{worker: "a", slot: 1, stop: 1, status: schema.StatusError},
			{worker: "a", slot: 2, stop: 1, status: schema.StatusTimeout},
		}, 3},
		{"none", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := statsOf(tt.evals).SlotsUsed(); got != tt.want {
				t.Errorf("SlotsUsed = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestStatsRing checks that the ring of recent results stays bounded and
// still clips the latest evaluations once it wraps.
func TestStatsRing(t *testing.T) {
	t.Parallel()
	s := NewStats()
	n := recentKeep + 1000
	for i := range n {
		s.Add(eval{worker: "w", start: float64(i), stop: float64(i + 1), gap: 0}.result())
	}
	s.Add(eval{worker: "w", slot: 1, start: float64(n - 1), stop: float64(n + 1000)}.result())
	if len(s.recent) != recentKeep {
		t.Errorf("ring holds %d, want %d", len(s.recent), recentKeep)
	}
	// window 0..n-1 on 2 slots: slot 0 busy throughout, slot 1 not at all.
	if got := s.Utilization(); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("Utilization = %.6f, want 0.5", got)
	}
}

// TestStatsRingManySlots checks the clipping with more slots than
// recentKeep: every slot's last evaluation runs past the last start, and
// all of them must be clipped, not only the latest recentKeep.
func TestStatsRingManySlots(t *testing.T) {
	t.Parallel()
	s := NewStats()
	slots := recentKeep + 5000
	// Each slot: evaluations 0..10 s and 10..20 s, then one from 20 s
	// running to 30 s. The last design is handed out at 20 s: the window
	// is 0..20 s, every slot busy throughout it. Three evaluations a slot
	// wrap the ring of twice the slots once it has grown.
	for round := range 3 {
		for i := range slots {
			s.Add(eval{worker: "w", slot: i, start: float64(10 * round), stop: float64(10 * (round + 1))}.result())
		}
	}
	if len(s.recent) < slots {
		t.Errorf("ring holds %d, want at least the %d slots", len(s.recent), slots)
	}
	if got := s.Utilization(); math.Abs(got-1) > 1e-9 {
		t.Errorf("Utilization = %.6f, want 1", got)
	}
}
