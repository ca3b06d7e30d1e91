package dashboard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
)

// followSetup stores a run's record, n results and the heartbeats of 20
// workers on an embedded broker.
func followSetup(t testing.TB, n int) *testutil.Broker {
	t.Helper()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, time.Minute)
	const run = "r"
	rec, err := schema.EncodeRun(&schema.Run{V: schema.Version, Run: run, Budget: 1 << 30, Init: 10, Pool: 10, Replace: "worst", Phase: schema.PhaseRunning})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := b.JS.KeyValue(ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, run, rec); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := range n {
		seq := uint64(i + 1)
		id := schema.DesignID(run, seq)
		data, err := schema.EncodeResult(&schema.Result{V: schema.Version, Run: run, DesignID: id, Design: schema.Design{V: schema.Version, Run: run, ID: id, Seq: seq, Origin: schema.OriginRandom, Created: t0,
			Genome: map[string]any{"lr": 0.01, "batch": 32}}, Status: schema.StatusOK, Fitness: float64(seq % 1000), Worker: "w1", Host: "h", Slot: int(seq % 500), Attempt: 1, Start: t0, Stop: t0.Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.JS.PublishAsync(schema.ResultSubject(run), data); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-b.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("results not stored")
	}
	return b
}

// The follower reads every stored result, in order, into its model, and
// publishes snapshots.
func TestFollower(t *testing.T) {
	t.Parallel()
	const n = 500
	b := followSetup(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := NewHub()
	ch, stop := hub.Subscribe()
	defer stop()
	f := &Follower{JS: b.JS, RunID: "r", Hub: hub, Every: 50 * time.Millisecond, Log: testutil.Logger(t)}
	ready := make(chan *Model, 1)
	go func() { _ = f.Run(ctx, ready) }()
	m := <-ready
	testutil.WaitFor(t, time.Minute, "every result folded", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.fold.Terminal() == n
	})
	select {
	case data := <-ch:
		if len(data) == 0 {
			t.Error("empty snapshot")
		}
	case <-time.After(time.Minute):
		t.Fatal("no snapshot published")
	}
}

// BenchmarkFollow is the follower's cost per stored result, broker
// included (it runs in this process): read, decode and fold.
func BenchmarkFollow(b *testing.B) {
	br := followSetup(b, b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Bool
	f := &Follower{JS: br.JS, RunID: "r", Hub: NewHub(), Every: time.Hour, Log: testutil.Logger(b)}
	ready := make(chan *Model, 1)
	b.ResetTimer()
	go func() { _ = f.Run(ctx, ready) }()
	m := <-ready
	for !done.Load() {
		m.mu.Lock()
		done.Store(m.fold.Terminal() == b.N)
		m.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkTick is the follower's cost per tick at 10,000 slots (20
// workers of 500): reading the run's record, lease and heartbeats, and
// drawing and encoding the snapshot.
func BenchmarkTick(b *testing.B) {
	br := followSetup(b, 2000)
	ctx := testutil.Context(b, 5*time.Minute)
	kv, err := br.JS.KeyValue(ctx, schema.PresenceBucket)
	if err != nil {
		b.Fatal(err)
	}
	for w := range 20 {
		id := "w" + string(rune('a'+w))
		data, err := schema.EncodePresence(&schema.Presence{V: schema.Version, Run: "r", Worker: id, Host: "h" + id, Slots: 500, Busy: 400,
			Started: time.Now(), Heartbeat: time.Now(), Interval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := kv.Put(ctx, schema.PresenceKey("r", id), data); err != nil {
			b.Fatal(err)
		}
	}
	f := &Follower{JS: br.JS, RunID: "r", Hub: NewHub(), Every: time.Hour, Log: testutil.Logger(b), Now: time.Now}
	ready := make(chan *Model, 1)
	go func() { _ = f.Run(ctx, ready) }()
	m := <-ready
	testutil.WaitFor(b, time.Minute, "results folded", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.fold.Terminal() == 2000
	})
	r := history.FromJS(br.JS)
	b.ResetTimer()
	for range b.N {
		f.tick(ctx, r, "r")
	}
	if s := m.Snapshot(time.Now()); s.Slots.Total != 10000 {
		b.Fatalf("%d slots, want 10000", s.Slots.Total)
	}
}

// A dashboard fed by its controller folds every result handed to it, those
// handed before the run's record was read included, in order.
func TestFed(t *testing.T) {
	t.Parallel()
	b := followSetup(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := Start(ctx, b.JS, "r", Config{Addr: "127.0.0.1:0"}, Options{Fed: true}, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	const n = 300
	for i := range n {
		seq := uint64(i + 1)
		id := schema.DesignID("r", seq)
		d.Feed(seq, &schema.Result{Run: "r", DesignID: id, Design: schema.Design{Run: "r", ID: id, Seq: seq, Origin: schema.OriginRandom},
			Status: schema.StatusOK, Fitness: float64(seq), Worker: "w", Attempt: 1, Start: t0, Stop: t0}, nil, 1<<30)
	}
	var m *Model
	testutil.WaitFor(t, time.Minute, "every result fed folded", func() bool {
		m = d.srv.model()
		if m == nil {
			return false
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.fold.Terminal() == n
	})
	if best := m.Snapshot(time.Now()).Best; best == nil || *best != n {
		t.Errorf("best %v, want %d: the last result fed", best, n)
	}
	cancel()
	<-d.Done()
}
