package runstate

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/evoq/evoq/schema"
)

// A run whose evaluator is missing or broken on every worker turns its
// whole budget into error results within seconds, and would end as if it
// had succeeded. The fail-fast check stops it instead: when the first
// attempts of the run all end in error or timeout, none ok or infeasible,
// the controller puts phase failed and stops with ErrFailed, quoting the
// most common error text.
//
// The check is a function of the results stream in stream order and of the
// run's record (Config.FailFast, the window's start and the budget), like
// the counting rule, up to a held verdict; the number of attempts judged is
// fixed when the run starts (at least the slots the run expects, see
// Config.FailFast) and recorded. The controller acts on a held verdict
// only once every live slot has failed in the window too (see Observe),
// which no stream holds: so the verdict it acts on is recorded with the
// run (Run.Failure), and `evoq replay` reads it from there.
//
// A controller started on a failed run continues it: the window moves
// past every result stored so far, so the old failures are not judged
// again, and the budget grows by the designs the failed start turned into
// errors (see MakeUp). Both are recorded with the run.

// Fail-fast settings of Config.FailFast.
const (
	// FailFastDefault is the fewest first attempts judged by default;
	// more when the run expects more slots.
	FailFastDefault = 10
	// FailFastOff, as Config.FailFast, turns the check off.
	FailFastOff = -1
)

// FailureErrorMax is the most characters of an error text a failure
// quotes: a log line's worth, keeping both ends of a longer one.
const FailureErrorMax = 300

// ErrFailed means the controller stopped the run because its first
// attempts all failed; the error is a *FailedError.
var ErrFailed = errors.New("the run failed: none of its first evaluations worked")

// FailedError says why a run failed fast.
type FailedError struct {
	Run     string
	Failure schema.Failure
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("run %s failed: its first %d evaluations all ended in error or timeout, none ok or infeasible; "+
		"%d of them: %q. Check the workers' evaluator and their environment, then start the controller on the run again to continue it",
		e.Run, e.Failure.Attempts, e.Failure.Count, e.Failure.Error)
}

// Unwrap makes a FailedError an ErrFailed.
func (e *FailedError) Unwrap() error { return ErrFailed }

// FailFast is the fail-fast check over one window of a run's attempts.
// An attempt is a stored result of one of the run's designs, counted or a
// duplicate. Malformed and foreign results are no attempt of the run's:
// they are skipped. A lost result (the controller records it when a
// design's deliveries ran out) fails like an error: an evaluator that
// kills its worker, or hangs until its deliveries run out, is as broken
// as one that exits with an error.
type FailFast struct {
	n     int    // attempts judged; 0: off
	from  uint64 // attempts stored at stream sequences above it count
	seen  int    // failed attempts so far
	texts map[string]int
	order []string // error texts as first seen: a tie goes to the earliest
	over  bool     // an attempt worked: the run passed
	held  *schema.Failure
	// slots are the (worker, slot) pairs a failed attempt came from,
	// hosts their hosts.
	slots map[SlotKey]bool
	hosts map[string]bool
}

// NewFailFast returns the check of the first n attempts stored at stream
// sequences above from; n <= 0 turns it off.
func NewFailFast(n int, from uint64) *FailFast {
	return &FailFast{n: max(n, 0), from: from, texts: map[string]int{}, over: n <= 0, slots: map[SlotKey]bool{},
		hosts: map[string]bool{}}
}

// Observe judges the next stored result in stream order: seq is its
// stream sequence, v the counting rule's verdict on it, spent whether the
// budget is spent once it is counted. It returns the failure when this
// result decides that the run failed: the n-th failed attempt in a row
// from the window's start, or the end of the budget with no attempt but
// failed ones; nil otherwise, and always nil once decided either way.
//
// The stream alone cannot tell a broken evaluator everywhere from one
// broken node whose slot fails at once while the healthy slots are still
// training their first designs: so a verdict is held (Held) until its
// controller sees that every live slot has failed too (FailedOn), or the
// budget is spent; an attempt that works before then passes the run
// (Passed), and the verdict is dropped. The verdict the controller acts on
// is recorded with the run, so replay reads it from the record.
func (f *FailFast) Observe(seq uint64, r *schema.Result, v Verdict, spent bool) *schema.Failure {
	if f.over || (f.from > 0 && seq <= f.from) || v == Malformed || v == Foreign {
		return nil
	}
	switch r.Status {
	case schema.StatusOK, schema.StatusInfeasible:
		f.over, f.held = true, nil
		return nil
	case schema.StatusError, schema.StatusTimeout, schema.StatusLost:
		if f.held != nil {
			// The verdict is built: only which slots and hosts failed
			// still matters (FailedOn, Hosts), however long one broken
			// node keeps failing.
			f.where(r)
			return nil
		}
		f.add(r)
	}
	if f.held != nil || f.seen == 0 || (f.seen < f.n && !spent) {
		return nil
	}
	f.held = f.failure(seq)
	return f.held
}

// Held is the verdict reached and not yet passed: the first attempts all
// failed; nil otherwise.
func (f *FailFast) Held() *schema.Failure { return f.held }

// Passed reports whether an attempt worked within the window.
func (f *FailFast) Passed() bool { return f.over }

// FailedOn reports whether a failed attempt in the window came from slot
// of worker.
func (f *FailFast) FailedOn(worker string, slot int) bool { return f.slots[SlotKey{worker, slot}] }

// Hosts is the number of hosts failed attempts in the window came from.
func (f *FailFast) Hosts() int { return len(f.hosts) }

// where notes the slot and host of a failed attempt; a lost result, which
// the controller records, names neither.
func (f *FailFast) where(r *schema.Result) {
	if r.Worker != "" {
		f.slots[SlotKey{r.Worker, r.Slot}] = true
	}
	if r.Host != "" {
		f.hosts[r.Host] = true
	}
}

func (f *FailFast) add(r *schema.Result) {
	f.seen++
	f.where(r)
	text := ErrorGist(r.Error)
	if text == "" {
		text = "no error text (status " + string(r.Status) + ")"
	}
	if f.texts[text] == 0 {
		f.order = append(f.order, text)
	}
	f.texts[text]++
}

func (f *FailFast) failure(seq uint64) *schema.Failure {
	fl := &schema.Failure{Attempts: f.seen, StreamSeq: seq}
	for _, t := range f.order {
		if f.texts[t] > fl.Count {
			fl.Error, fl.Count = t, f.texts[t]
		}
	}
	return fl
}

// Pending is the state of a check: the failed attempts so far and how
// many it judges. A check that passed, or is off, reports done.
func (f *FailFast) Pending() (failed, of int, done bool) { return f.seen, f.n, f.over }

// ErrorGist is the part of an evaluator's error text that says what went
// wrong, on one line of at most FailureErrorMax characters. A text of
// several lines (a stderr tail with a Python traceback) keeps its first
// line, which says how the evaluator ended, and its last, where a program
// says why.
func ErrorGist(text string) string {
	var lines []string
	for l := range strings.Lines(text) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	switch len(lines) {
	case 0:
		return ""
	case 1:
		text = lines[0]
	default:
		text = lines[0] + " … " + lines[len(lines)-1]
	}
	return clipMiddle(text, FailureErrorMax)
}

// clipMiddle shortens s to at most n characters by cutting out its
// middle: the start of an error says what failed, its end why.
func clipMiddle(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	keep := (n - 3) / 2
	return string(r[:keep]) + " … " + string(r[len(r)-(n-3-keep):])
}

// MakeUp counts the designs a failed start of a run spent on evaluations
// that did not work: those whose counted result is error or timeout and
// was stored after the failed check's window began (From) and up to the
// run's last result when a controller continues it (To). The continuing
// controller adds that many designs to the budget, so that the budget
// given is spent on evaluations that work, while every design still
// counts once, by its first result (see Tally).
type MakeUp struct {
	From, To uint64
	n        int
}

// Add takes the next stored result in stream order, with the counting
// rule's verdict on it.
func (m *MakeUp) Add(seq uint64, r *schema.Result, v Verdict) {
	if v == Counted && seq > m.From && seq <= m.To && (r.Status == schema.StatusError || r.Status == schema.StatusTimeout) {
		m.n++
	}
}

// Designs is the number of designs to make up for.
func (m *MakeUp) Designs() int { return m.n }
