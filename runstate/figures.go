package runstate

import (
	"maps"
	"time"

	"github.com/evoq/evoq/schema"
)

// Figures are what `evoq status` shows of a run's stored results: the
// counted results by status, the best, the results that do not count by
// the Tally's verdict, and each worker's attempts. A Fold keeps them as it
// folds; the controller puts them in its lease (Snapshot) every second, so
// that status reads them instead of the whole results stream.
type Figures struct {
	Done       int
	ByStatus   map[schema.Status]int
	Best       *float64
	BestID     string
	Duplicates int
	Foreign    int
	Malformed  int
	Retried    int
	Workers    map[string]*schema.WorkerFigures
	// Resumed is the counted designs whose last attempt resumed from
	// saved progress, and ResumedS the slot-seconds they did not repeat
	// (Result.ResumedSeconds). Scratch is the counted designs evaluated
	// again from scratch after an earlier attempt was interrupted
	// (retrainedFromScratch), and ScratchS an estimate of what that cost:
	// half of the design's own evaluation time per earlier attempt, the
	// expected loss of an interruption at a random point of its training.
	Resumed  int
	ResumedS float64
	Scratch  int
	ScratchS float64
}

// NewFigures returns empty figures.
func NewFigures() *Figures {
	return &Figures{ByStatus: map[schema.Status]int{}, Workers: map[string]*schema.WorkerFigures{}}
}

// Add takes in one stored result with the Tally's verdict on it: a
// counted result adds to the figures and its worker's, a retried attempt
// to its worker's alone.
func (f *Figures) Add(v Verdict, r *schema.Result) {
	switch v {
	case Duplicate:
		f.Duplicates++
		return
	case Foreign:
		f.Foreign++
		return
	case Malformed:
		f.Malformed++
		return
	case Retried:
		f.Retried++
		f.attempt(r)
		return
	}
	f.Done++
	f.ByStatus[r.Status]++
	f.interrupted(r)
	if r.Status == schema.StatusOK && (f.Best == nil || r.Fitness > *f.Best) {
		b := r.Fitness
		f.Best, f.BestID = &b, r.DesignID
	}
	f.attempt(r)
}

// interrupted counts a counted result's resume, or its evaluation again
// from scratch.
func (f *Figures) interrupted(r *schema.Result) {
	switch {
	case r.ResumedFrom > 0:
		f.Resumed++
		f.ResumedS += r.ResumedSeconds
	case RetrainedFromScratch(r):
		f.Scratch++
		f.ScratchS += float64(r.Attempt-1) * r.Duration().Seconds() / 2
	}
}

// RetrainedFromScratch says whether a counted result is of a design
// evaluated again from step 0 because its evaluator saves no progress: it
// was delivered more than once (Attempt > 1) by a worker (not lost), did
// not resume, and its evaluator is one that could save progress but saved
// none in this attempt. Not counted: a built-in evaluator, which cannot
// save progress at all (Result.NoProgress), and an attempt that saved
// progress (ProgressStep > 0): its evaluator does save, so an earlier
// attempt that had trained and saved would have been resumed, and one
// interrupted before its first save lost less than a save interval.
//
// Attempt counts deliveries, and a design handed back before it started
// (it arrived too late for the walltime, after the worker stopped taking
// designs, on a host it failed on before) was delivered without being
// trained: the record does not say which earlier deliveries started, so
// for an evaluator that saves no progress the count, and its cost, may
// include such designs.
func RetrainedFromScratch(r *schema.Result) bool {
	return r.Attempt > 1 && r.ResumedFrom == 0 && r.ProgressStep == 0 && !r.NoProgress &&
		r.Status != schema.StatusLost && r.Worker != ""
}

func (f *Figures) attempt(r *schema.Result) {
	if r.Worker == "" {
		return
	}
	w := f.Workers[r.Worker]
	if w == nil {
		w = &schema.WorkerFigures{}
		f.Workers[r.Worker] = w
	}
	w.Host = r.Host
	w.Evaluations++
	if r.Status == schema.StatusError || r.Status == schema.StatusTimeout {
		w.Failures++
	}
	if r.Stop.After(w.LastResult) {
		w.LastResult = r.Stop
	}
}

// SnapshotWorkersMax is the most workers a snapshot lists: beyond it the
// lease would grow past what a KV value should hold, and status reads
// the results stream instead.
const SnapshotWorkersMax = 4000

// Snapshot is f with t's quarantined slots, as the lease carries them; nil
// when f has more than SnapshotWorkersMax workers.
func (f *Figures) Snapshot(t *Tally, now time.Time) *schema.Figures {
	if len(f.Workers) > SnapshotWorkersMax {
		return nil
	}
	s := &schema.Figures{At: now.UTC(), Done: f.Done, ByStatus: maps.Clone(f.ByStatus), Best: clonePtr(f.Best),
		BestID: f.BestID, Duplicates: f.Duplicates, Foreign: f.Foreign, Malformed: f.Malformed, Retried: f.Retried,
		Workers: make(map[string]schema.WorkerFigures, len(f.Workers)),
		Resumed: f.Resumed, ResumedS: f.ResumedS, Scratch: f.Scratch, ScratchS: f.ScratchS}
	for k, v := range f.Workers {
		s.Workers[k] = *v
	}
	s.Quarantined = QuarantinedOf(t)
	return s
}

// QuarantinedOf lists the slots t's results quarantine.
func QuarantinedOf(t *Tally) []schema.QuarantinedSlot {
	var out []schema.QuarantinedSlot
	for _, h := range t.Quarantined() {
		out = append(out, schema.QuarantinedSlot{Worker: h.Worker, Slot: h.Slot, Host: h.Host,
			GPU: h.GPU, Failures: h.Failures, LastError: h.LastError, LastFailure: h.LastFailure})
	}
	return out
}

// HeldSlotsOf is HeldSlots over a list of quarantined slots: those of
// worker that stay quarantined, since the worker process p (nil if none is
// known) did not start after their last failure.
func HeldSlotsOf(qs []schema.QuarantinedSlot, worker string, p *schema.Presence) []schema.QuarantinedSlot {
	var out []schema.QuarantinedSlot
	for _, q := range qs {
		if q.Worker == worker && StillHeld(p, q.LastFailure) {
			out = append(out, q)
		}
	}
	return out
}

// FiguresOf turns a lease's snapshot back into figures, with the
// quarantined slots a status shows (HeldSlotsOf).
func FiguresOf(s *schema.Figures) *Figures {
	f := &Figures{Done: s.Done, ByStatus: maps.Clone(s.ByStatus), Best: clonePtr(s.Best), BestID: s.BestID,
		Duplicates: s.Duplicates, Foreign: s.Foreign, Malformed: s.Malformed, Retried: s.Retried,
		Workers: make(map[string]*schema.WorkerFigures, len(s.Workers)),
		Resumed: s.Resumed, ResumedS: s.ResumedS, Scratch: s.Scratch, ScratchS: s.ScratchS}
	if f.ByStatus == nil {
		f.ByStatus = map[schema.Status]int{}
	}
	for k, v := range s.Workers {
		f.Workers[k] = &v
	}
	return f
}

// StillHeld says whether a slot quarantined by a failure at lastFailure
// stays quarantined: its worker process p (nil if none is known) did not
// start after it.
func StillHeld(p *schema.Presence, lastFailure time.Time) bool {
	return p == nil || p.Started.IsZero() || !p.Started.After(lastFailure)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
