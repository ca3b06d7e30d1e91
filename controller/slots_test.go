package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
)

func TestAlive(t *testing.T) {
	t.Parallel()
	seen := epoch
	cases := []struct {
		name    string
		leaving bool
		after   time.Duration
		want    bool
	}{
		{name: "just heard", after: 0, want: true},
		{name: "within three intervals", after: 2900 * time.Millisecond, want: true},
		{name: "three intervals silent", after: 3 * time.Second, want: false},
		{name: "leaving", leaving: true, after: 0, want: false},
	}
	for _, tc := range cases {
		p := schema.Presence{Worker: "w", Slots: 1, Interval: time.Second, Leaving: tc.leaving}
		if got := runstate.Alive(p, seen, seen.Add(tc.after)); got != tc.want {
			t.Errorf("%s: Alive = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A heartbeat read from the bucket keeps the time it was stored: a
// worker killed before the controller started is not live, does not add
// to the slots seen at once and does not start the working time; an older
// heartbeat read after a newer one arrived is dropped.
func TestSlotTrackerStoredHeartbeats(t *testing.T) {
	t.Parallel()
	now := epoch.Add(time.Minute)
	tr := newSlotTracker()
	if tr.putAt(presence("dead", 6, 6, time.Second, false), epoch, now) {
		t.Error("a worker whose only heartbeat is a minute old joined")
	}
	if got := tr.live(now); got.slots != 0 || got.busy != 0 {
		t.Errorf("a heartbeat stored a minute ago counts %+v live", got)
	}
	if tr.MaxLive() != 0 || !tr.FirstLive().IsZero() {
		t.Errorf("MaxLive %d, FirstLive %v after a stale heartbeat; want 0 and none", tr.MaxLive(), tr.FirstLive())
	}
	tr.put(presence("w", 2, 1, time.Second, false), now)
	tr.putAt(presence("w", 2, 0, time.Second, true), now.Add(-500*time.Millisecond), now)
	if got := tr.live(now); got.slots != 2 || got.busy != 1 {
		t.Errorf("live = %+v after an older leaving heartbeat read late; want the newer one's 2 slots, 1 busy", got)
	}
	if !tr.FirstLive().Equal(now) {
		t.Errorf("FirstLive = %v, want %v", tr.FirstLive(), now)
	}
	// A stored heartbeat still current counts.
	tr.putAt(presence("v", 3, 0, time.Second, false), now.Add(-time.Second), now)
	if got := tr.live(now); got.slots != 5 {
		t.Errorf("live slots = %d, want 5 with a heartbeat stored a second ago", got.slots)
	}
}

// The closed spans are compacted without losing the most slots seen at
// once.
func TestSlotTrackerCompact(t *testing.T) {
	t.Parallel()
	tr := newSlotTracker()
	at := epoch
	// Five workers of 4 slots at once, then workers of 1 slot one after
	// another, each killed (silent) before the next joins.
	for i := range 5 {
		tr.put(presence(fmt.Sprint("big", i), 4, 0, time.Second, false), at)
	}
	for i := range 3 * spansKeep {
		at = at.Add(time.Minute)
		tr.put(presence(fmt.Sprint("w", i), 1, 0, time.Second, false), at)
		tr.put(presence(fmt.Sprint("w", i), 1, 0, time.Second, false), at.Add(time.Second))
		tr.prune(at.Add(2 * time.Second))
	}
	if len(tr.spans) > 2*spansKeep {
		t.Errorf("%d closed spans kept, want at most %d", len(tr.spans), 2*spansKeep)
	}
	if got := tr.MaxLive(); got != 20 {
		t.Errorf("MaxLive = %d, want 20", got)
	}
}

// A controller started after a worker was killed reads its last heartbeat
// from the bucket with the time it was stored: the dead worker's slots are
// neither live nor busy on any progress line, and the summary's slots does
// not count them.
func TestStoredHeartbeatOfADeadWorker(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	if err := broker.Declare(bu.ctx, bu.js); err != nil {
		t.Fatal(err)
	}
	kv, err := bu.js.KeyValue(bu.ctx, schema.PresenceBucket)
	if err != nil {
		t.Fatal(err)
	}
	const run, interval = "dead", 200 * time.Millisecond
	p := &schema.Presence{V: schema.Version, Run: run, Worker: "killed", Host: "node-a", Slots: 6, Busy: 6,
		Started: time.Now(), Heartbeat: time.Now(), Interval: interval}
	b, err := schema.EncodePresence(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(bu.ctx, schema.PresenceKey(run, p.Worker), b); err != nil {
		t.Fatal(err)
	}
	// The worker dies with its heartbeat: let the heartbeat age past three
	// intervals, as it does before a controller restarts.
	time.Sleep(4 * interval)
	var mu sync.Mutex
	var progress []Progress
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool, cfg.Progress = 10, 2, 2, 10*time.Millisecond
	cfg.OnProgress = func(p Progress) { mu.Lock(); progress = append(progress, p); mu.Unlock() }
	ctx, cancel := context.WithCancel(bu.ctx)
	defer cancel()
	done := bu.start(t, ctx, cfg)
	bu.waitFor(t, "ten progress lines", func() bool { mu.Lock(); defer mu.Unlock(); return len(progress) >= 10 })
	cancel()
	o := bu.wait(t, done)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range progress {
		if p.Slots != 0 || p.Busy != 0 || p.Workers != 0 {
			t.Fatalf("progress with %d workers, %d slots, %d busy; the only heartbeat is a dead worker's", p.Workers, p.Slots, p.Busy)
		}
	}
	if o.s != nil && o.s.Slots != 0 {
		t.Errorf("summary slots %d; no slot was live", o.s.Slots)
	}
}
