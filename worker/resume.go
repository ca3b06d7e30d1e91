package worker

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// Progress checkpoints. An evaluator saves its design's progress while it
// trains: it writes the file the worker names (EVOQ_PROGRESS_OUT,
// "progress_out") and prints {"progress": {"step": N}}. The worker then
// stores that file, headed by a line of its own, in the run's checkpoint
// store as <design>.progress, the newest replacing the one before, and
// renews the design's ack deadline. Whichever attempt of the design runs
// next, on any worker, fetches it, checks it and hands the evaluator its
// bytes to start from (EVOQ_PROGRESS_IN, "progress_in", with the step in
// EVOQ_RESUME_STEP, "resume_step"). The controller deletes it once the
// design has its terminal result.

// progressFormat is the version of the header line a stored progress
// object starts with; another is not read (the design starts afresh).
const progressFormat = 1

// ProgressMetric is the result metric that says why a design did not
// resume from its saved progress (unreadable, of another design, corrupt):
// it trained from scratch. The worker sets it for what it checks; an
// evaluator sets it for bytes it cannot load (python/evoq_eval.py does).
const ProgressMetric = "progress_unusable"

// progressHeader is the first line of a stored progress object, before the
// evaluator's bytes: which design and step they are of, how long the design
// had trained to get there (over all its attempts: the slot-seconds a resume
// does not repeat), and their size and SHA-256, checked on the way back.
type progressHeader struct {
	Format  int     `json:"evoq_progress"`
	Design  string  `json:"design"`
	Step    int64   `json:"step"`
	Seconds float64 `json:"seconds"`
	Size    int64   `json:"size"`
	SHA256  string  `json:"sha256"`
}

// maxProgressHeader bounds the header line read back.
const maxProgressHeader = 4096

// progressName is the store name of design's progress.
func progressName(design string) string { return schema.ProgressName(design) }

// attemptProgress is one attempt's side of its design's progress.
type attemptProgress struct {
	c      *ckpts
	log    logrus.FieldLogger
	design string
	tag    string
	msg    design
	began  time.Time

	out     string // where the evaluator writes its progress
	in      string // the progress it starts from; "" when none
	request string // created when the worker wants a save now
	from    int64  // the step of in
	fromSec float64
	note    string // why the stored progress was not used

	mu      sync.Mutex
	saved   int64     // the last step stored by this attempt
	savedAt time.Time // when
	warned  bool      // Saved's alone
	// announced: the evaluator printed a progress line.
	announced atomic.Bool
	// declined: the evaluator did not take the progress handed to it
	// (its first report is at or before the resume step).
	declined bool
}

// progressFor fetches design d's saved progress, if it has one, and names
// the files of this attempt. A progress object that cannot be used never
// fails the design: it starts from scratch, and its result says why.
func (c *ckpts) progressFor(ctx context.Context, log logrus.FieldLogger, d *schema.Design, msg design, tag string) *attemptProgress {
	if c == nil || c.progDir == "" || c.noProgress {
		return nil // a built-in evaluator that writes no files saves no progress either, unless it says so
	}
	base := filepath.Join(c.progDir, d.ID+"."+tag)
	a := &attemptProgress{c: c, log: log.WithField("design", d.ID), design: d.ID, tag: tag, msg: msg, began: time.Now(),
		out: base + ".out", request: base + ".save"}
	in := base + ".in"
	h, err := c.fetchProgress(ctx, d.ID, in)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
	case err != nil:
		a.note = "saved progress: " + err.Error()
		a.log.WithError(err).Warn("saved progress unusable; the design trains from scratch")
	default:
		a.in, a.from, a.fromSec = in, h.Step, h.Seconds
		a.log.WithFields(logrus.Fields{"step": h.Step, "trained_s": h.Seconds}).Info("resuming from saved progress")
	}
	return a
}

// fetchProgress writes the evaluator's bytes of design's stored progress to
// dst, checked against its header, and returns the header.
func (c *ckpts) fetchProgress(ctx context.Context, design, dst string) (progressHeader, error) {
	var h progressHeader
	got := dst + ".stored"
	p, err := c.store.Get(ctx, progressName(design), got)
	if err != nil {
		return h, err
	}
	if p == got {
		defer os.Remove(got)
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return h, checkpoint.ErrNotFound // deleted since: the design ended meanwhile
		}
		return h, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, maxProgressHeader)
	line, err := r.ReadSlice('\n')
	if err != nil {
		return h, fmt.Errorf("%w: no header line", checkpoint.ErrCorrupt)
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return h, fmt.Errorf("%w: header: %v", checkpoint.ErrCorrupt, err)
	}
	switch {
	case h.Format != progressFormat:
		return h, fmt.Errorf("%w: format %d, this worker reads %d", checkpoint.ErrCorrupt, h.Format, progressFormat)
	case h.Design != design:
		return h, fmt.Errorf("%w: it is of design %q", checkpoint.ErrCorrupt, h.Design)
	case h.Step < 0:
		return h, fmt.Errorf("%w: step %d", checkpoint.ErrCorrupt, h.Step)
	}
	if err := copyChecked(r, dst, h); err != nil {
		os.Remove(dst)
		return h, err
	}
	return h, nil
}

// copyChecked copies r to dst, checking its size and SHA-256 against h.
func copyChecked(r io.Reader, dst string, h progressHeader) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, sum), r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return err
	case n != h.Size:
		return fmt.Errorf("%w: %d bytes, its header says %d", checkpoint.ErrCorrupt, n, h.Size)
	case hex.EncodeToString(sum.Sum(nil)) != h.SHA256:
		return fmt.Errorf("%w: SHA-256 differs from its header's", checkpoint.ErrCorrupt)
	}
	return nil
}

// Saved stores the progress the evaluator wrote to out, at step: called
// for each progress line, in the order of the evaluator's lines, so that a
// report that follows a save is stored after it.
func (a *attemptProgress) Saved(ctx context.Context, step int64) {
	if a == nil {
		return
	}
	// Once the evaluator saves, a hand-back waits for its saves (askSaves),
	// this one included.
	a.c.seen.Store(true)
	a.announced.Store(true)
	// One evaluation's saves come one at a time (its lines are read in
	// order), so mu is held for the state alone, not across the store:
	// askSaves reads it meanwhile.
	a.mu.Lock()
	last := a.saved
	a.mu.Unlock()
	var size int64
	if st, err := os.Stat(a.out); err == nil {
		size = st.Size()
	}
	ctx, cancel := saveContext(ctx, size)
	defer cancel()
	if err := a.store(ctx, step, last); err != nil {
		if !a.warned {
			a.warned = true
			a.log.WithError(err).WithField("step", step).Warn("saving the evaluator's progress failed; an interrupted design restarts from its last saved step (further failures of this evaluation are not logged)")
		}
		return
	}
	a.mu.Lock()
	a.saved, a.savedAt = step, time.Now()
	a.mu.Unlock()
	// A save says the evaluation lives, as a report does.
	_ = a.msg.InProgress()
}

func (a *attemptProgress) store(ctx context.Context, step, last int64) error {
	if last > 0 && step <= last {
		return fmt.Errorf("progress step %d does not follow the last saved, %d", step, last)
	}
	f, err := os.Open(a.out)
	if err != nil {
		return fmt.Errorf("progress line at step %d, but its file: %w", step, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > a.c.cfg.Max {
		return fmt.Errorf("progress of %d bytes is over the run's limit of %d bytes (max-checkpoint)", st.Size(), a.c.cfg.Max)
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return err
	}
	h := progressHeader{Format: progressFormat, Design: a.design, Step: step, Size: st.Size(), SHA256: hex.EncodeToString(sum.Sum(nil)),
		Seconds: a.fromSec + time.Since(a.began).Seconds()}
	path := a.c.store.OutPath(progressName(a.design), a.tag+"-"+strconv.FormatInt(step, 10))
	if err := writeProgress(path, h, f); err != nil {
		os.Remove(path)
		return err
	}
	_, err = a.c.store.Put(ctx, progressName(a.design), path) // which removes the file
	return err
}

// writeProgress writes h's line, then f's bytes from its start, to path.
func writeProgress(path string, h progressHeader, f *os.File) error {
	line, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err = out.Write(append(line, '\n')); err == nil {
		_, err = io.CopyN(out, f, h.Size)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// requestSave asks the evaluator to save now (the worker is about to hand
// the design back) and returns the step stored last.
func (a *attemptProgress) requestSave() int64 {
	if a == nil {
		return 0
	}
	if f, err := os.Create(a.request); err == nil {
		f.Close()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.saved
}

// resumes says whether the attempt is handed saved progress to start from.
func (a *attemptProgress) resumes() bool { return a != nil && a.in != "" }

// saves reports whether the evaluation saves its progress: it saved, or
// was handed some to resume from.
func (a *attemptProgress) saves() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.saved > 0 || a.in != "" || a.announced.Load()
}

// savedSince reports whether a save was stored after t.
func (a *attemptProgress) savedSince(t time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.savedAt.After(t)
}

// firstReport is told the step of the attempt's first report: one at or
// before the resume step means the evaluator started from scratch, so the
// attempt did not resume.
func (a *attemptProgress) firstReport(step int64) {
	if a != nil && a.in != "" && step <= a.from {
		a.mu.Lock()
		a.declined = true
		a.mu.Unlock()
	}
}

// resumedFrom is the step the attempt resumed from, 0 when it did not.
func (a *attemptProgress) resumedFrom() int64 {
	if a == nil || a.in == "" {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.declined {
		return 0
	}
	return a.from
}

// settle notes the attempt's progress on its result and removes its
// files. An evaluator that could not load the progress it was handed (its
// result says progress_unusable) did not resume.
func (a *attemptProgress) settle(res *schema.Result) {
	if a == nil {
		// progressFor gave none: the evaluator is a built-in that
		// writes no files, or the run keeps no store; either way no
		// attempt of this design could have saved progress.
		res.NoProgress = true
		return
	}
	for _, p := range []string{a.out, a.in, a.request} {
		if p != "" {
			_ = os.Remove(p)
		}
	}
	a.mu.Lock()
	res.ProgressStep = a.saved
	a.mu.Unlock()
	if why, said := res.Metrics[ProgressMetric]; said {
		if a.in != "" {
			a.log.WithField("why", why).Warn("the evaluator could not use its saved progress; the design trained from scratch")
		}
		return
	}
	if from := a.resumedFrom(); from > 0 {
		res.ResumedFrom, res.ResumedSeconds = from, a.fromSec
	}
	if a.note != "" {
		m := make(map[string]any, len(res.Metrics)+1)
		for k, v := range res.Metrics {
			m[k] = v
		}
		m[ProgressMetric] = a.note
		res.Metrics = m
	}
}

// ProgressStoreWait is the fixed part of the time one save has to be
// stored: the commit by the run's controller and the upload's first
// chunks. A store that does not answer in its time (the broker away, no
// controller to commit it) loses that save, with a warning, and the
// evaluation goes on.
const ProgressStoreWait = 10 * time.Second

// ProgressUploadRate is the slowest upload, in bytes a second, that a save
// is given time for: a save of B bytes has ProgressStoreWait + B /
// ProgressUploadRate (storeWait), so that a large progress file is not cut
// off by the fixed wait meant for the commit.
const ProgressUploadRate = 10 << 20

// storeWait is the time a save of size bytes has to be stored: the fixed
// ProgressStoreWait, for the commit, plus its upload at
// ProgressUploadRate.
func storeWait(size int64) time.Duration {
	if size <= 0 {
		return ProgressStoreWait
	}
	return ProgressStoreWait + time.Duration(float64(size)/ProgressUploadRate*float64(time.Second))
}

// HandBackSaveGrace is how long a save under way when its evaluation is
// cancelled (the walltime, an expired drain) still has to be stored: it is
// what the design's next attempt starts from, but the hand-back waits for
// it.
const HandBackSaveGrace = 5 * time.Second

// saveContext is the context of one save of size bytes by an evaluation
// running under parent: storeWait(size), cut to HandBackSaveGrace once
// parent ends. A
// save that starts once parent has ended (lines the evaluator printed
// before it was killed) is not stored: the hand-back does not wait for a
// queue of them.
func saveContext(parent context.Context, size int64) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), storeWait(size))
	if parent.Err() != nil {
		cancel()
		return ctx, cancel
	}
	var grace *time.Timer
	var mu sync.Mutex
	stop := context.AfterFunc(parent, func() {
		mu.Lock()
		grace = time.AfterFunc(HandBackSaveGrace, cancel)
		mu.Unlock()
	})
	return ctx, func() {
		stop()
		mu.Lock()
		if grace != nil {
			grace.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// DrainSaveWait is how long a worker whose drain time is over waits for its
// running evaluations to save their progress before it hands them back.
// At the walltime it waits half of --walltime-margin.
const DrainSaveWait = 10 * time.Second

// trackProgress adds a running evaluation to those askSaves asks, or
// removes it.
func (w *Worker) trackProgress(a *attemptProgress, on bool) {
	if a == nil {
		return
	}
	w.savingMu.Lock()
	defer w.savingMu.Unlock()
	if w.saving == nil {
		w.saving = map[*attemptProgress]struct{}{}
	}
	if on {
		w.saving[a] = struct{}{}
	} else {
		delete(w.saving, a)
	}
}

// askSaves asks every running evaluation to save its progress now (it is
// about to be handed back) and waits until each has stored a save made
// since, has ended, or wait is over: what it saves, its next attempt
// resumes from.
func (w *Worker) askSaves(wait time.Duration) {
	asked := time.Now()
	w.savingMu.Lock()
	running := make([]*attemptProgress, 0, len(w.saving))
	for a := range w.saving {
		// Once one evaluation saved, the evaluator saves: each running
		// one is waited for, even one that saves only when asked. A
		// worker whose evaluations never saved hands back at once, as it
		// did before progress was kept.
		if a.saves() || w.ckpt.seen.Load() {
			running = append(running, a)
		}
	}
	w.savingMu.Unlock()
	if len(running) == 0 {
		return
	}
	for _, a := range running {
		a.requestSave()
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		w.savingMu.Lock()
		for _, a := range running {
			if _, on := w.saving[a]; on && !a.savedSince(asked) {
				left++
			}
		}
		w.savingMu.Unlock()
		if left == 0 {
			w.log.WithField("evaluations", len(running)).Info("running evaluations saved their progress before the hand-back")
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			w.log.WithFields(logrus.Fields{"evaluations": len(running), "unsaved": left, "waited": wait}).
				Warn("evaluations did not save their progress in time before the hand-back; they resume from their last save, or from scratch")
			return
		}
	}
}

// isProgressLine says whether a line may be a progress line, cheaply.
func isProgressLine(b []byte) bool { return strings.Contains(string(b), `"progress"`) }

// progressLine parses {"progress": {"step": N}}; ok is false for any other
// line.
func progressLine(line string) (step int64, ok bool) {
	t := strings.TrimSpace(line)
	if !strings.HasPrefix(t, "{") || !strings.Contains(t, `"progress"`) {
		return 0, false
	}
	var e map[string]json.RawMessage
	if json.Unmarshal([]byte(t), &e) != nil || len(e) != 1 || e["progress"] == nil {
		return 0, false
	}
	var p struct {
		Step *json.Number `json:"step"`
	}
	if json.Unmarshal(e["progress"], &p) != nil || p.Step == nil {
		return 0, false
	}
	n, err := p.Step.Int64()
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
