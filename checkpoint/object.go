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
	"sync"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/sirupsen/logrus"
)

// Object is the store in the broker's object store, bucket
// schema.CheckpointBucket(run), one object per design named by its ID
// (and one per design's saved progress, schema.ProgressName).
// Evaluators write to files under Local, which the worker uploads.
//
// A worker stores an object's chunks itself, but not its metadata: it
// asks the run's controller to commit the object (Serve, Commit), and
// the controller alone publishes metadata. Whoever may publish an
// object's metadata may mark any object deleted or point it at other
// bytes, and the names of a run's designs cannot be listed in a
// credential's permissions in advance.
type Object struct {
	obs   jetstream.ObjectStore
	js    jetstream.JetStream
	run   string
	local string

	// mu guards nuids: the chunk subject (NUID) of every committed
	// object, and its name, so that no commit points a second name at
	// another object's chunks (whose replacement would then purge
	// them). Loaded by the first Commit; nil before.
	mu    sync.Mutex
	nuids map[string]string
	// smu guards sh, the bucket's stream (bucketStream).
	smu sync.Mutex
	sh  jetstream.Stream
	// serving is held, read, by every commit Serve handles; ended (which
	// it guards) is set by EndCommits.
	serving sync.RWMutex
	ended   bool
}

// ChunkSize is the size of an object's chunks: nats.go's default.
const ChunkSize = 128 << 10

// commitWait is CommitWait, shorter in tests.
var commitWait = CommitWait

// uploadWindow bounds the chunks a Put has in flight, unacknowledged.
const uploadWindow = 64

// Commits.
const (
	// CommitWait bounds how long Put asks the run's controller to
	// commit an object: long enough for a controller to be restarted
	// (its lease expires, it replays the run), short enough that a
	// worker whose run has no controller left goes on without the
	// checkpoint, with a warning.
	CommitWait = time.Minute
	// commitAsk bounds one request of Put's.
	commitAsk = 5 * time.Second
	// CommitHandleWait bounds the controller's work on one commit: a
	// broker that does not answer within it leaves the request
	// unanswered, and its worker asks again.
	CommitHandleWait = 10 * time.Second
)

// Errors of commits.
var (
	// ErrNotCommitted means Put stored an object's chunks but no
	// controller committed it: it refused, or none answered within
	// CommitWait.
	ErrNotCommitted = errors.New("checkpoint not committed")
	// ErrRefused means Commit refused the object for good: asking again
	// is refused again.
	ErrRefused = errors.New("checkpoint commit refused")
)

// CreateObject declares run's bucket, with replicas copies of its
// stream, and returns its store; local is as for OpenObject. The bucket's
// stream takes no roll-up (broker.DenyRollups): a worker may publish
// chunks to it.
func CreateObject(ctx context.Context, js jetstream.JetStream, run string, replicas int, local string) (*Object, error) {
	bucket := schema.CheckpointBucket(run)
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      bucket,
			Description: "evoq checkpoints of run " + run,
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("declare checkpoint bucket %s: %w", bucket, broker.AccountErr(js, err))
	}
	err = broker.DenyRollups(ctx, js, "OBJ_"+bucket, func(c *jetstream.StreamConfig) { c.Replicas = max(replicas, 1) })
	if err != nil {
		return nil, fmt.Errorf("declare checkpoint bucket %s: %w", bucket, err)
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

// Put implements Store: it stores the file's chunks under a fresh NUID,
// then asks the run's controller to commit the object (see Object). Until
// then no reader finds it; chunks of an upload that never got committed
// are purged by the controller's Sweep. name is a design's ID or its
// progress's name (schema.CheckpointName).
func (o *Object) Put(ctx context.Context, name, path string) (schema.CheckpointRef, error) {
	defer os.Remove(path)
	if _, _, ok := schema.CheckpointName(o.run, name); !ok {
		return schema.CheckpointRef{}, fmt.Errorf("store checkpoint of %s: %w: not a design of run %s, nor its %s", name, schema.ErrInvalid, o.run, schema.ProgressSuffix)
	}
	f, err := os.Open(path)
	if err != nil {
		return schema.CheckpointRef{}, err
	}
	defer f.Close()
	c, digest, err := o.upload(ctx, name, f)
	if err != nil {
		return schema.CheckpointRef{}, fmt.Errorf("store checkpoint of %s: %w", name, err)
	}
	if err := o.askCommit(ctx, c); err != nil {
		return schema.CheckpointRef{}, fmt.Errorf("store checkpoint of %s: %w", name, err)
	}
	return schema.CheckpointRef{Design: name, Size: int64(c.Size), Digest: digest}, nil
}

// upload publishes r's bytes as the chunks of a new object, and returns
// the commit that names them and their digest (schema.CheckpointRef's).
func (o *Object) upload(ctx context.Context, name string, r io.Reader) (*schema.CheckpointCommit, string, error) {
	id := nuid.Next()
	subj := o.chunks(id)
	h := sha256.New()
	c := &schema.CheckpointCommit{Run: o.run, Name: name, NUID: id}
	var pending []jetstream.PubAckFuture
	for {
		buf := make([]byte, ChunkSize) // kept by its publish until acknowledged
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			fut, err := o.js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: buf[:n]})
			if err != nil {
				return nil, "", fmt.Errorf("chunk %d: %w", c.Chunks+1, err)
			}
			pending = append(pending, fut)
			c.Size += uint64(n)
			c.Chunks++
			if len(pending) >= uploadWindow {
				if err := acked(ctx, pending[0]); err != nil {
					return nil, "", err
				}
				pending = pending[1:]
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return nil, "", rerr
		}
	}
	for _, fut := range pending {
		if err := acked(ctx, fut); err != nil {
			return nil, "", err
		}
	}
	sum := h.Sum(nil)
	c.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(sum)
	return c, schema.DigestPrefix + hex.EncodeToString(sum), nil
}

// acked waits for a chunk's acknowledgement.
func acked(ctx context.Context, fut jetstream.PubAckFuture) error {
	select {
	case <-fut.Ok():
		return nil
	case err := <-fut.Err():
		return fmt.Errorf("chunk: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// askCommit asks the run's controller to commit c, again and again with
// a growing pause while none answers, for up to CommitWait.
func (o *Object) askCommit(ctx context.Context, c *schema.CheckpointCommit) error {
	body, err := schema.EncodeCommit(c)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(commitWait)
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		actx, cancel := context.WithTimeout(ctx, commitAsk)
		reply, err := o.js.Conn().RequestWithContext(actx, schema.CommitSubject(o.run), body)
		cancel()
		if err == nil {
			ans, err := schema.DecodeCommitted(reply.Data)
			switch {
			case err != nil:
				return fmt.Errorf("%w: the controller's answer: %v", ErrNotCommitted, err)
			case ans.Error != "":
				return fmt.Errorf("%w: the run's controller refused it: %s", ErrNotCommitted, ans.Error)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("%w: no controller of run %s answered within %s (%v)", ErrNotCommitted, o.run, commitWait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// Serve answers the commit requests of the run's workers (Commit) on nc
// until the returned subscription ends. committed, when not nil, is
// called with the name of every object committed.
func (o *Object) Serve(nc *nats.Conn, log logrus.FieldLogger, committed func(name string)) (*nats.Subscription, error) {
	return nc.Subscribe(schema.CommitSubject(o.run), func(m *nats.Msg) {
		o.serving.RLock()
		defer o.serving.RUnlock()
		if o.ended {
			return // unanswered: its worker asks again, then gives up (ErrNotCommitted)
		}
		if !broker.Answerable(m.Reply, o.run) {
			return // nowhere an answer may go
		}
		ans := &schema.CheckpointCommitted{}
		c, err := schema.DecodeCommit(m.Data)
		if err == nil {
			ans.Name = c.Name
			ctx, cancel := context.WithTimeout(context.Background(), CommitHandleWait)
			err = o.Commit(ctx, c)
			cancel()
		}
		switch {
		case err == nil:
			if committed != nil {
				committed(c.Name)
			}
		case errors.Is(err, ErrRefused) || errors.Is(err, schema.ErrInvalid) || errors.Is(err, schema.ErrMalformed) || errors.Is(err, schema.ErrVersion):
			log.WithError(err).WithField("name", ans.Name).Warn("refused a worker's checkpoint commit")
			ans.Error = err.Error()
		default:
			log.WithError(err).WithField("name", ans.Name).Warn("committing a checkpoint failed; its worker asks again")
			return
		}
		if b, err := schema.EncodeCommitted(ans); err == nil {
			_ = m.Respond(b)
		}
	})
}

// EndCommits ends the commits Serve answers, once those under way are
// done: a request that comes later is not answered, so its worker asks
// again until CommitWait and gives up with ErrNotCommitted. Sweep then
// purges every uncommitted chunk, whatever its age: no commit can come
// to claim it. The run's controller calls it as the run ends, before its
// last listing of the store.
func (o *Object) EndCommits() {
	o.serving.Lock()
	o.ended = true
	o.serving.Unlock()
}

// Commit publishes the metadata of the object c names, once it checked
// that c is of this run, names a design's checkpoint not committed yet
// or a design's progress (whose newer commit replaces the older, whose
// chunks are purged), and that its chunks are stored and belong to no
// other object. A commit of what is committed already (a worker asking
// again when an answer was lost) succeeds. It refuses with ErrRefused;
// other errors are the broker's.
//
// The digest is not checked here, which would move every byte through
// the controller: every reader checks it (download, Verify).
func (o *Object) Commit(ctx context.Context, c *schema.CheckpointCommit) error {
	if c.Run != o.run {
		return fmt.Errorf("%w: a commit of run %s on run %s's bucket", ErrRefused, c.Run, o.run)
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	_, progress, _ := schema.CheckpointName(o.run, c.Name)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.loadNUIDs(ctx); err != nil {
		return err
	}
	cur, err := o.obs.GetInfo(ctx, c.Name)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	if cur != nil && cur.NUID == c.NUID {
		return nil
	}
	if owner, ok := o.nuids[c.NUID]; ok {
		return fmt.Errorf("%w: the chunks %s are those of %s", ErrRefused, c.NUID, owner)
	}
	if cur != nil && !progress {
		return fmt.Errorf("%w: %s is committed already, and a design's checkpoint is stored once", ErrRefused, c.Name)
	}
	stream, err := o.bucketStream(ctx)
	if err != nil {
		return err
	}
	subj := o.chunks(c.NUID)
	si, err := stream.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return err
	}
	if got := si.State.Subjects[subj]; got != uint64(c.Chunks) {
		return fmt.Errorf("%w: %s: %d chunks stored under %s, the commit says %d", ErrRefused, c.Name, got, c.NUID, c.Chunks)
	}
	info := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: c.Name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: ChunkSize}},
		Bucket:     schema.CheckpointBucket(o.run), NUID: c.NUID, Size: c.Size, Chunks: c.Chunks, Digest: c.Digest,
	}
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	meta := o.meta(c.Name)
	if _, err := o.js.Publish(ctx, meta, data); err != nil {
		return err
	}
	o.nuids[c.NUID] = c.Name
	// The bucket takes no roll-up (CreateObject): the metadata replaced
	// is purged instead. Should the purge fail, readers still read the
	// last metadata of the name, and the next commit's purge takes both.
	_ = stream.Purge(ctx, jetstream.WithPurgeSubject(meta), jetstream.WithPurgeKeep(1))
	if cur != nil {
		// A progress replaced: its chunks go. Should the purge fail, the
		// sweep takes them, as it does any chunks without metadata.
		delete(o.nuids, cur.NUID)
		_ = stream.Purge(ctx, jetstream.WithPurgeSubject(o.chunks(cur.NUID)))
	}
	return nil
}

// loadNUIDs lists the bucket once, for Commit; o.mu is held.
func (o *Object) loadNUIDs(ctx context.Context) error {
	if o.nuids != nil {
		return nil
	}
	infos, err := o.list(ctx, false)
	if err != nil {
		return err
	}
	o.nuids = map[string]string{}
	for _, in := range infos {
		o.nuids[in.NUID] = in.Name
	}
	return nil
}

// chunks is the subject of the chunks stored under id.
func (o *Object) chunks(id string) string { return "$O." + schema.CheckpointBucket(o.run) + ".C." + id }

// meta is the subject of the metadata of the object name.
func (o *Object) meta(name string) string {
	return "$O." + schema.CheckpointBucket(o.run) + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
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
		stream, err := o.bucketStream(ctx)
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

// bucketStream is the bucket's stream, looked up once: every commit,
// deletion and download uses it.
func (o *Object) bucketStream(ctx context.Context) (jetstream.Stream, error) {
	o.smu.Lock()
	defer o.smu.Unlock()
	if o.sh != nil {
		return o.sh, nil
	}
	s, err := o.js.Stream(ctx, o.stream())
	if err != nil {
		return nil, err
	}
	o.sh = s
	return s, nil
}

// Delete implements Store: it purges the object's metadata, then its
// chunks. The bucket takes no roll-up (CreateObject), so the object
// store's own deletion, a metadata message marked deleted that replaces
// the older by a roll-up, cannot be had; and a marker kept for ever per
// design, across a run of a million designs, is a store that grows with
// the budget. With the metadata gone first, a reader finds the object
// gone rather than chunks gone under it.
func (o *Object) Delete(ctx context.Context, name string) error {
	info, err := o.obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	stream, err := o.bucketStream(ctx)
	if err != nil {
		return err
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(o.meta(name))); err != nil {
		return err
	}
	if info.NUID == "" {
		return nil
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(o.chunks(info.NUID))); err != nil {
		return err
	}
	o.mu.Lock()
	if o.nuids[info.NUID] == name {
		delete(o.nuids, info.NUID)
	}
	o.mu.Unlock()
	return nil
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
// Once EndCommits was called, every uncommitted chunk is purged.
func (o *Object) Sweep(ctx context.Context) (int, error) {
	age := OrphanAge
	o.serving.RLock()
	if o.ended {
		age = 0
	}
	o.serving.RUnlock()
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
	stream, err := o.bucketStream(ctx)
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
		if err != nil || last.Time.After(timeNow().Add(-age)) {
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
