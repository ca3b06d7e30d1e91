package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// Object is the store in the broker's object store, bucket
// schema.CheckpointBucket(run), one object per design named by its ID.
// Evaluators write to files under Local, which the worker uploads.
type Object struct {
	obs   jetstream.ObjectStore
	js    jetstream.JetStream
	run   string
	local string
}

// CreateObject declares run's bucket, with replicas copies of its
// stream, and returns its store; local is as for OpenObject.
func CreateObject(ctx context.Context, js jetstream.JetStream, run string, replicas int, local string) (*Object, error) {
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      schema.CheckpointBucket(run),
		Description: "evoq checkpoints of run " + run,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("declare checkpoint bucket %s: %w", schema.CheckpointBucket(run), broker.AccountErr(js, err))
	}
	return &Object{obs: obs, js: js, run: run, local: local}, nil
}

// OpenObject binds to run's bucket, which its controller declared; local
// is the directory of the files that pass between evaluators and the
// broker ("" when this client only deletes and lists).
func OpenObject(ctx context.Context, js jetstream.JetStream, run, local string) (*Object, error) {
	obs, err := js.ObjectStore(ctx, schema.CheckpointBucket(run))
	if err != nil {
		return nil, fmt.Errorf("checkpoint bucket %s: %w", schema.CheckpointBucket(run), err)
	}
	return &Object{obs: obs, js: js, run: run, local: local}, nil
}

// OutPath implements Store.
func (o *Object) OutPath(design, tag string) string {
	return filepath.Join(o.local, design+"."+tag+schema.CheckpointPartial)
}

// Put implements Store. The object store publishes the chunks first and
// the object's metadata last: until that, no reader finds it.
func (o *Object) Put(ctx context.Context, design, path string) (schema.CheckpointRef, error) {
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		return schema.CheckpointRef{}, err
	}
	defer f.Close()
	h := sha256.New()
	info, err := o.obs.Put(ctx, jetstream.ObjectMeta{Name: design}, io.TeeReader(f, h))
	if err != nil {
		return schema.CheckpointRef{}, fmt.Errorf("store checkpoint of %s: %w", design, err)
	}
	return schema.CheckpointRef{Design: design, Size: int64(info.Size), Digest: schema.DigestPrefix + hex.EncodeToString(h.Sum(nil))}, nil
}

// Fetch implements Store: it downloads into dst.
func (o *Object) Fetch(ctx context.Context, ref schema.CheckpointRef, dst string) (string, error) {
	err := o.download(ctx, ref.Design, dst)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return "", fmt.Errorf("%w: %s", ErrNotFound, ref.Design)
	case errors.Is(err, jetstream.ErrDigestMismatch):
		os.Remove(dst)
		return "", fmt.Errorf("%w: %s: %v", ErrCorrupt, ref.Design, err)
	case err != nil:
		os.Remove(dst)
		return "", fmt.Errorf("fetch checkpoint of %s: %w", ref.Design, err)
	}
	if err := Verify(dst, ref); err != nil {
		os.Remove(dst)
		return "", err
	}
	return dst, nil
}

// Get implements Store: it downloads into dst, checked against the object
// store's own digest.
func (o *Object) Get(ctx context.Context, name, dst string) (string, error) {
	err := o.download(ctx, name, dst)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return "", fmt.Errorf("%w: %s", ErrNotFound, name)
	case errors.Is(err, jetstream.ErrDigestMismatch):
		os.Remove(dst)
		return "", fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	case err != nil:
		os.Remove(dst)
		return "", fmt.Errorf("fetch %s: %w", name, err)
	}
	return dst, nil
}

// download writes the object design to dst, its chunks read one direct
// get at a time. nats.go's ObjectStore.Get reads through a consumer it
// deletes when done, which a worker's credential may not do; one
// consumer left per download for the broker to expire would, at hundreds
// of downloads a second, run into the broker's cap on a stream's
// consumers (1,000 by default).
func (o *Object) download(ctx context.Context, design, dst string) error {
	info, err := o.obs.GetInfo(ctx, design)
	if err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if info.Size > 0 {
		stream, err := o.js.Stream(ctx, o.stream())
		if err != nil {
			return err
		}
		chunks := "$O." + schema.CheckpointBucket(o.run) + ".C." + info.NUID
		seq := uint64(1)
		for range info.Chunks {
			m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(chunks))
			if err != nil {
				return fmt.Errorf("chunk after sequence %d: %w", seq, err)
			}
			h.Write(m.Data)
			if _, err := f.Write(m.Data); err != nil {
				return err
			}
			seq = m.Sequence + 1
		}
	}
	if got := "SHA-256=" + base64.URLEncoding.EncodeToString(h.Sum(nil)); got != info.Digest {
		return fmt.Errorf("%w: stored %s, read %s", jetstream.ErrDigestMismatch, info.Digest, got)
	}
	return f.Close()
}

func (o *Object) stream() string { return "OBJ_" + schema.CheckpointBucket(o.run) }

// Delete implements Store. The object store marks a deleted object with a
// metadata message of its own, kept for ever: one per design, across a
// run of a million designs, is a store that grows with the budget. Once
// the marker is there (a reader now finds the object deleted, not
// chunks gone under it), it is purged too.
func (o *Object) Delete(ctx context.Context, design string) error {
	err := o.obs.Delete(ctx, design)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	stream, err := o.js.Stream(ctx, "OBJ_"+schema.CheckpointBucket(o.run))
	if err != nil {
		return err
	}
	meta := "$O." + schema.CheckpointBucket(o.run) + ".M." + base64.URLEncoding.EncodeToString([]byte(design))
	return stream.Purge(ctx, jetstream.WithPurgeSubject(meta))
}

// ListWait bounds one listing of the bucket: a broker that stops
// delivering it fails the listing, and the caller retries it, or goes on
// without it.
const ListWait = 30 * time.Second

// list lists the bucket's objects within ListWait: the last metadata of
// each name, read with broker.ReadStored (nats.go's ObjectStore.List
// deletes its consumer when done, which a reader's credential may not
// do). Deleted objects are left out unless showDeleted.
func (o *Object) list(ctx context.Context, showDeleted bool) ([]*jetstream.ObjectInfo, error) {
	lctx, cancel := context.WithTimeout(ctx, ListWait)
	defer cancel()
	// An object stored or deleted while the listing goes on comes twice:
	// its metadata then, and its new one. The later wins.
	last := map[string]*jetstream.ObjectInfo{}
	var order []string
	meta := "$O." + schema.CheckpointBucket(o.run) + ".M.*"
	err := broker.ReadStored(lctx, o.js, o.stream(), meta, true, func(m jetstream.Msg) error {
		var in jetstream.ObjectInfo
		if err := json.Unmarshal(m.Data(), &in); err != nil {
			return fmt.Errorf("checkpoint bucket %s: metadata of %s: %w", schema.CheckpointBucket(o.run), m.Subject(), err)
		}
		if _, seen := last[m.Subject()]; !seen {
			order = append(order, m.Subject())
		}
		last[m.Subject()] = &in
		return nil
	})
	var infos []*jetstream.ObjectInfo
	for _, subj := range order {
		if in := last[subj]; !in.Deleted || showDeleted {
			infos = append(infos, in)
		}
	}
	if err != nil && ctx.Err() == nil && lctx.Err() != nil {
		return nil, fmt.Errorf("list checkpoint bucket %s: no end to the listing within %s", schema.CheckpointBucket(o.run), ListWait)
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoint bucket %s: %w", schema.CheckpointBucket(o.run), err)
	}
	return infos, nil
}

// List implements Store.
func (o *Object) List(ctx context.Context) ([]schema.CheckpointRef, error) {
	infos, err := o.list(ctx, false)
	if err != nil {
		return nil, err
	}
	refs := make([]schema.CheckpointRef, 0, len(infos))
	for _, in := range infos {
		refs = append(refs, schema.CheckpointRef{Design: in.Name, Size: int64(in.Size), Digest: hexDigest(in.Digest)})
	}
	return refs, nil
}

// Sweep implements Store: it purges the chunks of objects whose metadata
// never came (an upload cut short by a worker's death), once their last
// chunk is OrphanAge old. An upload in progress adds chunks as it goes.
func (o *Object) Sweep(ctx context.Context) (int, error) {
	infos, err := o.list(ctx, true)
	if err != nil {
		return 0, err
	}
	known := map[string]bool{}
	for _, in := range infos {
		if !in.Deleted {
			known[in.NUID] = true
		}
	}
	stream, err := o.js.Stream(ctx, "OBJ_"+schema.CheckpointBucket(o.run))
	if err != nil {
		return 0, err
	}
	prefix := "$O." + schema.CheckpointBucket(o.run) + ".C."
	si, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return 0, err
	}
	n := 0
	for subj := range si.State.Subjects {
		if known[strings.TrimPrefix(subj, prefix)] {
			continue
		}
		last, err := stream.GetLastMsgForSubject(ctx, subj)
		if err != nil || last.Time.After(timeNow().Add(-OrphanAge)) {
			continue
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// hexDigest turns the object store's digest (SHA-256=<base64url>) into a
// CheckpointRef's.
func hexDigest(d string) string {
	b64, ok := strings.CutPrefix(d, "SHA-256=")
	if !ok {
		return ""
	}
	b, err := base64.URLEncoding.DecodeString(b64)
	if err != nil {
		return ""
	}
	return schema.DigestPrefix + hex.EncodeToString(b)
}
