package worker

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// presence puts the worker's heartbeat every Heartbeat until the slots have
// stopped, then removes it.
func (w *Worker) presence() {
	defer w.bg.Done()
	// The bucket may be out of reach a while (a broker cluster electing a
	// leader): keep asking, loudly, since the controller counts only the
	// slots it hears of.
	ctx, cancel := untilClosed(w.slotsDone)
	defer cancel()
	var warned time.Time
	b := broker.Backoff{Initial: 250 * time.Millisecond, Max: 5 * time.Second, OnRetry: func(err error, _ time.Duration) {
		if time.Since(warned) > 10*time.Second {
			w.log.WithError(err).Error("presence bucket unavailable: the controller does not count this worker's slots until it is back; retrying")
			warned = time.Now()
		}
	}}
	var kv jetstream.KeyValue
	err := broker.Retry(ctx, b, func() (err error) {
		kv, err = w.js.KeyValue(w.evalCtx, schema.PresenceBucket)
		return err
	})
	if err != nil {
		return // the slots stopped first
	}
	key := schema.PresenceKey(w.cfg.Run, w.cfg.ID)
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	w.beat(kv, key, false)
	for {
		select {
		case <-w.slotsDone:
			w.leave(kv, key)
			return
		case <-t.C:
			w.beat(kv, key, w.fetchCtx.Err() != nil) // draining: leaving, still alive
		}
	}
}

func (w *Worker) beat(kv jetstream.KeyValue, key string, leaving bool) {
	p := &schema.Presence{
		Run: w.cfg.Run, Worker: w.cfg.ID, Host: w.cfg.Host, PID: os.Getpid(),
		Slots: w.cfg.Slots, Busy: min(int(w.busy.Load()), w.cfg.Slots), Done: w.done.Load(),
		Started: w.started, Heartbeat: time.Now(), Interval: w.cfg.Heartbeat, Leaving: leaving,
		Quarantined: w.quarantined(), Warnings: w.standingWarnings(),
	}
	data, err := schema.EncodePresence(p)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Heartbeat+time.Second)
		_, err = kv.Put(ctx, key, data)
		cancel()
	}
	if err != nil {
		w.log.WithError(err).Debug("presence heartbeat failed")
	}
}

func (w *Worker) leave(kv jetstream.KeyValue, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = kv.Delete(ctx, key)
}

// watchRun stops the worker when its run is done or failed. It listens to
// the run's key with a plain NATS subscription (renewed by the client
// across broker restarts) and also reads the key every RunPoll, in case
// the update came while the broker was out of reach.
func (w *Worker) watchRun() {
	defer w.bg.Done()
	ended := make(chan *schema.Run, 1)
	sub, err := w.js.Conn().Subscribe("$KV."+schema.RunBucket+"."+w.cfg.Run, func(m *nats.Msg) {
		if r := runEnded(m.Data); r != nil {
			select {
			case ended <- r:
			default:
			}
		}
	})
	if err == nil {
		defer sub.Unsubscribe()
	}
	t := time.NewTicker(RunPoll)
	defer t.Stop()
	var runs jetstream.KeyValue // bound once: binding asks the broker for the bucket's stream
	for {
		var r *schema.Run
		select {
		case <-w.fetchCtx.Done():
			return
		case r = <-ended:
		case <-t.C:
			if r = w.readRunEnded(&runs); r == nil {
				continue
			}
		}
		if r.Phase == schema.PhaseFailed {
			w.leaveFailed(r.Failure)
		} else {
			w.leaveDone()
		}
		return
	}
}

// leaveDone stops the worker because its run is done. A worker that
// joined the run once it was done was most likely started for the wrong
// run (an old run ID in a job script): it says so, naming the runs in
// progress.
func (w *Worker) leaveDone() {
	if w.lateForRun {
		s := SightRun(w.evalCtx, w.js, w.cfg.Run, w.cfg.RunsUnlisted)
		w.log.WithFields(s.Fields()).Warn("run was already done when this worker joined; leaving (check the run ID)")
	} else {
		w.log.WithField("busy", w.busy.Load()).Info("run is done; leaving")
	}
	w.stopNow()
}

// leaveFailed stops the worker because the controller stopped its run,
// none of whose first evaluations worked. The worker stops taking designs
// but lets running evaluations finish and store their results, like a
// drain: a worker whose evaluator works loses nothing, and the run's
// next controller counts them. It then ends with ErrRunFailed, so that
// a batch system shows a failed step.
func (w *Worker) leaveFailed(f *schema.Failure) {
	err := ErrRunFailed
	l := w.log.WithField("busy", w.busy.Load())
	if f != nil {
		err = fmt.Errorf("%w: %d of its first %d evaluations failed with %q", ErrRunFailed, f.Count, f.Attempts, f.Error)
		l = l.WithField("error", f.Error)
	}
	w.failed.Store(&err)
	l.Error("run failed: none of its first evaluations worked; leaving once the running ones end (check this worker's evaluator and environment)")
	w.stopOnce.Do(func() {})
	w.stopFetching()
}

// RunPoll is how often a worker reads its run's state as a backstop.
const RunPoll = 2 * time.Second

// readRunEnded reads the run's record through *runs, binding the bucket
// on first use: a poll every RunPoll from every worker must cost the
// broker one direct get, not a stream info as well.
func (w *Worker) readRunEnded(runs *jetstream.KeyValue) *schema.Run {
	ctx, cancel := context.WithTimeout(w.fetchCtx, RunPoll)
	defer cancel()
	if *runs == nil {
		kv, err := w.js.KeyValue(ctx, schema.RunBucket)
		if err != nil {
			return nil
		}
		*runs = kv
	}
	e, err := (*runs).Get(ctx, w.cfg.Run)
	if err != nil {
		return nil
	}
	return runEnded(e.Value())
}

// runEnded is the run's record when it is done or failed, else nil.
func runEnded(data []byte) *schema.Run {
	r, err := schema.DecodeRun(data)
	if err != nil || (r.Phase != schema.PhaseDone && r.Phase != schema.PhaseFailed) {
		return nil
	}
	return r
}

// untilClosed is a context that ends when ch is closed, or when cancel is
// called.
func untilClosed(ch <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-ch:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
