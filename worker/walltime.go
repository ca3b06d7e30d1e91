package worker

import (
	"slices"
	"sync"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// Walltime defaults.
const (
	// WalltimeMarginDefault is how long before the allocation's end a worker
	// hands back unfinished designs and exits, before the batch system kills it.
	WalltimeMarginDefault = 30 * time.Second
	durationsKept         = 256
)

// durations keeps the latest evaluation times of a worker, for the
// typical evaluation time the walltime check uses.
type durations struct {
	mu   sync.Mutex
	ring []time.Duration
	next int
}

func (d *durations) add(x time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ring) < durationsKept {
		d.ring = append(d.ring, x)
		return
	}
	d.ring[d.next] = x
	d.next = (d.next + 1) % durationsKept
}

// p90 is the 90th percentile of the kept durations, 0 when there are none.
func (d *durations) p90() time.Duration {
	d.mu.Lock()
	s := slices.Clone(d.ring)
	d.mu.Unlock()
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*9/10)]
}

// typicalEval is the time an evaluation is expected to take: the p90 of
// this worker's evaluations so far, at least MinEvalTime.
func (w *Worker) typicalEval() time.Duration { return max(w.evalTimes.p90(), w.cfg.MinEvalTime) }

// walltimeCheckEvery is how often the worker looks whether the time left
// still covers a typical evaluation, so that a worker whose slots all wait
// on an empty queue leaves as soon as it can take nothing more.
const walltimeCheckEvery = time.Second

// fits reports whether an evaluation started now is expected to end before
// the deadline less the margin: the time left then, and the typical
// evaluation it must cover.
func (w *Worker) fits() (left, typical time.Duration, ok bool) {
	if w.cfg.Deadline.IsZero() {
		return 0, 0, true
	}
	left = w.cfg.Deadline.Add(-w.cfg.WalltimeMargin).Sub(w.now())
	typical = w.typicalEval()
	return left, typical, left >= typical
}

// walltimeAllows is checked before a slot asks for a design; when too
// little time is left it stops the worker taking designs.
func (w *Worker) walltimeAllows() bool {
	left, typical, ok := w.fits()
	if !ok {
		w.stopTaking(left, typical)
	}
	return ok
}

// stopTaking stops every slot from asking for designs, once: the periodic
// check, a slot about to ask and a slot whose design came too late may all
// find it first.
func (w *Worker) stopTaking(left, typical time.Duration) {
	w.walltimeOnce.Do(func() {
		w.log.WithFields(logrus.Fields{"left": left.Round(time.Millisecond), "typical_eval": typical.Round(time.Millisecond)}).
			Warn("walltime: too little time left for another evaluation; taking no new designs")
		w.stopFetching()
	})
}

// arrivedInTime checks the walltime again when a design arrives, before it
// is started. The check before the pull request is not enough: a slot asks
// for its next design while its previous result is being stored, and on an
// empty queue a free slot waits until a design comes, so the design can
// come when it can no longer finish. Such a design is handed back at once,
// unevaluated, for a worker with time left; it is not kept until the hard
// stop, where it would only be cancelled.
func (w *Worker) arrivedInTime(s *slotState, msg design) bool {
	left, typical, ok := w.fits()
	if ok {
		return true
	}
	// Stop the other slots first, and end the worker's pull requests (see
	// stopFetching), so that the design handed back is not delivered to
	// this worker again.
	w.stopTaking(left, typical)
	l := s.log.WithFields(logrus.Fields{"attempt": msg.Attempt(), "left": left.Round(time.Millisecond),
		"typical_eval": typical.Round(time.Millisecond)})
	if d, err := schema.DecodeDesign(msg.Data()); err == nil {
		l = l.WithField("design", d.ID)
	}
	if err := msg.Nak(); err != nil {
		l.WithError(err).Warn("walltime: a design arrived too late to finish in time; handing it back failed, the broker redelivers it after its ack wait")
		return false
	}
	l.Warn("walltime: a design arrived too late to finish in time; handed it back unevaluated")
	return false
}

// watchWalltime stops taking designs once the time left before the
// deadline, less the margin, is shorter than a typical evaluation, and at
// deadline - margin hands back what is still running, so the worker leaves
// before the batch system kills it.
func (w *Worker) watchWalltime() {
	defer w.bg.Done()
	if w.cfg.Deadline.IsZero() {
		<-w.slotsDone
		return
	}
	hard := time.NewTimer(w.cfg.Deadline.Add(-w.cfg.WalltimeMargin).Sub(w.now()))
	defer hard.Stop()
	tick := time.NewTicker(w.walltimeEvery)
	defer tick.Stop()
	for {
		w.walltimeAllows()
		select {
		case <-w.slotsDone:
			return
		case <-hard.C:
			// Logged before the hand-back even when no check found it
			// first: on a loaded machine this timer can fire before the
			// tick that would have.
			left, typical, _ := w.fits()
			w.stopTaking(left, typical)
			w.log.WithField("busy", w.busy.Load()).Warn("walltime: handing back the designs still running and leaving")
			w.askSaves(w.cfg.WalltimeMargin / 2)
			w.evalCancel()
			<-w.slotsDone
			return
		case <-tick.C:
		}
	}
}
