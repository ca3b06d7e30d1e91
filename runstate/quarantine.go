package runstate

import (
	"cmp"
	"slices"
	"time"

	"github.com/evoq/evoq/schema"
)

// A broken node (a failed GPU, a full disk, a module missing from one
// image) fails every design fast, so it pulls far more designs than the
// healthy slots and turns them into errors. The tally charges such
// failures to the slot: a slot whose last Rules.QuarantineAfter attempts
// all failed (error or timeout) is quarantined once some other slot of the
// run has an ok or infeasible result, which shows that the evaluator and
// the search space work. Without that, every slot failing is the run's
// fault, not a node's, and quarantining them all would only hide it.
//
// The rule reads the run's own results in stream order and nothing else,
// whatever their verdict (a duplicate attempt ran on its slot too), so a
// restarted controller and the tools find the same quarantined slots as
// the live controller. An ok or infeasible result of a quarantined slot
// (the design it was running when it was quarantined, or the slot's worker
// restarted after a fix) ends its run of failures and with it the
// quarantine.

// SlotKey names one slot of one worker.
type SlotKey struct {
	Worker string
	Slot   int
}

// SlotHealth is what the run's results say of one slot.
type SlotHealth struct {
	SlotKey
	// Host and GPU are those of the slot's last result.
	Host, GPU string
	// Failures is the number of its failed attempts in a row, LastError
	// the last one's error text and LastFailure when it ended (the
	// worker's clock).
	Failures    int
	LastError   string
	LastFailure time.Time
	Quarantined bool
}

// SlotEventKind is what changed in a slot's health.
type SlotEventKind uint8

// Slot events, in the order a slot's failures bring them.
const (
	// SlotSuspect: the slot's failures in a row reached QuarantineAfter
	// while no other slot has an ok or infeasible result, so it is not
	// quarantined (yet).
	SlotSuspect SlotEventKind = iota + 1
	// SlotQuarantined: the slot is quarantined now.
	SlotQuarantined
	// SlotStillFailing: a quarantined slot failed again; its worker has
	// not stopped it (yet).
	SlotStillFailing
	// SlotRecovered: a quarantined slot had an ok or infeasible result;
	// it is no longer quarantined.
	SlotRecovered
)

// SlotEvent is one change in a slot's health, with the slot's health
// after it.
type SlotEvent struct {
	Kind SlotEventKind
	Slot SlotHealth
}

// health keeps the slots' health for a tally.
type health struct {
	after    int
	slots    map[SlotKey]*SlotHealth
	okSlot   SlotKey // the first slot with an ok or infeasible result
	okSlots  int     // slots with one, counted up to 2
	suspects map[SlotKey]bool
	byWorker map[string][]int // quarantined slots, sorted
	events   []SlotEvent      // of the last result judged
}

func newHealth(after int) *health {
	return &health{after: after, slots: map[SlotKey]*SlotHealth{}, suspects: map[SlotKey]bool{},
		byWorker: map[string][]int{}}
}

// observe takes in one result of the run's own designs.
func (h *health) observe(r *schema.Result) {
	if r.Worker == "" {
		return // lost: no slot ran it to the end
	}
	k := SlotKey{r.Worker, r.Slot}
	s := h.slots[k]
	if s == nil {
		s = &SlotHealth{SlotKey: k}
		h.slots[k] = s
	}
	s.Host, s.GPU = r.Host, r.GPU
	switch r.Status {
	case schema.StatusOK, schema.StatusInfeasible:
		h.succeeded(s)
	case schema.StatusError, schema.StatusTimeout:
		h.failed(s, r)
	}
}

func (h *health) succeeded(s *SlotHealth) {
	s.Failures, s.LastError = 0, ""
	delete(h.suspects, s.SlotKey)
	if s.Quarantined {
		h.setQuarantined(s, false)
		h.emit(SlotRecovered, s)
	}
	switch {
	case h.okSlots == 0:
		h.okSlot, h.okSlots = s.SlotKey, 1
	case h.okSlots == 1 && h.okSlot != s.SlotKey:
		h.okSlots = 2
	}
	// Slots that failed while nothing else had succeeded are suspects;
	// this success elsewhere convicts them, in a stable order.
	keys := make([]SlotKey, 0, len(h.suspects))
	for k := range h.suspects {
		if h.okElsewhere(k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareSlots)
	for _, k := range keys {
		delete(h.suspects, k)
		h.quarantine(h.slots[k])
	}
}

func (h *health) failed(s *SlotHealth, r *schema.Result) {
	s.Failures++
	s.LastError, s.LastFailure = r.Error, r.Stop
	switch {
	case s.Quarantined:
		h.emit(SlotStillFailing, s)
	case h.after < 1 || s.Failures < h.after:
	case h.okElsewhere(s.SlotKey):
		delete(h.suspects, s.SlotKey)
		h.quarantine(s)
	case !h.suspects[s.SlotKey]:
		h.suspects[s.SlotKey] = true
		h.emit(SlotSuspect, s)
	}
}

// okElsewhere reports whether a slot other than k has had an ok or
// infeasible result.
func (h *health) okElsewhere(k SlotKey) bool {
	return h.okSlots > 1 || (h.okSlots == 1 && h.okSlot != k)
}

func (h *health) quarantine(s *SlotHealth) {
	h.setQuarantined(s, true)
	h.emit(SlotQuarantined, s)
}

func (h *health) setQuarantined(s *SlotHealth, q bool) {
	s.Quarantined = q
	list := slices.DeleteFunc(h.byWorker[s.Worker], func(i int) bool { return i == s.Slot })
	if q {
		list = append(list, s.Slot)
		slices.Sort(list)
	}
	if len(list) == 0 {
		delete(h.byWorker, s.Worker)
		return
	}
	h.byWorker[s.Worker] = list
}

func (h *health) emit(kind SlotEventKind, s *SlotHealth) {
	h.events = append(h.events, SlotEvent{Kind: kind, Slot: *s})
}

func compareSlots(a, b SlotKey) int {
	return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Slot, b.Slot))
}

// SlotEvents are the changes in slot health that the last result judged
// brought; valid until the next Judge.
func (t *Tally) SlotEvents() []SlotEvent { return t.health.events }

// QuarantinedSlots are worker's quarantined slots, sorted; the caller
// must not change them.
func (t *Tally) QuarantinedSlots(worker string) []int { return t.health.byWorker[worker] }

// Slot is what the results say of worker's slot; false if it has none.
func (t *Tally) Slot(worker string, slot int) (SlotHealth, bool) {
	s, ok := t.health.slots[SlotKey{worker, slot}]
	if !ok {
		return SlotHealth{}, false
	}
	return *s, true
}

// Quarantined lists the quarantined slots by worker and slot.
func (t *Tally) Quarantined() []SlotHealth {
	var out []SlotHealth
	for w, slots := range t.health.byWorker {
		for _, i := range slots {
			out = append(out, *t.health.slots[SlotKey{w, i}])
		}
	}
	slices.SortFunc(out, func(a, b SlotHealth) int { return compareSlots(a.SlotKey, b.SlotKey) })
	return out
}
