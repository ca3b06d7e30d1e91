// Package checkpoint keeps a run's checkpoints, one per design, in one of
// two stores: the broker's JetStream object store (no shared file system
// needed) or a directory every worker mounts (an HPC parallel file
// system; nothing moves over the broker). Workers put and fetch; the
// controller deletes what no design needs and sweeps what a crash left.
//
// A checkpoint is visible only once whole: an object store object has no
// metadata until its last chunk is stored, and a file is written under a
// partial name and renamed.
package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of a store.
var (
	// ErrNotFound means the design has no checkpoint in the store.
	ErrNotFound = errors.New("checkpoint not found")
	// ErrCorrupt means a checkpoint's bytes are not those its reference
	// names (size or SHA-256).
	ErrCorrupt = errors.New("checkpoint corrupt")
)

// Store is one run's checkpoint store.
type Store interface {
	// OutPath is the file an evaluator of attempt tag of design writes
	// its checkpoint to, for Put to store.
	OutPath(design, tag string) string
	// Put stores the file at path (an OutPath) as design's checkpoint,
	// replacing any it had, and removes the file.
	Put(ctx context.Context, design, path string) (schema.CheckpointRef, error)
	// Fetch makes the checkpoint ref names readable at a local file,
	// checked against ref, and returns its path: dst, where the bytes
	// had to be moved, or the store's own file. ErrNotFound or
	// ErrCorrupt when it cannot.
	Fetch(ctx context.Context, ref schema.CheckpointRef, dst string) (string, error)
	// Get makes what is stored under name readable at a local file, as
	// Fetch does, for what no result names: a design's progress
	// (schema.ProgressSuffix), whose reader checks the bytes itself.
	// ErrNotFound when there is none.
	Get(ctx context.Context, name, dst string) (string, error)
	// Delete removes design's checkpoint; one that is not there is no
	// error.
	Delete(ctx context.Context, design string) error
	// List returns every stored checkpoint.
	List(ctx context.Context) ([]schema.CheckpointRef, error)
	// Sweep removes what writers that died left behind (chunks with no
	// object, partial files) and has not changed for OrphanAge.
	Sweep(ctx context.Context) (int, error)
}

// OrphanAge is how long what a writer left unfinished stays untouched
// before Sweep takes it for the leftovers of a writer that died: a
// writer adds to it as it goes, so one this old has stopped.
const OrphanAge = 2 * time.Minute

// Usage is a store's figures: how many checkpoints and their bytes.
type Usage struct {
	Count int
	Bytes int64
}

// Measure sums what List returns.
func Measure(ctx context.Context, s Store) (Usage, error) {
	refs, err := s.List(ctx)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Count: len(refs)}
	for _, r := range refs {
		u.Bytes += r.Size
	}
	return u, nil
}

// Digest is the schema.CheckpointRef digest of bytes read from r, and
// their count.
func Digest(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return schema.DigestPrefix + hex.EncodeToString(h.Sum(nil)), n, nil
}

// Verify checks that the file at path holds the bytes ref names.
func Verify(path string, ref schema.CheckpointRef) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, ref.Design)
		}
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != ref.Size {
		return fmt.Errorf("%w: %s holds %d bytes, its result recorded %d", ErrCorrupt, ref.Design, st.Size(), ref.Size)
	}
	d, _, err := Digest(f)
	if err != nil {
		return err
	}
	if d != ref.Digest {
		return fmt.Errorf("%w: %s has SHA-256 %s, its result recorded %s", ErrCorrupt, ref.Design, short(d), short(ref.Digest))
	}
	return nil
}

func short(d string) string {
	if len(d) > len(schema.DigestPrefix)+12 {
		return d[:len(schema.DigestPrefix)+12]
	}
	return d
}

// Open returns run's store as cfg says. local is the directory of files
// passing between evaluators and the object store; the controller, which
// moves no bytes, passes "".
func Open(ctx context.Context, js jetstream.JetStream, run string, cfg *schema.Checkpoints, local string) (Store, error) {
	if cfg.Store == schema.CheckpointDir {
		return OpenDir(cfg.Dir, run)
	}
	return OpenObject(ctx, js, run, local)
}
