package worker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// The controller quarantines a slot that fails its designs while other
// slots succeed (a broken GPU, a full disk on this node) and says so with
// a Control message. A quarantined slot finishes the design it has and
// takes no other; when every slot is quarantined the worker leaves with
// ErrQuarantined, so that the batch system shows a failed step and the
// node's allocation is not spent failing designs.

// ErrQuarantined means every slot of the worker was quarantined by the
// controller: the worker left. The error names the host, the GPUs and the
// last error of its slots.
var ErrQuarantined = errors.New("every slot of this worker is quarantined")

// AvoidDelay is how long a design that avoids this worker or host is
// handed back for: long enough for a slot elsewhere to take it, or for
// this worker's quarantine to come, while this slot takes other designs.
const AvoidDelay = 2 * time.Second

// AvoidHandBacks bounds the hand-backs of one design when the consumer
// delivers without limit (MaxDeliver -1): with no worker elsewhere left,
// the design is evaluated here rather than circle for ever.
const AvoidHandBacks = 3

// quarantine is the worker's record of its quarantined slots.
type quarantine struct {
	mu      sync.Mutex
	slots   map[int]bool
	lastErr map[int]string // each slot's last failed evaluation's error
	reason  string
	// wake is closed, and replaced, when slots are quarantined: the free
	// slots waiting for a design wake and check whether they still may.
	wake chan struct{}
}

// mayAsk reports whether slot i may ask for a design, and if so returns
// what it waits on beside the design: a channel closed when slots are
// quarantined. Both under one lock, so that an order that comes after the
// check closes the channel the slot waits on.
func (q *quarantine) mayAsk(i int) (<-chan struct{}, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.slots[i] {
		return nil, false
	}
	if q.wake == nil {
		q.wake = make(chan struct{})
	}
	return q.wake, true
}

// isQuarantined reports whether slot i is quarantined.
func (w *Worker) isQuarantined(i int) bool {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.q.slots[i]
}

// quarantined lists the quarantined slots, sorted.
func (w *Worker) quarantined() []int {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	var out []int
	for i := range w.q.slots {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// noteFailure keeps the error of a slot's failed evaluation for the log
// line of a worker that leaves quarantined.
func (w *Worker) noteFailure(r *schema.Result) {
	if r.Status != schema.StatusError && r.Status != schema.StatusTimeout {
		return
	}
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	w.q.lastErr[r.Slot] = r.Error
}

// watchControl subscribes to the controller's orders to this worker; the
// subscription ends when the slots have stopped.
func (w *Worker) watchControl() error {
	sub, err := w.js.Conn().Subscribe(schema.ControlSubject(w.cfg.Run, w.cfg.ID), func(m *nats.Msg) {
		c, err := schema.DecodeControl(m.Data)
		if err != nil || c.Run != w.cfg.Run || c.Worker != w.cfg.ID {
			w.log.WithError(err).Warn("ignoring a malformed control message")
			return
		}
		w.onControl(c)
	})
	if err != nil {
		return fmt.Errorf("subscribe to the controller's orders: %w", err)
	}
	go func() { <-w.slotsDone; _ = sub.Unsubscribe() }()
	return nil
}

// onControl quarantines the slots c names.
func (w *Worker) onControl(c *schema.Control) {
	w.q.mu.Lock()
	var added []int
	for _, i := range c.Quarantine {
		if i < w.cfg.Slots && !w.q.slots[i] {
			w.q.slots[i] = true
			added = append(added, i)
		}
	}
	w.q.reason = c.Reason
	all := len(w.q.slots) == w.cfg.Slots
	if len(added) > 0 && w.q.wake != nil {
		close(w.q.wake) // a quarantined slot that waits stops now, not at its next design
		w.q.wake = nil
	}
	w.q.mu.Unlock()
	for _, i := range added {
		l := w.log.WithFields(logrus.Fields{"slot": i, "host": w.cfg.Host, "reason": c.Reason})
		if g := w.gpu(i); g != "" {
			l = l.WithField("gpu", g)
		}
		l.Warn("the controller quarantined this slot: it finishes its design and takes no other")
	}
	if all && len(added) > 0 {
		w.log.WithField("slots", w.cfg.Slots).Warn("every slot is quarantined: the worker leaves once their designs are done")
	}
}

// allQuarantined reports whether every slot is quarantined.
func (w *Worker) allQuarantined() bool {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return len(w.q.slots) == w.cfg.Slots
}

// lastError is the error of the latest failed evaluation of the
// highest slot that has one.
func (w *Worker) lastError() string {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	last := ""
	for i := range w.cfg.Slots {
		if e := w.q.lastErr[i]; e != "" {
			last = e
		}
	}
	return last
}

// leaveQuarantined logs why the worker leaves, in one line with what a
// batch job's log needs (host, GPUs, the tail of the last error, which for
// an external evaluator ends with its stderr), and sets the worker's
// error to the same.
func (w *Worker) leaveQuarantined() {
	last := lastBytes(w.lastError(), 500)
	f := logrus.Fields{"host": w.cfg.Host, "slots": w.cfg.Slots, "last_error": last}
	where := "host " + w.cfg.Host
	if w.cfg.SlotGPUs != nil {
		gpus := strings.Join(w.cfg.SlotGPUs, ",")
		f["gpu"], where = gpus, where+", GPU "+gpus
	}
	w.log.WithFields(f).Error("every slot of this worker is quarantined: leaving (check this node: its GPUs, disk and the evaluator's environment)")
	w.q.mu.Lock()
	reason := w.q.reason
	w.q.mu.Unlock()
	w.err = fmt.Errorf("%w (%s): %s; last error: %s", ErrQuarantined, where, reason, last)
}

// lastBytes is the last n bytes of s, marking the cut.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// avoided reports whether the slot should hand d back rather than
// evaluate it: an earlier attempt failed on this worker or host, and the
// design has deliveries to spare. At MaxDeliver-1 deliveries it is
// evaluated here: one more hand-back could make it lost, and one delivery
// is kept for a worker that dies while evaluating it.
func (w *Worker) avoided(d *schema.Design, attempt int) bool {
	if !d.Avoids(w.cfg.ID, w.cfg.Host) {
		return false
	}
	if w.maxDeliver > 0 {
		return attempt < w.maxDeliver-1
	}
	return attempt <= AvoidHandBacks
}
