package worker

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Every design tracked gets an InProgress every `every` after its start
// and its last one, give or take half a tick, however its start falls
// between sweeps, so no more of them than a ticker per design would send;
// none once it is removed. Sweeps run on a clock of the test's, so the
// bounds are exact.
func TestProgressSweep(t *testing.T) {
	const every = 40 * time.Second
	t0 := time.Unix(1_000_000, 0)
	now := t0
	sent := map[string][]time.Time{}
	p := newProgress(every, func(d design) error {
		sent[d.m.Subject] = append(sent[d.m.Subject], now)
		return nil
	})
	p.now = func() time.Time { return now }
	tick := p.tick()
	if tick != every/progressTicks {
		t.Fatalf("tick %v, want %v", tick, every/progressTicks)
	}
	// Starts at a sweep, just after one, just before one, and mid-way.
	offsets := map[string]time.Duration{"at": 0, "after": time.Millisecond, "before": tick - time.Millisecond, "mid": tick / 2}
	starts, removes := map[string]time.Time{}, map[string]func(){}
	for name, off := range offsets {
		now = t0.Add(off)
		starts[name] = now
		removes[name] = p.add(design{m: &nats.Msg{Subject: name}})
	}
	const sweeps = 40
	batches := 0
	for k := 1; k <= sweeps; k++ {
		now = t0.Add(time.Duration(k) * tick)
		if p.sweep(now) > 0 {
			batches++
		}
	}
	for name := range offsets {
		last := starts[name]
		for _, at := range sent[name] {
			if gap := at.Sub(last); gap > every+tick/2 || gap < every-tick/2 {
				t.Errorf("%s: InProgress %v after the previous (or the start); want between %v and %v", name, gap, every-tick/2, every+tick/2)
			}
			last = at
		}
		if wait := now.Sub(last); wait > every+tick/2 {
			t.Errorf("%s: none for the last %v", name, wait)
		}
		// One every `every` from the start, as a ticker's, give or take
		// the half tick at either end.
		span := now.Sub(starts[name])
		if n, lo, hi := len(sent[name]), int((span-tick/2)/every), int((span+tick/2)/every); n < lo || n > hi {
			t.Errorf("%s: %d InProgress over %v, want %d to %d", name, n, span, lo, hi)
		}
	}
	// Four designs started within a tick of each other go out together:
	// at most two sweeps per `every` send (the starts fall on either side
	// of a half tick), not one per design.
	if most := 2 * sweeps / progressTicks; batches > most {
		t.Errorf("%d sweeps sent something, want %d at most", batches, most)
	}
	removes["at"]()
	before := len(sent["at"])
	for k := 1; k <= 2*progressTicks; k++ {
		now = now.Add(tick)
		p.sweep(now)
	}
	if len(sent["at"]) != before {
		t.Errorf("%d InProgress after the design was removed", len(sent["at"])-before)
	}
	if len(sent["mid"]) == 0 || len(p.live) != 3 {
		t.Errorf("the others: %d sent for mid, %d tracked; want some, 3", len(sent["mid"]), len(p.live))
	}
}
