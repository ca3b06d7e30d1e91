package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// ckpts is the worker's side of its run's checkpoint store: it tells each
// evaluation where to write its checkpoint and hands a mutant its
// parent's, then stores what an evaluation that ended ok wrote. The
// controller alone deletes.
type ckpts struct {
	store checkpoint.Store
	cfg   schema.Checkpoints
	// local holds the files passing between evaluators and the object
	// store: this worker process's own, removed when it ends.
	local string
	// none: the evaluator says it never writes a checkpoint
	// (NoCheckpoints), so its tasks get no file to write.
	none bool
	// noProgress: the evaluator says it never writes a checkpoint and
	// does not say it saves progress (SavesProgress), so its tasks get no
	// progress files and no saved progress is looked up.
	noProgress bool
	// progDir holds the progress files of this worker's evaluations
	// (resume.go), its own too, whichever the store.
	progDir string
	// seen: an evaluation of this worker stored its progress.
	seen atomic.Bool
}

// taskFiles are one evaluation's checkpoint files.
type taskFiles struct {
	out    string // where the evaluator may write; "" when the run keeps none
	parent string // the parent's, checked; "" when none
	// fetched: parent is a copy of the worker's own, removed afterwards.
	fetched bool
	// note is what the worker says of inheritance in the result when
	// the evaluator says nothing: why the design had no parent's
	// checkpoint to start from.
	note map[string]any
}

// openCheckpoints opens the run's checkpoint store, when the run keeps
// checkpoints (cfg not nil).
func (w *Worker) openCheckpoints(ctx context.Context, cfg *schema.Checkpoints) error {
	if cfg == nil {
		return nil
	}
	c := *cfg
	if c.Store == schema.CheckpointDir && w.cfg.CheckpointDir != "" {
		c.Dir = w.cfg.CheckpointDir // the same file system, mounted elsewhere on this node
	}
	local := ""
	if c.Store == schema.CheckpointObject {
		// A directory of this process's own: worker IDs repeat across
		// runs (evoq run names its workers w1, w2, ...), and two runs on
		// one node must not share, let alone empty, each other's.
		var err error
		if local, err = os.MkdirTemp(w.cfg.TempDir, "evoq-ckpt-"+w.cfg.Run+"-"+w.cfg.ID+"-"); err != nil {
			return fmt.Errorf("checkpoint files: %w", err)
		}
	}
	progDir, err := os.MkdirTemp(w.cfg.TempDir, "evoq-progress-"+w.cfg.Run+"-"+w.cfg.ID+"-")
	if err != nil {
		return fmt.Errorf("progress files: %w", err)
	}
	s, err := checkpoint.Open(ctx, w.js, w.cfg.Run, &c, local)
	if err != nil {
		_ = os.RemoveAll(progDir)
		return err
	}
	none, noProgress := evaluatorFiles(w.cfg.Evaluator)
	w.ckpt = &ckpts{store: s, cfg: c, local: local, none: none, noProgress: noProgress, progDir: progDir}
	w.log.WithFields(logrus.Fields{"store": c.Store, "dir": c.Dir, "max_checkpoint": c.Max,
		"inherit": c.Inherit}).Info("checkpoints on")
	return nil
}

// evaluatorFiles says which files e's tasks go without: none, a
// checkpoint file (NoCheckpoints); noProgress, progress files too (a
// NoCheckpoints evaluator that does not say SavesProgress).
func evaluatorFiles(e Evaluator) (none, noProgress bool) {
	nc, ok := e.(NoCheckpoints)
	none = ok && nc.NoCheckpoints()
	sp, saves := e.(SavesProgress)
	return none, none && !(saves && sp.SavesProgress())
}

// closeCheckpoints removes the worker's own files.
func (w *Worker) closeCheckpoints() {
	if w.ckpt != nil && w.ckpt.local != "" {
		_ = os.RemoveAll(w.ckpt.local)
	}
	if w.ckpt != nil && w.ckpt.progDir != "" {
		_ = os.RemoveAll(w.ckpt.progDir)
	}
}

// prepare returns attempt's files of design d. A parent's checkpoint that
// cannot be had (gone, corrupt, unreachable) never fails the design: it
// trains from scratch, and its result says why. An attempt that resumes
// from the design's saved progress gets no parent's: it inherited, or not,
// when it started, and its own weights are further on.
func (c *ckpts) prepare(ctx context.Context, log logrus.FieldLogger, d *schema.Design, tag string, resumes bool) taskFiles {
	if c == nil {
		return taskFiles{}
	}
	// The tag names the delivery, so no earlier attempt wrote this file.
	var f taskFiles
	if !c.none {
		f.out = c.store.OutPath(d.ID, tag)
	}
	if !c.cfg.Inherit || d.Origin != schema.OriginMutant || resumes {
		return f
	}
	if d.Inherit == nil {
		f.note = noInheritance(fmt.Sprintf("parent %s stored no checkpoint", d.Parents[0]))
		return f
	}
	dst := filepath.Join(c.local, d.ID+"."+tag+".parent")
	p, err := c.store.Fetch(ctx, *d.Inherit, dst)
	if err != nil {
		log.WithError(err).WithField("parent", d.Inherit.Design).Warn("parent's checkpoint unusable; the design trains from scratch")
		f.note = noInheritance("parent checkpoint: " + err.Error())
		return f
	}
	f.parent, f.fetched = p, p == dst
	return f
}

func noInheritance(reason string) map[string]any {
	return map[string]any{"inherited": false, "inherit_reason": reason}
}

// settle adds the worker's note to out's metrics unless the evaluator
// spoke of inheritance itself, and removes the copy of the parent's.
func (f taskFiles) settle(out *Outcome) {
	if f.fetched {
		_ = os.Remove(f.parent)
	}
	if f.note == nil {
		return
	}
	if _, said := out.Metrics["inherited"]; said {
		return
	}
	m := make(map[string]any, len(out.Metrics)+len(f.note))
	for k, v := range out.Metrics {
		m[k] = v
	}
	for k, v := range f.note {
		m[k] = v
	}
	out.Metrics = m
}

// discard removes what the evaluation wrote, when it is not to be stored.
func (f taskFiles) discard() {
	if f.out != "" {
		_ = os.Remove(f.out)
	}
}

// put stores the checkpoint res's evaluation wrote, before res is stored,
// so that a result that names a checkpoint is never seen without it. Only
// an ok result can enter the pool; any other's checkpoint could only be
// deleted, so it is never stored. A checkpoint over the run's limit, or
// one the store refuses, is not stored: the result says why, and counts.
func (c *ckpts) put(ctx context.Context, log logrus.FieldLogger, f taskFiles, res *schema.Result) {
	if c == nil || f.out == "" {
		return
	}
	if res.Status != schema.StatusOK {
		f.discard()
		return
	}
	st, err := os.Stat(f.out)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	l := log.WithField("design", res.DesignID)
	switch {
	case err != nil:
		res.CheckpointError = "checkpoint: " + err.Error()
	case st.Size() > c.cfg.Max:
		res.CheckpointError = fmt.Sprintf("checkpoint of %d bytes is over the run's limit of %d bytes (max-checkpoint); not stored",
			st.Size(), c.cfg.Max)
	default:
		ref, err := c.store.Put(ctx, res.DesignID, f.out) // which removes the file, stored or not
		if err == nil {
			res.Checkpoint = &ref
			return
		}
		res.CheckpointError = err.Error()
	}
	f.discard()
	l.WithField("error", res.CheckpointError).Error("checkpoint not stored; the result is kept, and mutants of this design train from scratch")
}

// fileTag names one attempt of a design on this worker's slot, so that no
// two attempts write the same file.
func (w *Worker) fileTag(slot int, d *schema.Design, attempt int) string {
	return w.cfg.ID + "-" + strconv.Itoa(slot) + "-" + strconv.Itoa(d.Retry) + "-" + strconv.Itoa(attempt)
}
