package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type bundle struct {
	store checkpoint.Store
	local string
	e     *broker.Embedded
	js    jetstream.JetStream
}

// stores returns one of each store for run, on a real embedded broker.
func stores(t *testing.T) map[string]func(t *testing.T) bundle {
	return map[string]func(t *testing.T) bundle{
		schema.CheckpointObject: func(t *testing.T) bundle {
			e, js := start(t)
			local := t.TempDir()
			s, err := checkpoint.CreateObject(context.Background(), js, "r1", 1, local)
			if err != nil {
				t.Fatal(err)
			}
			serve(t, s, js)
			return bundle{store: s, local: local, e: e, js: js}
		},
		schema.CheckpointDir: func(t *testing.T) bundle {
			s, err := checkpoint.OpenDir(t.TempDir(), "r1")
			if err != nil {
				t.Fatal(err)
			}
			return bundle{store: s, local: t.TempDir()}
		},
	}
}

// serve commits the uploads to s, as the run's controller does.
func serve(t *testing.T, s *checkpoint.Object, js jetstream.JetStream) {
	t.Helper()
	sub, err := s.Serve(js.Conn(), testutil.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

func start(t *testing.T) (*broker.Embedded, jetstream.JetStream) {
	t.Helper()
	e, err := broker.Start(broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := broker.Connect(e.ClientURL(), t.Name(), e, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return e, js
}

// write writes data where an evaluator of design would.
func write(t *testing.T, s checkpoint.Store, design string, data []byte) string {
	t.Helper()
	p := s.OutPath(design, "w1-0-1")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStores(t *testing.T) {
	t.Parallel()
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := open(t)
			data := bytes.Repeat([]byte("weights!"), 40_000) // 320 kB: several object store chunks
			out := write(t, b.store, "r1-1", data)
			ref, err := b.store.Put(ctx, "r1-1", out)
			if err != nil {
				t.Fatal(err)
			}
			if ref.Validate() != nil || ref.Size != int64(len(data)) {
				t.Fatalf("ref %+v for %d bytes", ref, len(data))
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the written file is still there after Put: %v", err)
			}
			got, err := b.store.Fetch(ctx, ref, filepath.Join(b.local, "parent"))
			if err != nil {
				t.Fatal(err)
			}
			if read, _ := os.ReadFile(got); !bytes.Equal(read, data) {
				t.Fatalf("fetched %d bytes, not the %d stored", len(read), len(data))
			}
			refs, err := b.store.List(ctx)
			if err != nil || len(refs) != 1 || refs[0].Design != "r1-1" || refs[0].Size != ref.Size {
				t.Fatalf("List = %+v, %v", refs, err)
			}
			if refs[0].Digest != "" && refs[0].Digest != ref.Digest {
				t.Errorf("List digest %s, Put's %s", refs[0].Digest, ref.Digest)
			}

			// A reference whose bytes differ is corrupt; a design with
			// none is not found.
			bad := ref
			bad.Digest = schema.DigestPrefix + strings.Repeat("0", 64)
			if _, err := b.store.Fetch(ctx, bad, filepath.Join(b.local, "bad")); !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Errorf("Fetch with a wrong digest: %v, want ErrCorrupt", err)
			}
			if _, err := b.store.Fetch(ctx, schema.CheckpointRef{Design: "r1-9", Digest: ref.Digest}, filepath.Join(b.local, "none")); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Errorf("Fetch of a design with none: %v, want ErrNotFound", err)
			}

			if err := b.store.Delete(ctx, "r1-1"); err != nil {
				t.Fatal(err)
			}
			if err := b.store.Delete(ctx, "r1-1"); err != nil {
				t.Errorf("deleting twice: %v", err)
			}
			if u, err := checkpoint.Measure(ctx, b.store); err != nil || u.Count != 0 {
				t.Errorf("after Delete: %+v, %v", u, err)
			}
			if b.js != nil {
				// Nothing of it is left in the bucket's stream, the
				// deletion's marker included.
				st, err := b.js.Stream(ctx, "OBJ_"+schema.CheckpointBucket("r1"))
				if err != nil {
					t.Fatal(err)
				}
				if si, err := st.Info(ctx); err != nil || si.State.Msgs != 0 {
					t.Errorf("the bucket's stream holds %d messages after Delete (%v), want none", si.State.Msgs, err)
				}
			}
		})
	}
}

// TestCorruptShared: bytes changed in the shared directory after Put are
// told by their digest, not handed over.
func TestCorruptShared(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s, err := checkpoint.OpenDir(root, "r1")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := s.Put(context.Background(), "r1-1", write(t, s, "r1-1", []byte("good weights")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "r1", "r1-1.ckpt"), []byte("evil weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fetch(context.Background(), ref, ""); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("Fetch of changed bytes: %v, want ErrCorrupt", err)
	}
}

// TestUploadCutShort: a writer whose connection dies mid-upload leaves
// chunks and no object: nobody sees it, and Sweep removes the chunks once
// they are OrphanAge old (here, once the clock is moved on).
func TestUploadCutShort(t *testing.T) {
	ctx := context.Background()
	e, js := start(t)
	if _, err := checkpoint.CreateObject(ctx, js, "r1", 1, ""); err != nil {
		t.Fatal(err)
	}
	nc, err := broker.Connect(e.ClientURL(), "writer", e, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	wjs, _ := jetstream.New(nc)
	obs, err := wjs.ObjectStore(ctx, schema.CheckpointBucket("r1"))
	if err != nil {
		t.Fatal(err)
	}
	// The reader closes the writer's connection after 3 chunks (128 KiB
	// each): Put then can neither store its metadata nor purge its chunks.
	r := &cutter{left: 3 * 128 << 10, cut: nc.Close}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: "r1-1"}, r); err == nil {
		t.Fatal("Put through a closed connection succeeded")
	}

	s, err := checkpoint.OpenObject(ctx, js, "r1", "")
	if err != nil {
		t.Fatal(err)
	}
	if refs, err := s.List(ctx); err != nil || len(refs) != 0 {
		t.Fatalf("List after a cut-short upload: %+v, %v: a half-written object is visible", refs, err)
	}
	if _, err := s.Fetch(ctx, schema.CheckpointRef{Design: "r1-1"}, filepath.Join(t.TempDir(), "x")); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Fetch of a cut-short upload: %v, want ErrNotFound", err)
	}
	chunks := func() uint64 {
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
	if chunks() == 0 {
		t.Fatal("the cut-short upload stored no chunk: the test does not test the sweep")
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep of fresh chunks: %d, %v: an upload in progress would lose them", n, err)
	}
	checkpoint.SetClock(t, func() time.Time { return time.Now().Add(checkpoint.OrphanAge + time.Second) })
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep of old chunks: %d, %v; want 1 subject purged", n, err)
	}
	if m := chunks(); m != 0 {
		t.Fatalf("%d messages left in the bucket after the sweep", m)
	}
}

// TestPartialFileSwept: a partial file in the shared directory is never
// listed, and is swept once old.
func TestPartialFileSwept(t *testing.T) {
	s, err := checkpoint.OpenDir(t.TempDir(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	p := write(t, s, "r1-1", []byte("half"))
	if refs, _ := s.List(context.Background()); len(refs) != 0 {
		t.Fatalf("a partial file is listed: %+v", refs)
	}
	if n, _ := s.Sweep(context.Background()); n != 0 {
		t.Fatal("a fresh partial file was swept")
	}
	checkpoint.SetClock(t, func() time.Time { return time.Now().Add(checkpoint.OrphanAge + time.Second) })
	if n, err := s.Sweep(context.Background()); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the old partial file is still there")
	}
}

// cutter reads zeros and calls cut once left bytes are read.
type cutter struct {
	left int
	cut  func()
}

func (c *cutter) Read(p []byte) (int, error) {
	if c.left <= 0 {
		c.cut()
		return 0, nats.ErrConnectionClosed
	}
	n := min(len(p), c.left)
	clear(p[:n])
	c.left -= n
	return n, nil
}

// Get reads what is stored under a name no result refers to (a design's
// progress), in both stores: the newest Put under the name, byte for
// byte, and ErrNotFound for a name with nothing stored.
func TestGetByName(t *testing.T) {
	t.Parallel()
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := open(t)
			ctx := context.Background()
			progress := "r1-1" + schema.ProgressSuffix
			if _, err := b.store.Get(ctx, progress, filepath.Join(b.local, "got")); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("Get of nothing stored: %v, want ErrNotFound", err)
			}
			for _, data := range []string{"step 1", "step two"} {
				if _, err := b.store.Put(ctx, progress, write(t, b.store, progress, []byte(data))); err != nil {
					t.Fatal(err)
				}
			}
			p, err := b.store.Get(ctx, progress, filepath.Join(b.local, "got"))
			if err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(p); err != nil || string(got) != "step two" {
				t.Errorf("Get read %q (%v), want the newest Put", got, err)
			}
			if err := b.store.Delete(ctx, progress); err != nil {
				t.Fatal(err)
			}
			if _, err := b.store.Get(ctx, progress, filepath.Join(b.local, "again")); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Errorf("Get after Delete: %v, want ErrNotFound", err)
			}
		})
	}
}
