package runstate

import (
	"fmt"
	"time"

	"github.com/evoq/evoq/schema"
)

// HeldSlots are the slots of worker that t quarantined while the worker's
// current process, whose last heartbeat is p (nil: none known), ran them.
// A worker restarted since (after a fix, with the same ID) starts afresh;
// if a slot still fails, its next failure continues its run of failures
// and quarantines it again. The controller and `evoq status` both apply
// this.
func HeldSlots(t *Tally, worker string, p *schema.Presence) []int {
	var out []int
	for _, i := range t.QuarantinedSlots(worker) {
		s, _ := t.Slot(worker, i)
		if StillHeld(p, s.LastFailure) {
			out = append(out, i)
		}
	}
	return out
}

// WorkerLoad is a worker as its last heartbeat, and the results it
// stored, show it.
type WorkerLoad struct {
	Worker      string
	Slots, Busy int
	// Live is whether its heartbeats are recent and it is not leaving.
	Live bool
	// Evaluations is the number of results it stored.
	Evaluations int
}

// QueueFigures are the counters of a run's work-queue consumer.
type QueueFigures struct {
	// Queued designs wait on the queue, delivered to no slot (NumPending).
	Queued int
	// Delivered designs are on a slot and not acked (NumAckPending).
	Delivered int
	// Waiting is the number of pull requests waiting (NumWaiting).
	Waiting int
	// MaxAckPending and MaxWaiting are the consumer's limits; 0: none.
	MaxAckPending, MaxWaiting int
	// Err says why the counters could not be read; the others are zero
	// then.
	Err error
}

// BudgetFigures say how much of a run's budget is done and whether
// designs remain to be handed out.
type BudgetFigures struct {
	Budget int
	// Done is the number of designs with a terminal result.
	Done int
	// Open is whether designs remain to be handed out: the controller has
	// published fewer than Budget (the run's phase is starting or running).
	Open bool
	// InFlight is the number of designs published without a terminal
	// result, Target the number the controller keeps in flight; both are
	// known to the controller only.
	InFlight, Target int
}

// IdleWorker is a live worker whose slots idle while there is work.
type IdleWorker struct {
	Worker string
	Slots  int
	// Idle is the number of its slots without a design.
	Idle int
	Why  IdleReason
	// Waiting is what there is to do: designs on the queue (IdleQueued)
	// or left in the budget (IdleBudget).
	Waiting int
}

// String says what is wrong, for a person.
func (w IdleWorker) String() string {
	switch w.Why {
	case IdleNever:
		return fmt.Sprintf("worker %s registered %d slots but never got a design", w.Worker, w.Slots)
	case IdleQueued:
		return fmt.Sprintf("worker %s has %d idle slots while %d designs wait on the queue", w.Worker, w.Idle, w.Waiting)
	}
	return fmt.Sprintf("worker %s has %d idle slots while the budget has %d designs left", w.Worker, w.Idle, w.Waiting)
}

// IdleWorkers lists, in the order of ws, the live workers whose slots
// idle while there is work for them: one that registered slots and never
// got a design, or one with idle slots while designs wait on the queue or
// the budget has designs left to hand out.
func IdleWorkers(ws []WorkerLoad, q QueueFigures, b BudgetFigures) []IdleWorker {
	var out []IdleWorker
	for _, w := range ws {
		iw := IdleWorker{Worker: w.Worker, Slots: w.Slots, Idle: w.Slots - w.Busy}
		switch {
		case !w.Live:
			continue
		case w.Evaluations == 0 && w.Busy == 0:
			iw.Why = IdleNever
		case w.Busy < w.Slots && q.Queued > 0:
			iw.Why, iw.Waiting = IdleQueued, q.Queued
		case w.Busy < w.Slots && b.Open && b.Done < b.Budget:
			iw.Why, iw.Waiting = IdleBudget, b.Budget-b.Done
		default:
			continue
		}
		out = append(out, iw)
	}
	return out
}

// Alive reports whether a worker is live at now, given its last heartbeat
// p and when that arrived: less than three of its intervals ago, and the
// worker is not leaving. Only a live worker's slots are fed; status shows
// the same workers as live.
func Alive(p schema.Presence, seen, now time.Time) bool {
	return !p.Leaving && now.Sub(seen) < 3*p.Interval
}

// IdleReason is why a worker's idle slots are a problem.
type IdleReason int

// Idle reasons, in the order IdleWorkers tests them.
const (
	// IdleNever: the worker registered slots but never got a design.
	IdleNever IdleReason = iota + 1
	// IdleQueued: designs wait on the queue while its slots idle.
	IdleQueued
	// IdleBudget: the budget has designs left to hand out while its
	// slots idle.
	IdleBudget
)
