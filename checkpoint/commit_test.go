package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestCommitRules: the controller commits a design's checkpoint once,
// and its saved progress as often as it is stored, the newest replacing
// the one before (whose chunks go); it refuses every other name, a
// second checkpoint of a design, chunks that are another object's or
// not all there. What it committed reads back with nats.go's own object
// store, as `nats object get` would.
func TestCommitRules(t *testing.T) {
	ctx := context.Background()
	_, js := start(t)
	local := t.TempDir()
	s, err := checkpoint.CreateObject(ctx, js, "r1", 1, local)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s, js)
	put := func(name string, data []byte) (schema.CheckpointRef, error) {
		p := filepath.Join(local, "upload")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return s.Put(ctx, name, p)
	}
	first := bytes.Repeat([]byte("a"), 300<<10)
	if _, err := put("r1-1", first); err != nil {
		t.Fatal(err)
	}
	if _, err := put("r1-1", []byte("other weights")); !errors.Is(err, checkpoint.ErrNotCommitted) {
		t.Errorf("a second checkpoint of r1-1: %v, want ErrNotCommitted", err)
	}
	for _, name := range []string{"r2-1", "r1-0", "r1-01", "r1-1.other", "x", "r1-1.progress.progress"} {
		if _, err := put(name, []byte("w")); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("Put %q: %v, want it refused as invalid", name, err)
		}
	}
	obs, err := js.ObjectStore(ctx, schema.CheckpointBucket("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := obs.GetBytes(ctx, "r1-1"); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("nats.go reads %d bytes of r1-1 (%v), want the first %d", len(got), err, len(first))
	}
	for i, size := range []int{200 << 10, 10, 0} {
		data := bytes.Repeat([]byte{byte('p' + i)}, size)
		if _, err := put("r1-2.progress", data); err != nil {
			t.Fatalf("progress %d: %v", i, err)
		}
		if got, err := obs.GetBytes(ctx, "r1-2.progress"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("progress %d reads %d bytes (%v), want %d", i, len(got), err, size)
		}
	}
	// What the stream holds is r1-1 (3 chunks, 1 metadata), the last
	// progress (no chunk, 1 metadata), and the chunk of the refused
	// second r1-1, until the sweep takes it: the replaced progress and
	// its metadata are gone, and the invalid names uploaded nothing.
	st, err := js.Stream(ctx, "OBJ_"+schema.CheckpointBucket("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if si, err := st.Info(ctx); err != nil || si.State.Msgs != 6 {
		t.Errorf("the bucket's stream holds %d messages (%v), want 6", si.State.Msgs, err)
	}
	checkpoint.SetClock(t, func() time.Time { return time.Now().Add(checkpoint.OrphanAge + time.Second) })
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Errorf("Sweep: %d, %v; want the refused upload's chunks purged", n, err)
	}

	// Commits a worker could forge: another object's chunks, chunks not
	// all there, a run that is not the bucket's.
	info, err := obs.GetInfo(ctx, "r1-1")
	if err != nil {
		t.Fatal(err)
	}
	forged := []*schema.CheckpointCommit{
		{Run: "r1", Name: "r1-3", NUID: info.NUID, Size: info.Size, Chunks: info.Chunks, Digest: info.Digest},
		{Run: "r1", Name: "r1-3.progress", NUID: info.NUID, Size: info.Size, Chunks: info.Chunks, Digest: info.Digest},
		{Run: "r1", Name: "r1-3", NUID: "nochunks", Size: 5, Chunks: 1, Digest: info.Digest},
		{Run: "r2", Name: "r2-3", NUID: "x", Digest: info.Digest},
	}
	for _, c := range forged {
		if err := s.Commit(ctx, c); !errors.Is(err, checkpoint.ErrRefused) {
			t.Errorf("commit %+v: %v, want ErrRefused", c, err)
		}
	}
	// A commit asked again (its answer lost) is no error.
	again := &schema.CheckpointCommit{Run: "r1", Name: "r1-1", NUID: info.NUID, Size: info.Size, Chunks: info.Chunks, Digest: info.Digest}
	if err := s.Commit(ctx, again); err != nil {
		t.Errorf("the same commit again: %v", err)
	}
	if err := s.Delete(ctx, "r1-2.progress"); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.GetInfo(ctx, "r1-2.progress"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("a deleted progress: %v, want not found", err)
	}
}

// TestCommitWaitsForController: a Put whose run has no controller
// answering asks again until one does (a controller restarting), and
// fails, naming why, once CommitWait is over; its chunks are left for
// the sweep.
func TestCommitWaitsForController(t *testing.T) {
	ctx := context.Background()
	_, js := start(t)
	local := t.TempDir()
	s, err := checkpoint.CreateObject(ctx, js, "r1", 1, local)
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string) error {
		p := filepath.Join(local, name)
		if err := os.WriteFile(p, []byte("weights"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.Put(ctx, name, p)
		return err
	}
	checkpoint.SetCommitWait(t, 2*time.Second)
	if err := put("r1-1"); !errors.Is(err, checkpoint.ErrNotCommitted) || !strings.Contains(err.Error(), "no controller of run r1 answered") {
		t.Errorf("Put with no controller: %v; want ErrNotCommitted, saying no controller answered", err)
	}
	checkpoint.SetCommitWait(t, time.Minute)
	// The controller comes once the worker has asked: the worker's
	// first request finds no one.
	asked := make(chan struct{})
	var once sync.Once
	probe, err := js.Conn().Subscribe(schema.CommitSubject("r1"), func(*nats.Msg) { once.Do(func() { close(asked) }) })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- put("r1-2") }()
	<-asked
	_ = probe.Unsubscribe()
	serve(t, s, js)
	if err := <-done; err != nil {
		t.Fatalf("Put while the controller came back: %v", err)
	}
	if refs, err := s.List(ctx); err != nil || len(refs) != 1 || refs[0].Design != "r1-2" {
		t.Errorf("List = %+v, %v; want r1-2 alone", refs, err)
	}
}

// TestEndCommits: once its controller ends the commits (the run is
// done), a worker's upload is not committed, fails with ErrNotCommitted,
// and what it stored, fresh as it is, is purged by the next Sweep; what
// was committed before stays.
func TestEndCommits(t *testing.T) {
	ctx := context.Background()
	_, js := start(t)
	local := t.TempDir()
	s, err := checkpoint.CreateObject(ctx, js, "r1", 1, local)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, s, js)
	put := func(name string, data []byte) error {
		p := filepath.Join(local, "upload")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.Put(ctx, name, p)
		return err
	}
	if err := put("r1-1", []byte("weights")); err != nil {
		t.Fatal(err)
	}
	msgs := func() uint64 {
		st, err := js.Stream(ctx, "OBJ_"+schema.CheckpointBucket("r1"))
		if err != nil {
			t.Fatal(err)
		}
		si, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return si.State.Msgs
	}
	committed := msgs()
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep while serving: %d, %v; want nothing purged", n, err)
	}
	s.EndCommits()
	checkpoint.SetCommitWait(t, 2*time.Second)
	if err := put("r1-2.progress", []byte("late progress")); !errors.Is(err, checkpoint.ErrNotCommitted) {
		t.Fatalf("a save after the commits ended: %v, want ErrNotCommitted", err)
	}
	if refs, err := s.List(ctx); err != nil || len(refs) != 1 || refs[0].Design != "r1-1" {
		t.Fatalf("List after the commits ended: %+v, %v; want r1-1 alone", refs, err)
	}
	if msgs() <= committed {
		t.Fatal("the late save stored no chunk: the test does not test the sweep")
	}
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep after the commits ended: %d, %v; want the late save's fresh chunks purged", n, err)
	}
	if m := msgs(); m != committed {
		t.Fatalf("the bucket holds %d messages after the sweep, want %d (r1-1's)", m, committed)
	}
}
