package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// The checkpoint store's rule: a design's checkpoint lives while the
// design is in the pool, or is the parent of a design in flight (the
// child may still need its bytes); then the controller deletes it. The
// store so holds at most pool + in flight checkpoints, whatever the
// budget, plus the best design's with Keep best. Everything the rule reads
// is rebuilt from the streams: the pool from the results, the designs in
// flight from the work queue; a restarted controller lists the store and
// deletes whatever the rule would have deleted (orphans: a design's whose
// deletion was cut short, or whose result was stored after its
// checkpoint and never counted).

// CheckpointConfig are a run's checkpoint settings as given. Each zero
// field is taken from the run's record when it continues, else defaults.
type CheckpointConfig struct {
	// Dir keeps the checkpoints in this shared directory (an absolute
	// path every worker mounts), as Dir/<run>/<design>.ckpt. Defaults
	// to "": the broker's object store. Fixed for the run.
	Dir string
	// Max is the largest checkpoint stored, in bytes. Defaults to
	// MaxCheckpointDefault.
	Max int64
	// Keep says which checkpoints outlive the run: schema.KeepBest,
	// KeepPool or KeepAll. Defaults to KeepDefault.
	Keep string
	// Inherit hands each mutant its parent's checkpoint. Defaults to
	// false.
	Inherit *bool
}

// Checkpoint defaults.
const (
	MaxCheckpointDefault = 1 << 30
	KeepDefault          = schema.KeepPool
	// MaxCheckpointLimit bounds Max: a checkpoint is one file read and
	// written per design, and a larger one is more likely a mistaken unit.
	MaxCheckpointLimit = 1 << 40
)

// record is the resolved settings as the run records them.
func (c CheckpointConfig) record() *schema.Checkpoints {
	r := &schema.Checkpoints{Store: schema.CheckpointObject, Dir: c.Dir, Max: c.Max, Keep: c.Keep,
		Inherit: c.Inherit != nil && *c.Inherit}
	if c.Dir != "" {
		r.Store = schema.CheckpointDir
	}
	return r
}

func (c CheckpointConfig) withDefaults() CheckpointConfig {
	if c.Max == 0 {
		c.Max = MaxCheckpointDefault
	}
	if c.Keep == "" {
		c.Keep = KeepDefault
	}
	if c.Inherit == nil {
		c.Inherit = new(false)
	}
	return c
}

// validate checks the fields given; zero ones are not given.
func (c CheckpointConfig) validate() error {
	return firstBad(
		check{c.Dir != "" && !filepath.IsAbs(c.Dir), "Checkpoints.Dir", c.Dir, "need an absolute path: every worker must find the same directory, whatever its working directory", nil},
		check{c.Max < 0 || c.Max > MaxCheckpointLimit, "Checkpoints.Max", c.Max, fmt.Sprintf("need 1 byte to %d (1 TiB)", int64(MaxCheckpointLimit)), nil},
		check{c.Keep != "" && c.Keep != schema.KeepBest && c.Keep != schema.KeepPool && c.Keep != schema.KeepAll, "Checkpoints.Keep", c.Keep, "want best, pool or all", nil},
	)
}

// ckptTracker applies the store's rule. Its maps hold designs of the
// pool and of the designs in flight only, so they stay as small as the
// store.
type ckptTracker struct {
	store   checkpoint.Store
	cfg     schema.Checkpoints
	log     logrus.FieldLogger
	refs    map[string]schema.CheckpointRef // stored checkpoints of pool members, for their children
	stored  map[string]bool                 // designs whose checkpoint is in the store
	inPool  map[string]bool
	parents map[string]int  // designs in flight per parent
	flying  map[string]bool // designs in flight when this controller started
	best    string
	// The deletions, done in their own goroutine: a deletion is a few
	// requests, and the results must not wait for them.
	mu      sync.Mutex
	queue   []string
	wake    chan struct{}
	done    chan struct{}
	deleted int
	// failed are deletions that failed, retried (see retryDeletes);
	// listed is the store's figures at the end of the run, nil before.
	failed []string
	listed *checkpoint.Usage
	// deleting are the deletions flush has in hand (under mu): neither
	// queued nor failed, and not to be queued again by a sweep.
	deleting map[string]bool
	// gone are the deletions done while a sweep lists the store (non-nil
	// only then): the listing may still name them.
	gone map[string]bool
	// mutants and inherited count the counted mutants that trained (ok
	// or stopped) and those of them that said they inherited.
	mutants, inherited int
	// progress are the saved progress objects (schema.ProgressName)
	// committed since this controller started (under mu): each is
	// deleted once its design has a terminal result; those of earlier
	// controllers, by the listings (rebuild, sweep, settle).
	progress map[string]bool
	// open reports whether a design has no terminal result yet
	// (Controller.designOpen); sub serves the workers' commits.
	open func(id string) bool
	sub  *nats.Subscription
}

// trained says whether a result of status s is of a design that trained:
// one that ran to its end or that the early-stopping rule stopped.
func trained(s schema.Status) bool { return s == schema.StatusOK || s == schema.StatusStopped }

func newCkptTracker(store checkpoint.Store, cfg schema.Checkpoints, log logrus.FieldLogger) *ckptTracker {
	return &ckptTracker{store: store, cfg: cfg, log: log, refs: map[string]schema.CheckpointRef{},
		stored: map[string]bool{}, inPool: map[string]bool{}, parents: map[string]int{}, flying: map[string]bool{},
		progress: map[string]bool{}, deleting: map[string]bool{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// published notes a design going out for the first time: its parent's
// checkpoint lives until the design has a terminal result, and a mutant
// of a run with inheritance is told which checkpoint it starts from.
func (t *ckptTracker) published(d *schema.Design) {
	if t == nil {
		return
	}
	if d.Retry > 0 || len(d.Parents) == 0 {
		return
	}
	p := d.Parents[0]
	t.parents[p]++
	if ref, ok := t.refs[p]; ok && t.cfg.Inherit {
		d.Inherit = &ref
	}
}

// result applies one stored result, judged v by fold f, which has
// applied it. live is false while the controller replays the stream: the
// designs in flight are not known yet, so nothing is deleted until
// rebuild.
func (t *ckptTracker) result(r *schema.Result, v runstate.Verdict, f *runstate.Fold, live bool) {
	if t == nil {
		return
	}
	id := r.DesignID
	// Replay notes nothing stored: rebuild takes that from the store's
	// listing, so that the maps never hold the whole history.
	if r.Checkpoint != nil && live {
		t.stored[id] = true
	}
	switch v {
	case runstate.Counted:
		delete(t.flying, id)
		// A stopped mutant trained from its parent's weights as an ok one
		// did: counting ok ones alone would hide the share of those the
		// early-stopping rule stopped.
		if trained(r.Status) && r.Design.Origin == schema.OriginMutant && t.cfg.Inherit {
			t.mutants++
			if b, _ := r.Metrics["inherited"].(bool); b {
				t.inherited++
			}
		}
		// A stopped design is in the pool when the run selects on the
		// fitness designs reached (schema.SelectReached).
		if (r.Status == schema.StatusOK || f.Added()) && f.Evicted() != id {
			t.inPool[id] = true
			if r.Checkpoint != nil {
				t.refs[id] = *r.Checkpoint
			}
		}
		t.newBest(f, live)
		if e := f.Evicted(); e != "" && e != id {
			// Out of the pool, it is no tournament's winner: no new
			// design inherits from it.
			delete(t.inPool, e)
			delete(t.refs, e)
			t.drop(e, live)
		}
		if len(r.Design.Parents) > 0 && live {
			p := r.Design.Parents[0]
			if t.parents[p]--; t.parents[p] <= 0 {
				delete(t.parents, p)
			}
			t.drop(p, live)
		}
		t.drop(id, live)
		t.savedProgress(r)
		t.dropProgress(id, live)
	case runstate.Duplicate:
		// A second evaluation stored its checkpoint over the first: a pool
		// member's children start from those bytes (training need not be
		// deterministic); any other design's goes.
		if t.inPool[id] && r.Checkpoint != nil {
			t.refs[id] = *r.Checkpoint
		}
		t.drop(id, live)
		t.savedProgress(r)
		t.dropProgress(id, live)
	}
}

// savedProgress notes the saved progress a result says its design has
// (progress_step, resumed_from), as a commit does: in a shared directory
// no commit comes, and an earlier controller may have served the commit.
// The design has its result, so it is deleted at once rather than at the
// next sweep.
func (t *ckptTracker) savedProgress(r *schema.Result) {
	if r.ProgressStep > 0 || r.ResumedFrom > 0 {
		t.committed(schema.ProgressName(r.DesignID))
	}
}

// newBest follows the best design, whose checkpoint Keep best keeps.
func (t *ckptTracker) newBest(f *runstate.Fold, live bool) {
	if t.cfg.Keep != schema.KeepBest || f.Best() == nil || f.Best().Design.ID == t.best {
		return
	}
	old := t.best
	t.best = f.Best().Design.ID
	if old != "" {
		t.drop(old, live)
	}
}

// needed reports whether id's checkpoint must live on. A design's saved
// progress (schema.ProgressName) lives while the design has no terminal
// result, whatever Keep says: it is what an interrupted attempt resumes
// from, and no design's checkpoint.
func (t *ckptTracker) needed(id string) bool {
	if d, ok := strings.CutSuffix(id, schema.ProgressSuffix); ok {
		return t.open != nil && t.open(d)
	}
	return t.cfg.Keep == schema.KeepAll || t.inPool[id] || t.parents[id] > 0 || t.flying[id] || id == t.best
}

// drop deletes id's checkpoint when it is stored and no longer needed.
func (t *ckptTracker) drop(id string, live bool) {
	if !live || !t.stored[id] || t.needed(id) {
		return
	}
	delete(t.stored, id)
	delete(t.refs, id)
	t.mu.Lock()
	t.queue = append(t.queue, id)
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// rebuild, after replay, takes the designs in flight (on the work queue or
// awaiting a retry) and the store's contents, and deletes every stored
// checkpoint the rule does not keep. inFlight is called only when the
// store holds checkpoints of designs outside the pool: reading the whole
// work queue costs a request per design.
func (t *ckptTracker) rebuild(ctx context.Context, inFlight func(context.Context) ([]*schema.Design, error)) error {
	if t == nil {
		return nil
	}
	refs, err := t.store.List(ctx)
	if err != nil {
		return fmt.Errorf("list the checkpoint store: %w", err)
	}
	// What is stored is what the store lists, not what the results say
	// was: an earlier controller deleted some (Keep best at the end of a
	// run, say), and a mutant must not be told of a checkpoint that is
	// gone.
	t.stored = map[string]bool{}
	listed := map[string]bool{}
	var others []string
	for _, r := range refs {
		listed[r.Design] = true
		if t.inPool[r.Design] || r.Design == t.best || t.cfg.Keep == schema.KeepAll {
			t.stored[r.Design] = true
			continue
		}
		others = append(others, r.Design)
	}
	for id := range t.refs {
		if !listed[id] {
			delete(t.refs, id)
		}
	}
	if len(others) > 0 {
		ds, err := inFlight(ctx)
		if err != nil {
			return err
		}
		for _, d := range ds {
			t.flying[d.ID] = true
			if len(d.Parents) > 0 {
				t.parents[d.Parents[0]]++
			}
		}
	}
	var orphans []string
	for _, id := range others {
		t.stored[id] = true
		if !t.needed(id) {
			orphans = append(orphans, id)
		}
		t.drop(id, true)
	}
	n, err := t.store.Sweep(ctx)
	if err != nil {
		t.log.WithError(err).Warn("sweeping the checkpoint store for what dead writers left failed")
	}
	f := logrus.Fields{"checkpoints": len(refs), "orphans": len(orphans), "leftovers": n}
	if len(orphans) > 0 {
		f["deleted"] = strings.Join(orphans[:min(len(orphans), 5)], ",")
	}
	t.log.WithFields(f).Info("checkpoint store checked")
	return nil
}

// finish applies Keep once the run is done: with best, every checkpoint
// but the best design's goes.
func (t *ckptTracker) finish() {
	if t == nil {
		return
	}
	if t.cfg.Keep != schema.KeepBest {
		return
	}
	t.inPool = map[string]bool{}
	for id := range t.stored {
		t.drop(id, true)
	}
}

// run deletes what drop queued until ctx ends, then what is left,
// retrying failed deletions for up to FinalDeleteWait.
func (t *ckptTracker) run(ctx context.Context) {
	defer close(t.done)
	retry := time.NewTicker(2 * time.Second)
	defer retry.Stop()
	for {
		t.flush(context.WithoutCancel(ctx))
		select {
		case <-t.wake:
		case <-retry.C:
			t.mu.Lock()
			t.queue, t.failed = append(t.queue, t.failed...), nil
			t.mu.Unlock()
		case <-ctx.Done():
			if left := t.retryDeletes(context.WithoutCancel(ctx), FinalDeleteWait); left > 0 {
				t.log.WithField("checkpoints", left).Warn("checkpoints the rule does not keep could not be deleted; the run's next controller deletes them")
			}
			return
		}
	}
}

// flush deletes every queued checkpoint. One that cannot be deleted now
// is kept for a retry (run, retryDeletes), with a warning.
func (t *ckptTracker) flush(ctx context.Context) {
	for {
		t.mu.Lock()
		q := t.queue
		t.queue = nil
		for _, id := range q {
			t.deleting[id] = true
		}
		t.mu.Unlock()
		if len(q) == 0 {
			return
		}
		for _, id := range q {
			dctx, cancel := context.WithTimeout(ctx, DeleteWait)
			err := t.store.Delete(dctx, id)
			cancel()
			if err != nil {
				t.log.WithError(err).WithField("design", id).Warn("deleting a checkpoint failed; retrying")
				t.mu.Lock()
				delete(t.deleting, id)
				t.failed = append(t.failed, id)
				t.mu.Unlock()
				continue
			}
			t.mu.Lock()
			delete(t.deleting, id)
			if t.gone != nil {
				t.gone[id] = true
			}
			delete(t.progress, id)
			if !strings.HasSuffix(id, schema.ProgressSuffix) {
				t.deleted++ // a checkpoint, not a design's saved progress
			}
			t.mu.Unlock()
		}
	}
}

// DeleteWait bounds one deletion: a broker that does not answer leaves
// the checkpoint to the next controller's listing.
const DeleteWait = 10 * time.Second

// Deleted is the number of checkpoints deleted so far.
func (t *ckptTracker) Deleted() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deleted
}

// openCheckpoints opens the run's store (declaring its bucket), before
// the run is recorded: a worker that reads the record finds the bucket.
func (c *Controller) openCheckpoints(ctx context.Context) error {
	rec := c.cfg.Checkpoints.record()
	var store checkpoint.Store
	err := startRetry(ctx, c.log, "open the checkpoint store", func() (err error) {
		if rec.Store == schema.CheckpointDir {
			store, err = checkpoint.OpenDir(rec.Dir, c.cfg.Run)
			return err
		}
		store, err = checkpoint.CreateObject(ctx, c.js, c.cfg.Run, c.cfg.Replicas, "")
		return err
	})
	if err != nil {
		return err
	}
	c.ckpt = newCkptTracker(store, *rec, c.log)
	c.ckpt.open = c.designOpen
	if obj, ok := store.(*checkpoint.Object); ok {
		// Workers store chunks; the controller alone commits objects
		// (checkpoint.Object.Commit), from before the run is recorded,
		// so that no worker's upload finds nobody to commit it.
		sub, err := obj.Serve(c.js.Conn(), c.log, c.ckpt.committed)
		if err != nil {
			return fmt.Errorf("serve checkpoint commits: %w", err)
		}
		c.ckpt.sub = sub
	}
	return nil
}

// committed notes an object a worker's commit stored: a design's saved
// progress is deleted once the design has a terminal result.
func (t *ckptTracker) committed(name string) {
	if !strings.HasSuffix(name, schema.ProgressSuffix) {
		return // a design's checkpoint: its result says it is stored
	}
	t.mu.Lock()
	t.progress[name] = true
	t.mu.Unlock()
}

// dropProgress deletes the saved progress of design id, which has a
// terminal result, when a worker committed one.
func (t *ckptTracker) dropProgress(id string, live bool) {
	name := schema.ProgressName(id)
	t.mu.Lock()
	had := t.progress[name]
	delete(t.progress, name)
	t.mu.Unlock()
	if had {
		t.stored[name] = true
		t.drop(name, live)
	}
}

// stopServing ends the commits of workers' checkpoints, once those under
// way are done: the run's controller is gone, and a worker that asks now
// waits for the next; or the run is done, and its late save fails.
func (t *ckptTracker) stopServing() {
	if t == nil || t.sub == nil {
		return
	}
	if obj, ok := t.store.(*checkpoint.Object); ok {
		obj.EndCommits()
	}
	_ = t.sub.Unsubscribe()
	t.sub = nil
}

// inFlightDesigns reads every design of the run on the work queue, and
// those awaiting a retry.
func (c *Controller) inFlightDesigns(ctx context.Context) ([]*schema.Design, error) {
	var ds []*schema.Design
	for _, p := range c.retries {
		ds = append(ds, &p.design)
	}
	err := c.eachQueued(ctx, func(d *schema.Design) { ds = append(ds, d) })
	return ds, err
}

func (t *ckptTracker) summary() *runstate.CheckpointSummary {
	s := &runstate.CheckpointSummary{Stored: len(t.stored), Deleted: t.Deleted(), Mutants: t.mutants, Inherited: t.inherited}
	if t.listed != nil {
		s.Stored, s.Bytes, s.Listed = t.listed.Count, t.listed.Bytes, true
	}
	return s
}
