package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// slot is one evaluation slot: it pulls one design at a time, only when it
// is free.
func (w *Worker) slot(i int) {
	defer w.slots.Done()
	s := &slotState{index: i, log: w.log.WithField("slot", i)}
	defer s.waitStored()
	// A quarantined slot stops before it asks for its next design.
	for w.fetchCtx.Err() == nil && w.walltimeAllows() {
		wake, ok := w.q.mayAsk(i)
		if !ok {
			return
		}
		msg, err := w.next(s, wake)
		if err != nil {
			w.fetchFailed(s, err)
			continue
		}
		if w.fetchCtx.Err() != nil || w.isQuarantined(i) {
			_ = msg.Nak() // arrived after Stop or quarantine: hand it back at once
			return
		}
		w.handle(s, msg)
	}
}

// slotState is what one slot remembers between designs.
type slotState struct {
	index      int
	log        logrus.FieldLogger
	lastStop   time.Time     // when the previous evaluation ended
	stored     chan struct{} // closed when the previous result is stored and its design acked; nil if none
	lastErrLog time.Time
}

// waitStored waits until the slot's previous result is stored and its
// design acked (or handed back), so that a slot has at most one result on
// its way to the broker.
func (s *slotState) waitStored() {
	if s.stored != nil {
		<-s.stored
		s.stored = nil
	}
}

// next waits for exactly one design, pulled for this slot by the
// worker's feeder, until the worker stops fetching or wake is closed.
func (w *Worker) next(s *slotState, wake <-chan struct{}) (design, error) {
	m, err := w.feed.next(w.fetchCtx, wake)
	return design{m, w.js.Conn()}, err
}

func (w *Worker) fetchFailed(s *slotState, err error) {
	if w.fetchCtx.Err() != nil || errors.Is(err, errWoken) {
		return // the slot loop checks why, and asks again unless it stops
	}
	if time.Since(s.lastErrLog) > 10*time.Second {
		s.log.WithError(err).Warn("fetching a design failed; retrying")
		s.lastErrLog = time.Now()
	}
	select {
	case <-w.fetchCtx.Done():
	case <-time.After(500 * time.Millisecond):
	}
}

// handle evaluates one design and stores its result, then acks the design.
func (w *Worker) handle(s *slotState, msg design) {
	start := time.Now()
	if !w.arrivedInTime(s, msg) {
		return
	}
	attempt := msg.Attempt()
	d, err := schema.DecodeReceived(msg.Data())
	if err == nil && w.space != nil {
		if _, verr := w.space.Validate(d.Genome); verr != nil {
			err = fmt.Errorf("genome does not fit the run's search space: %w", verr)
		}
	}
	if err != nil {
		w.reject(s, msg, d, err, attempt, start)
		return
	}
	if w.avoided(d, attempt) {
		s.log.WithFields(logrus.Fields{"design": d.ID, "retry": d.Retry, "attempt": attempt}).
			Info("design failed on this worker or host before; handed back for a slot elsewhere")
		_ = msg.NakDelay(AvoidDelay)
		return
	}
	w.busy.Add(1)
	stopProgress := w.prog.add(msg) // through the store too: it may wait out a broker restart
	tag := w.fileTag(s.index, d, attempt)
	prog := w.ckpt.progressFor(w.evalCtx, s.log, d, msg, tag)
	files := w.ckpt.prepare(w.evalCtx, s.log, d, tag, prog.resumes())
	w.trackProgress(prog, true)
	res, handBack := w.evaluate(s, msg, d, attempt, start, files, prog)
	w.trackProgress(prog, false)
	prog.settle(res)
	w.busy.Add(-1)
	s.lastStop = res.Stop
	if w.evalCtx.Err() != nil {
		stopProgress()
		files.discard()
		w.cancelled(s, msg, d, attempt, start)
		return
	}
	if !handBack && w.stoppedWithJob(res) {
		stopProgress()
		files.discard()
		s.log.WithFields(logrus.Fields{"design": d.ID, "attempt": attempt, "signal": res.Signal}).
			Info("the evaluator was stopped with the job; design handed back for another try, not counted as a failure")
		_ = msg.Nak()
		return
	}
	if handBack {
		stopProgress()
		files.discard()
		s.log.WithFields(logrus.Fields{"design": d.ID, "attempt": attempt}).WithFields(processFields(res)).WithField("error", logError(res.Error, 300)).
			Warn("evaluator failed; design handed back for another try")
		_ = msg.Nak()
		return
	}
	// Measured now, not once stored: the slot asks for its next design
	// while this result is stored, and the walltime check of that design
	// must know how long this one took.
	w.evalTimes.add(res.Duration())
	// The result is stored while the slot asks for its next design: the
	// slot is free once the evaluation ends. The design is acked only once
	// the broker confirms the result, and a slot has at most one result on
	// its way.
	s.waitStored()
	stored := make(chan struct{})
	s.stored = stored
	w.storing.do(func() {
		defer close(stored)
		defer stopProgress()
		w.ckpt.put(w.evalCtx, s.log, files, res)
		w.finish(s, msg, res)
	})
}

// cancelled hands back a design whose evaluation a hard stop (the walltime,
// an expired drain) cancelled, and says which design it was and when it
// started: the stop's own line gives only how many.
func (w *Worker) cancelled(s *slotState, msg design, d *schema.Design, attempt int, start time.Time) {
	l := s.log.WithFields(logrus.Fields{"design": d.ID, "attempt": attempt, "started": start.Format(time.RFC3339Nano)})
	if err := msg.Nak(); err != nil {
		l.WithError(err).Warn("evaluation cancelled; handing the design back failed, the broker redelivers it after its ack wait")
		return
	}
	l.Info("evaluation cancelled; design handed back")
}

// finish stores the result of msg's design, then acks the design; if the
// result cannot be stored the design is handed back.
func (w *Worker) finish(s *slotState, msg design, res *schema.Result) {
	if !w.store(s, res) {
		_ = msg.Nak()
		return
	}
	w.done.Add(1)
	w.noteFailure(res)
	if w.cfg.OnStored != nil {
		w.cfg.OnStored(res)
	}
	w.logResult(s, res)
	if err := msg.Ack(); err != nil {
		s.log.WithError(err).WithField("design", res.DesignID).Warn("ack failed; the design may be evaluated again and will count once")
	}
}

// logResult logs one line per finished evaluation: design, host, slot,
// GPU, attempt, status and duration; failures as warnings with the reason.
func (w *Worker) logResult(s *slotState, r *schema.Result) {
	failed := r.Status == schema.StatusError || r.Status == schema.StatusTimeout
	if !failed && !levelEnabled(s.log, logrus.InfoLevel) {
		// Building the entry copies the slot's fields into a new map:
		// on a worker logging at warn, as evoq run's are, that was a few
		// µs an evaluation spent on a line nobody sees.
		return
	}
	l := s.log.WithFields(logrus.Fields{"design": r.DesignID, "status": r.Status, "attempt": r.Attempt,
		"host": r.Host, "duration": r.Duration().Round(time.Millisecond)})
	if r.GPU != "" {
		l = l.WithField("gpu", r.GPU)
	}
	switch {
	case failed:
		l.WithFields(processFields(r)).WithField("error", logError(r.Error, 300)).Warn("evaluation failed")
	default:
		l.WithField("fitness", r.Fitness).Info("evaluation done")
	}
}

// levelEnabled reports whether log takes lines of level; true when it
// cannot tell.
func levelEnabled(log logrus.FieldLogger, level logrus.Level) bool {
	switch l := log.(type) {
	case *logrus.Logger:
		return l.IsLevelEnabled(level)
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(level)
	}
	return true
}

// processFields are the log fields of how r's evaluator process ended,
// with the GPU's UUID: what tells a broken node from a broken design.
func processFields(r *schema.Result) logrus.Fields {
	f := logrus.Fields{}
	if r.Exit != nil {
		f["exit"] = *r.Exit
	}
	if r.Signal != "" {
		f["signal"] = r.Signal
	}
	if r.GPUUUID != "" {
		f["gpu_uuid"] = r.GPUUUID
	}
	return f
}

// reject handles a design that does not decode or validate. When its
// identity is known and it belongs to this run, it gets a terminal error
// result; either way it is terminated so that it does not circle between
// slots.
func (w *Worker) reject(s *slotState, msg design, d *schema.Design, err error, attempt int, start time.Time) {
	f := logrus.Fields{"bytes": len(msg.Data())}
	if d != nil && d.ID != "" {
		f["design"] = d.ID
	}
	s.log.WithFields(f).WithError(err).Error("rejected a malformed design")
	s.waitStored()
	if d != nil && d.Run == w.cfg.Run && d.ValidateIdentity() == nil {
		res := w.result(s, d, attempt, start, Outcome{Status: schema.StatusError,
			Fitness: schema.InfeasibleFitness, Error: clip("design rejected: "+err.Error(), 2000)})
		if !w.store(s, res) {
			_ = msg.Nak()
			return
		}
	}
	_ = msg.TermWithReason("malformed design: " + clip(err.Error(), 200))
}

// evaluate runs the evaluator and builds the result. A panicking evaluator
// becomes an error result.
func (w *Worker) evaluate(s *slotState, msg design, d *schema.Design, attempt int, start time.Time, files taskFiles,
	prog *attemptProgress) (*schema.Result, bool) {
	rep := w.newReporter(s, msg, d, attempt)
	rep.prog = prog
	t := Task{Design: d, Worker: w.cfg.ID, Slot: s.index, Attempt: attempt, GPU: w.gpu(s.index),
		Reports: rep, CheckpointOut: files.out, ParentCheckpoint: files.parent,
		Log: s.log.WithFields(logrus.Fields{"design": d.ID, "attempt": attempt}), Warn: w.addWarning}
	if prog != nil {
		t.ProgressOut, t.ProgressIn, t.ResumeStep, t.ProgressRequest = prog.out, prog.in, prog.from, prog.request
		t.Saved = func(step int64) { prog.Saved(w.evalCtx, step) }
	}
	out := w.runEvaluator(t)
	files.settle(&out)
	return w.result(s, d, attempt, start, out), out.HandBack
}

// result builds the result of design d from an outcome.
func (w *Worker) result(s *slotState, d *schema.Design, attempt int, start time.Time, out Outcome) *schema.Result {
	gap := time.Duration(-1)
	if !s.lastStop.IsZero() {
		gap = max(start.Sub(s.lastStop), 0)
	}
	return &schema.Result{
		Run: d.Run, DesignID: d.ID, Design: *d, Status: out.Status, Fitness: out.Fitness,
		Metrics: out.Metrics, Worker: w.cfg.ID, Host: w.cfg.Host, Slot: s.index, GPU: w.gpu(s.index),
		Attempt: attempt, Start: start, Stop: time.Now(), Gap: gap, Error: out.Error,
		GPUUUID: w.gpuUUID(s.index), Exit: out.Exit, Signal: out.Signal,
	}
}

func (w *Worker) runEvaluator(t Task) (out Outcome) {
	ctx, cancel := w.evalContext()
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			out = Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
				Error: fmt.Sprintf("evaluator panicked: %v\n%s", p, debug.Stack())}
		}
	}()
	out = w.cfg.Evaluator.Evaluate(ctx, t)
	if out.HandBack {
		return out
	}
	if !out.Status.Valid() || out.Status == schema.StatusLost {
		out = Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
			Error: fmt.Sprintf("evaluator returned status %q", out.Status)}
	}
	if out.Status == schema.StatusOK && w.objectives.Pareto() {
		// A result the pool cannot rank is the evaluator's error, said
		// where its author looks, not a design the search silently skips.
		if _, err := w.objectives.Measure(out.Fitness, out.Metrics); err != nil {
			out.Status, out.Fitness = schema.StatusError, schema.InfeasibleFitness
			out.Error = fmt.Sprintf("%v (the run's objectives: %s)", err, w.objectives)
		}
	}
	return out
}

// gpu is slot's GPU, "" for none.
func (w *Worker) gpu(slot int) string {
	if w.cfg.SlotGPUs == nil {
		return ""
	}
	return w.cfg.SlotGPUs[slot]
}

// gpuUUID is the UUID of slot's GPU, "" if unknown.
func (w *Worker) gpuUUID(slot int) string {
	if w.cfg.SlotGPUUUIDs == nil {
		return ""
	}
	return w.cfg.SlotGPUUUIDs[slot]
}

func (w *Worker) evalContext() (context.Context, context.CancelFunc) {
	if w.cfg.EvalTimeout > 0 {
		return context.WithTimeout(w.evalCtx, w.cfg.EvalTimeout)
	}
	return context.WithCancel(w.evalCtx)
}

// store publishes res and waits for the broker's confirmation, retrying
// until it comes (across broker restarts) or the worker is hard-stopped.
// PublishWait bounds the wait for the broker's confirmation of one
// attempt to store a result (nats.go's own default for a request); an
// attempt that gets none is retried, with the same Nats-Msg-Id.
const PublishWait = 5 * time.Second

func (w *Worker) store(s *slotState, res *schema.Result) bool {
	data, err := schema.EncodeResult(res)
	if err != nil {
		res = w.oversized(res, err)
		if data, err = schema.EncodeResult(res); err != nil {
			s.log.WithError(err).WithField("design", res.DesignID).Error("result cannot be encoded")
			return false
		}
	}
	subject, id := schema.ResultSubject(res.Run), res.MsgID()
	// A full store is retried too: the result is held until there is room.
	b := broker.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second, OnRetry: func(err error, _ time.Duration) {
		lg := s.log.WithError(err).WithField("design", res.DesignID)
		if broker.StoreFull(err) {
			lg.Error("the broker's store is full: holding the result until there is room (free disk or raise --max-store)")
			_ = w.js.Conn().Publish(schema.AlertSubject(res.Run), []byte(schema.AlertStoreFull+" "+w.cfg.ID))
		} else {
			lg.Warn("storing result failed; holding it and retrying")
		}
	}}
	err = broker.Retry(w.evalCtx, b, func() error {
		// A stop does not cut short a publish already out: when the run
		// is done the worker stops at once, often while the last
		// result's confirmation is on its way, and a result stored but
		// never acked leaves its design on the work queue, evaluated
		// again if the run is continued. A stop ends the retries, not
		// the wait for one confirmation, which PublishWait bounds.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.evalCtx), PublishWait)
		defer cancel()
		_, err := w.js.Publish(ctx, subject, data, jetstream.WithMsgID(id))
		return err
	})
	return err == nil // else hard-stopped: the caller hands the design back
}

// oversized replaces a result that does not encode (too large metrics) by
// an error result that says why.
func (w *Worker) oversized(res *schema.Result, err error) *schema.Result {
	r := *res
	r.Status, r.Fitness, r.Metrics = schema.StatusError, schema.InfeasibleFitness, nil
	r.Error = clip("result not storable: "+err.Error()+"; evaluator said: "+res.Error, 2000)
	return &r
}
