package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/evoq/evoq/schema"
)

// timeNow is the clock Sweep ages leftovers by.
var timeNow = time.Now

// Dir is the store in a shared directory: run's checkpoints are files
// <root>/<run>/<design>.ckpt, written by evaluators under a partial name
// in the same directory and renamed into place, so that no bytes move.
type Dir struct {
	dir string
}

// OpenDir returns the store of run under root, creating its directory.
func OpenDir(root, run string) (*Dir, error) {
	dir := filepath.Join(root, run)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint directory: %w", err)
	}
	return &Dir{dir: dir}, nil
}

func (d *Dir) path(design string) string { return filepath.Join(d.dir, design+schema.CheckpointSuffix) }

// OutPath implements Store.
func (d *Dir) OutPath(design, tag string) string {
	return filepath.Join(d.dir, design+"."+tag+schema.CheckpointPartial)
}

// Put implements Store: the file is synced, so that the rename never
// publishes bytes still in a cache of the writer's node, then renamed.
func (d *Dir) Put(_ context.Context, design, path string) (schema.CheckpointRef, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return schema.CheckpointRef{}, err
	}
	digest, n, err := Digest(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(path, d.path(design))
	}
	if err != nil {
		os.Remove(path)
		return schema.CheckpointRef{}, fmt.Errorf("store checkpoint of %s: %w", design, err)
	}
	return schema.CheckpointRef{Design: design, Size: n, Digest: digest}, nil
}

// Fetch implements Store: the shared file itself, once checked.
func (d *Dir) Fetch(_ context.Context, ref schema.CheckpointRef, _ string) (string, error) {
	p := d.path(ref.Design)
	if err := Verify(p, ref); err != nil {
		return "", err
	}
	return p, nil
}

// Get implements Store: the shared file itself.
func (d *Dir) Get(_ context.Context, name, _ string) (string, error) {
	p := d.path(name)
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		return "", err
	}
	return p, nil
}

// Delete implements Store.
func (d *Dir) Delete(_ context.Context, design string) error {
	err := os.Remove(d.path(design))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// List implements Store. It reads no file, so its references have no
// digest.
func (d *Dir) List(context.Context) ([]schema.CheckpointRef, error) {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	var refs []schema.CheckpointRef
	for _, e := range ents {
		design, ok := strings.CutSuffix(e.Name(), schema.CheckpointSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // deleted since ReadDir
		}
		refs = append(refs, schema.CheckpointRef{Design: design, Size: info.Size()})
	}
	return refs, nil
}

// Sweep implements Store: partial files OrphanAge old are removed.
func (d *Dir) Sweep(context.Context) (int, error) {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), schema.CheckpointPartial) {
			continue
		}
		info, err := e.Info()
		if err != nil || info.ModTime().After(timeNow().Add(-OrphanAge)) {
			continue
		}
		if os.Remove(filepath.Join(d.dir, e.Name())) == nil {
			n++
		}
	}
	return n, nil
}
