package controller

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
)

// ckptBundle drives a tracker over a real shared-directory store with a
// fold of pool 2, replace worst.
type ckptBundle struct {
	t     *testing.T
	store checkpoint.Store
	tr    *ckptTracker
	fold  *runstate.Fold
}

func newCkptBundle(t *testing.T, keep string) *ckptBundle {
	s, err := checkpoint.OpenDir(t.TempDir(), "r")
	if err != nil {
		t.Fatal(err)
	}
	tr := newCkptTracker(s, schema.Checkpoints{Store: schema.CheckpointDir, Max: 1 << 20, Keep: keep, Inherit: true}, testutil.Logger(t))
	b := &ckptBundle{t: t, store: s, tr: tr,
		fold: runstate.NewFold(runstate.NewTally("r", 100, runstate.Rules{}), 2, 2, runstate.ReplaceWorst)}
	ctx, cancel := context.WithCancel(context.Background())
	go tr.run(ctx)
	t.Cleanup(func() { cancel(); <-tr.done })
	return b
}

func (b *ckptBundle) design(seq uint64, parent uint64) *schema.Design {
	d := &schema.Design{V: schema.Version, Run: "r", ID: schema.DesignID("r", seq), Seq: seq,
		Genome: map[string]any{"x": seq}, Origin: schema.OriginRandom, Created: time.Now()}
	if parent > 0 {
		d.Origin, d.Parents = schema.OriginMutant, []string{schema.DesignID("r", parent)}
	}
	return d
}

// result stores d's checkpoint as a worker would, then folds its result.
func (b *ckptBundle) result(d *schema.Design, fitness float64, live bool) {
	b.t.Helper()
	b.resultBytes(d, fitness, live, []byte(d.ID))
}

func (b *ckptBundle) resultBytes(d *schema.Design, fitness float64, live bool, data []byte) {
	b.t.Helper()
	p := b.store.OutPath(d.ID, "w")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		b.t.Fatal(err)
	}
	ref, err := b.store.Put(context.Background(), d.ID, p)
	if err != nil {
		b.t.Fatal(err)
	}
	now := time.Now()
	r := &schema.Result{V: schema.Version, Run: "r", DesignID: d.ID, Design: *d, Status: schema.StatusOK,
		Fitness: fitness, Worker: "w", Attempt: 1, Start: now, Stop: now, Checkpoint: &ref}
	b.tr.result(r, b.fold.Apply(r, nil), b.fold, live)
}

// stored waits for the deletions queued to be done and returns the
// designs whose checkpoint is in the store.
func (b *ckptBundle) stored(want ...uint64) {
	b.t.Helper()
	var ids []string
	for _, s := range want {
		ids = append(ids, schema.DesignID("r", s))
	}
	slices.Sort(ids)
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		refs, err := b.store.List(context.Background())
		if err != nil {
			b.t.Fatal(err)
		}
		got = got[:0]
		for _, r := range refs {
			got = append(got, r.Design)
		}
		slices.Sort(got)
		if slices.Equal(got, ids) {
			return
		}
	}
	b.t.Fatalf("the store holds %v, want %v", got, ids)
}

// A checkpoint lives while its design is in the pool or the parent of a
// design in flight, and a mutant is told of its parent's.
func TestCheckpointRule(t *testing.T) {
	t.Parallel()
	b := newCkptBundle(t, schema.KeepPool)
	d1, d2 := b.design(1, 0), b.design(2, 0)
	b.tr.published(d1)
	b.tr.published(d2)
	b.result(d1, 0.5, true)
	b.result(d2, 0.6, true)
	d3 := b.design(3, 1) // a mutant of 1
	b.tr.published(d3)
	if d3.Inherit == nil || d3.Inherit.Design != d1.ID || d3.Inherit.Size != int64(len(d1.ID)) {
		t.Fatalf("mutant of %s told of %+v", d1.ID, d3.Inherit)
	}
	d4 := b.design(4, 2)
	b.tr.published(d4)
	// 4 evicts 1, the worst; 1 still has a child in flight, 3.
	b.result(d4, 0.7, true)
	b.stored(1, 2, 4)
	// 3 comes back worse than the pool: it is evicted at once, and its
	// parent, 1, is needed no more.
	b.result(d3, 0.1, true)
	b.stored(2, 4)
	// A second evaluation of 3 stores its checkpoint again; it goes.
	b.result(d3, 0.1, true)
	b.stored(2, 4)
	// The count follows the deletion it counts.
	for deadline := time.Now().Add(10 * time.Second); b.tr.Deleted() < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if got := b.tr.summary(); got.Stored != 2 || got.Deleted != 3 {
		t.Errorf("summary %+v, want 2 stored, 3 deleted", got)
	}
	// A second evaluation of pool member 2 stores other bytes: its next
	// child is told of those.
	b.resultBytes(d2, 0.6, true, []byte("other weights"))
	d5 := b.design(5, 2)
	b.tr.published(d5)
	if d5.Inherit == nil || d5.Inherit.Size != int64(len("other weights")) {
		t.Errorf("a child of %s after its second evaluation told of %+v, want the second evaluation's checkpoint", d2.ID, d5.Inherit)
	}
	b.stored(2, 4)
}

// With keep best, the best design's checkpoint outlives its eviction
// (replace oldest) and the run; the rest go at the end.
func TestCheckpointKeepBest(t *testing.T) {
	t.Parallel()
	b := newCkptBundle(t, schema.KeepBest)
	b.fold = runstate.NewFold(runstate.NewTally("r", 100, runstate.Rules{}), 2, 2, runstate.ReplaceOldest)
	for seq, fit := range []float64{0.9, 0.1, 0.2, 0.3} {
		b.result(b.design(uint64(seq+1), 0), fit, true)
	}
	b.stored(1, 3, 4) // 1 left the pool, but is the best
	b.tr.finish()
	b.stored(1)
}

// A restarted controller's rebuild keeps the pool's checkpoints and those
// of designs in flight and their parents, and deletes the rest.
func TestCheckpointRebuild(t *testing.T) {
	t.Parallel()
	b := newCkptBundle(t, schema.KeepPool)
	for seq, fit := range []float64{0.1, 0.2, 0.5, 0.6} {
		b.result(b.design(uint64(seq+1), 0), fit, false) // replayed: nothing deleted
	}
	b.stored(1, 2, 3, 4)
	inFlight := []*schema.Design{b.design(5, 1)} // a child of 1, evicted already
	if err := b.tr.rebuild(context.Background(), func(context.Context) ([]*schema.Design, error) { return inFlight, nil }); err != nil {
		t.Fatal(err)
	}
	b.stored(1, 3, 4)
	b.result(inFlight[0], 0.05, true)
	b.stored(3, 4)
}
