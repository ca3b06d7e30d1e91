package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// A worker may start before its run's controller, so it waits for the run.
// With a mistyped run ID it would wait for ever while the run it was meant
// for starves: on 92 nodes a whole allocation idle. So a waiting worker
// looks at the run bucket and says, as a warning, when its run is not
// there, naming the runs that are.

// Timing of a waiting worker's warnings.
const (
	// RunWaitWarn is how long a worker waits for its run before it warns.
	RunWaitWarn = 5 * time.Second
	// RunWaitRepeatMax caps the interval between its warnings, which
	// double from RunWaitWarn: a worker queued hours before its
	// controller by design should not bury its log, but any few minutes
	// of the log should say why it idles.
	RunWaitRepeatMax = 5 * time.Minute
)

// ErrNoRun means the run did not start on the broker within
// Config.JoinTimeout.
var ErrNoRun = errors.New("the run did not start on the broker")

// NewWaitWarnings schedules the warnings of a worker waiting for a run
// since start: the first RunWaitWarn after it began waiting, then at
// doubling intervals up to RunWaitRepeatMax.
func NewWaitWarnings(start time.Time) *broker.Reminder {
	return broker.NewReminder(start, RunWaitWarn, RunWaitRepeatMax)
}

// RunSighting is what a worker waiting for its run sees in the run bucket.
type RunSighting struct {
	Run string
	// Phase is the run's phase; "" when the bucket has no entry for it.
	Phase schema.Phase
	// Err says why the run's entry could not be read.
	Err error
	// InProgress are the runs in progress on the broker, Run left out.
	InProgress []string
	// Unlisted means the worker's credential may not list the runs
	// (Config.RunsUnlisted); ListErr says why listing them failed.
	Unlisted bool
	ListErr  error
}

// Absent reports whether the run is not there to join: the run bucket has
// no entry for it, or it is done.
func (s RunSighting) Absent() bool {
	return s.Err == nil && (s.Phase == "" || s.Phase == schema.PhaseDone)
}

// String says what the worker found, for a person.
func (s RunSighting) String() string {
	var b strings.Builder
	switch {
	case s.Err != nil:
		fmt.Fprintf(&b, "the state of run %s cannot be read (%v)", s.Run, s.Err)
	case s.Phase == "":
		fmt.Fprintf(&b, "run %s is not on the broker: no controller has started it", s.Run)
	case s.Phase == schema.PhaseDone:
		fmt.Fprintf(&b, "run %s is done", s.Run)
	case s.Phase == schema.PhaseFailed:
		fmt.Fprintf(&b, "run %s failed (none of its first evaluations worked) and no controller has continued it", s.Run)
	default:
		fmt.Fprintf(&b, "run %s is %s; its work queue is not there yet", s.Run, s.Phase)
	}
	return b.String() + "; " + s.runsText()
}

// runsText says which runs are in progress on the broker, or why that is
// not known.
func (s RunSighting) runsText() string {
	switch {
	case s.Unlisted:
		return "this worker's credential cannot list the runs on the broker"
	case s.ListErr != nil:
		return fmt.Sprintf("the runs on the broker cannot be listed (%v)", s.ListErr)
	case len(s.InProgress) == 0:
		return "no run is in progress on the broker"
	}
	return "runs in progress on the broker: " + strings.Join(s.InProgress, ", ")
}

// Fields are the sighting as log fields.
func (s RunSighting) Fields() logrus.Fields {
	f := logrus.Fields{"phase": string(s.Phase)}
	if s.Phase == "" {
		f["phase"] = "none"
	}
	switch {
	case s.Unlisted:
		f["runs_in_progress"] = "unknown: this credential cannot list them"
	case s.ListErr != nil:
		f["runs_in_progress"] = "unknown: " + s.ListErr.Error()
	case len(s.InProgress) == 0:
		f["runs_in_progress"] = "none"
	default:
		f["runs_in_progress"] = strings.Join(s.InProgress, ",")
	}
	if s.Err != nil {
		f["error"] = s.Err.Error()
	}
	return f
}

// SightRun reads run's entry in the run bucket and, unless unlisted, the
// runs in progress, each bounded by a few seconds: a worker credential
// may read its own run's entry only, and a request the broker refuses for
// want of permission is never answered.
func SightRun(ctx context.Context, js jetstream.JetStream, run string, unlisted bool) RunSighting {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s := RunSighting{Run: run, Unlisted: unlisted}
	s.Phase, s.Err = runPhase(ctx, js, run)
	if unlisted {
		return s
	}
	runs, err := broker.RunsInProgress(ctx, js)
	if err != nil {
		s.ListErr = err
		return s
	}
	for _, r := range runs {
		if r != run {
			s.InProgress = append(s.InProgress, r)
		}
	}
	return s
}

// runPhase is run's phase in the run bucket; "" when it has no entry.
func runPhase(ctx context.Context, js jetstream.JetStream, run string) (schema.Phase, error) {
	kv, err := js.KeyValue(ctx, schema.RunBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("open bucket %s: %w", schema.RunBucket, err)
	}
	e, err := kv.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read run %s: %w", run, err)
	}
	r, err := schema.DecodeRun(e.Value())
	if err != nil {
		return "", fmt.Errorf("read run %s: %w", run, err)
	}
	return r.Phase, nil
}

// noteWait logs, when the schedule says so, why the worker still waits.
func (w *Worker) noteWait(ctx context.Context, ww *broker.Reminder, began time.Time) {
	if !ww.Due(time.Now()) {
		return
	}
	s := SightRun(ctx, w.js, w.cfg.Run, w.cfg.RunsUnlisted)
	log := w.log.WithFields(s.Fields()).WithField("waited", time.Since(began).Round(time.Second))
	switch {
	case s.Err != nil:
		log.Warn("cannot read the run's state; waiting for the run")
	case s.Phase == schema.PhaseDone:
		log.Warn("run is done on the broker; waiting in case it is continued")
	case s.Phase == schema.PhaseFailed:
		log.Warn("run failed: none of its first evaluations worked; waiting for a controller to continue it (fix the evaluator, then continue the run)")
	case s.Absent():
		log.Warn("run is not on the broker; waiting for it (check the run ID)")
	default:
		log.Info("waiting for the run's work queue")
	}
}
