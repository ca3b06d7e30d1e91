package controller

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
)

// flakyStore fails its first failDeletes deletions, as a store whose
// broker is out does.
type flakyStore struct {
	checkpoint.Store
	failDeletes atomic.Int64
}

func (s *flakyStore) Delete(ctx context.Context, design string) error {
	if s.failDeletes.Add(-1) >= 0 {
		return errors.New("nats: server is disconnected")
	}
	return s.Store.Delete(ctx, design)
}

// putOnly stores a checkpoint for d as a worker whose acknowledgement was
// lost does: the object is whole in the store, but no result names it.
func (b *ckptBundle) putOnly(d *schema.Design) {
	b.t.Helper()
	p := b.store.OutPath(d.ID, "w")
	if err := os.WriteFile(p, []byte(d.ID), 0o644); err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.store.Put(context.Background(), d.ID, p); err != nil {
		b.t.Fatal(err)
	}
}

// resultNoCheckpoint folds d's result, which says nothing of a checkpoint.
func (b *ckptBundle) resultNoCheckpoint(d *schema.Design, fitness float64) {
	now := time.Now()
	r := &schema.Result{V: schema.Version, Run: "r", DesignID: d.ID, Design: *d, Status: schema.StatusOK,
		Fitness: fitness, Worker: "w", Attempt: 1, Start: now, Stop: now, CheckpointError: "put: nats: server is disconnected"}
	b.tr.result(r, b.fold.Apply(r, nil), b.fold, true)
}

// The sweep makes the store the rule, whatever the results claimed: a
// checkpoint whose upload "failed" is deleted once its design is out of
// the pool, deletions that fail are retried until they succeed, one of a
// design still without a result is kept, and the end's listing is what
// the summary reports.
func TestCheckpointSweep(t *testing.T) {
	t.Parallel()
	dir, err := checkpoint.OpenDir(t.TempDir(), "r")
	if err != nil {
		t.Fatal(err)
	}
	fs := &flakyStore{Store: dir}
	fs.failDeletes.Store(3)
	tr := newCkptTracker(fs, schema.Checkpoints{Store: schema.CheckpointDir, Max: 1 << 20, Keep: schema.KeepPool, Inherit: true}, testutil.Logger(t))
	b := &ckptBundle{t: t, store: fs, tr: tr, fold: runstate.NewFold(runstate.NewTally("r", 100, runstate.Rules{}), 2, 2, runstate.ReplaceWorst)}
	ctx, cancel := context.WithCancel(context.Background())
	go tr.run(ctx)

	b.result(b.design(1, 0), 0.5, true)
	b.result(b.design(2, 0), 0.6, true)
	// Design 3's upload succeeded but its worker never heard: its result
	// says the upload failed. It is worse than the pool, so its
	// checkpoint is an orphan the tracker knows nothing of.
	d3 := b.design(3, 0)
	b.putOnly(d3)
	b.resultNoCheckpoint(d3, 0.1)
	// Design 4 beats the pool: 1's checkpoint is deleted, but the first
	// deletions fail (the broker is out).
	b.result(b.design(4, 0), 0.9, true)
	// Design 5 is in flight: its checkpoint is stored, its result not yet.
	b.putOnly(b.design(5, 0))
	open := func(id string) bool { return id == schema.DesignID("r", 5) }
	if n, err := tr.sweep(context.Background(), open); err != nil || n != 1 {
		t.Fatalf("sweep queued %d (%v); want 1, design 3's orphan", n, err)
	}
	b.stored(2, 4, 5)
	if fs.failDeletes.Load() >= 0 {
		t.Fatalf("the failing deletions were not tried")
	}
	cancel()
	<-tr.done
	tr.measure(context.Background(), testutil.Logger(t))
	s := tr.summary()
	if !s.Listed || s.Stored != 3 || s.Bytes == 0 {
		t.Errorf("summary %+v; want the store's listing: 3 checkpoints", s)
	}
}

func TestSeqOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		run, id string
		seq     uint64
		ok      bool
	}{{"r", "r-12", 12, true}, {"run-a", "run-a-3", 3, true}, {"r", "other-1", 0, false}, {"r", "r-x", 0, false}, {"r", "r-0", 0, false}} {
		if seq, ok := seqOf(tt.run, tt.id); seq != tt.seq || ok != tt.ok {
			t.Errorf("seqOf(%q, %q) = %d, %v; want %d, %v", tt.run, tt.id, seq, ok, tt.seq, tt.ok)
		}
	}
}

// A design's saved progress lives while the design has no terminal
// result: the one committed through this controller is deleted with the
// design's result, one left by an earlier controller by the sweep, and
// one of a design in flight stays, whatever Keep says.
func TestProgressDeleted(t *testing.T) {
	t.Parallel()
	b := newCkptBundle(t, schema.KeepAll)
	open := func(id string) bool { seq, ok := seqOf("r", id); return ok && !b.fold.Has(seq) }
	b.tr.open = open
	names := func() []string {
		refs, err := b.store.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range refs {
			got = append(got, r.Design)
		}
		slices.Sort(got)
		return got
	}
	progress := func(seq uint64) string {
		name := schema.ProgressName(schema.DesignID("r", seq))
		p := b.store.OutPath(name, "w")
		if err := os.WriteFile(p, []byte("progress"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.Put(context.Background(), name, p); err != nil {
			t.Fatal(err)
		}
		return name
	}
	b.tr.committed(progress(1))
	progress(2) // an earlier controller's: this one never heard of it
	b.tr.committed(progress(3))
	b.result(b.design(1, 0), 0.5, true)
	b.result(b.design(2, 0), 0.6, true)
	want := []string{"r-1", "r-2", "r-3.progress", "r-2.progress"}
	slices.Sort(want)
	testutil.WaitFor(t, 10*time.Second, "design 1's progress deleted with its result", func() bool { return slices.Equal(names(), want) })
	if n, err := b.tr.sweep(context.Background(), open); err != nil || n != 1 {
		t.Fatalf("sweep queued %d (%v); want 1, design 2's progress", n, err)
	}
	want = []string{"r-1", "r-2", "r-3.progress"}
	testutil.WaitFor(t, 10*time.Second, "design 2's progress swept, design 3's kept", func() bool { return slices.Equal(names(), want) })
	if d := b.tr.Deleted(); d != 0 {
		t.Errorf("%d checkpoints deleted; want none: saved progress is no checkpoint", d)
	}
}

// Each sweep during the run purges what writers left unfinished (here a
// partial file; in the object store, chunks whose commit was refused),
// not only the sweep at a controller's start.
func TestSweepPurgesLeftoversDuringRun(t *testing.T) {
	t.Parallel()
	b := newCkptBundle(t, schema.KeepPool)
	c := &Controller{ckpt: b.tr, live: true, fold: b.fold, log: testutil.Logger(t), cfg: Config{Run: "r", Now: time.Now}}
	b.tr.open = c.designOpen
	p := b.store.OutPath(schema.DesignID("r", 1), "w9-0-0-1")
	if err := os.WriteFile(p, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-checkpoint.OrphanAge - time.Minute)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	c.sweepCheckpoints(context.Background())
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old partial file is still there after the sweep: %v", err)
	}
}

// gatedStore holds its deletions until release closes, and runs
// afterList between its listing and the listing's return, as a slow
// listing that a deletion overtakes.
type gatedStore struct {
	checkpoint.Store
	release   chan struct{}
	deletes   atomic.Int64
	afterList func()
}

func (s *gatedStore) Delete(ctx context.Context, design string) error {
	<-s.release
	s.deletes.Add(1)
	return s.Store.Delete(ctx, design)
}

func (s *gatedStore) List(ctx context.Context) ([]schema.CheckpointRef, error) {
	refs, err := s.Store.List(ctx)
	if s.afterList != nil {
		s.afterList()
	}
	return refs, err
}

// A sweep does not queue again a deletion the tracker has in hand, nor
// one that ended while the sweep listed the store (the listing still
// names it): each was counted as an orphan and deleted twice.
func TestSweepSkipsDeletionUnderWay(t *testing.T) {
	t.Parallel()
	dir, err := checkpoint.OpenDir(t.TempDir(), "r")
	if err != nil {
		t.Fatal(err)
	}
	gs := &gatedStore{Store: dir, release: make(chan struct{})}
	tr := newCkptTracker(gs, schema.Checkpoints{Store: schema.CheckpointDir, Max: 1 << 20, Keep: schema.KeepPool, Inherit: true}, testutil.Logger(t))
	b := &ckptBundle{t: t, store: gs, tr: tr, fold: runstate.NewFold(runstate.NewTally("r", 100, runstate.Rules{}), 2, 2, runstate.ReplaceWorst)}
	var open sync.Once
	release := func() { open.Do(func() { close(gs.release) }) }
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { release(); cancel(); <-tr.done }()
	go tr.run(ctx)
	none := func(string) bool { return false }

	b.result(b.design(1, 0), 0.5, true)
	b.result(b.design(2, 0), 0.6, true)
	b.result(b.design(3, 0), 0.9, true) // 1 leaves the pool: its deletion waits at the gate
	deadline := time.Now().Add(10 * time.Second)
	for inHand := false; !inHand; time.Sleep(time.Millisecond) {
		tr.mu.Lock()
		inHand = tr.deleting[schema.DesignID("r", 1)]
		tr.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("design 1's deletion never came into hand")
		}
	}
	if n, err := tr.sweep(context.Background(), none); err != nil || n != 0 {
		t.Fatalf("sweep with design 1's deletion in hand queued %d (%v); want 0", n, err)
	}

	// The listing names design 1; before it returns, the deletion ends.
	gs.afterList = func() {
		gs.afterList = nil
		release()
		for deadline := time.Now().Add(10 * time.Second); tr.Deleted() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("design 1's deletion did not end once released")
				return
			}
		}
	}
	if n, err := tr.sweep(context.Background(), none); err != nil || n != 0 {
		t.Fatalf("sweep whose listing a deletion overtook queued %d (%v); want 0", n, err)
	}
	b.stored(2, 3)
	if d := gs.deletes.Load(); d != 1 || tr.Deleted() != 1 {
		t.Errorf("%d deletions, %d counted; want design 1's, once", d, tr.Deleted())
	}
}
