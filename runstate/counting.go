package runstate

import (
	"slices"
	"strconv"

	"github.com/evoq/evoq/schema"
)

// Verdict is what the counting rule says of one stored result.
type Verdict uint8

// The verdicts of the counting rule (see Tally).
const (
	// Counted is a design's terminal result: the budget, the status
	// counts, the pool and every figure of the run are made of these.
	Counted Verdict = iota + 1
	// Duplicate is a further result for a design already counted, such
	// as a redelivered design evaluated a second time.
	Duplicate
	// Foreign is a valid result for a design the run does not own:
	// another run's design, or a sequence number outside 1..budget.
	Foreign
	// Malformed is a stored message that does not decode, or whose fields
	// do not validate.
	Malformed
	// Retried is a failed attempt (error or timeout) of one of the run's
	// designs that its Rules retry: not a terminal result, so the design
	// stays in flight and is published again for another attempt.
	Retried
)

// String is the verdict's name as the tools print it.
func (v Verdict) String() string {
	switch v {
	case Counted:
		return "counted"
	case Duplicate:
		return "duplicate"
	case Foreign:
		return "foreign"
	case Malformed:
		return "malformed"
	case Retried:
		return "retried"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Tally decides, in stream order, which stored results of a run count. It
// is the one place the rule is written: the controller's fold, live and
// when a restarted controller replays the stream, and every tool that
// reads a run's results (status, export, report, replay) judge each
// result with a Tally, so that they agree on the count, the status counts
// and the pool.
//
// A stored result counts if and only if
//   - it decodes and validates;
//   - its design is one of the run's: the design's run is the run and its
//     ID is schema.DesignID(run, seq);
//   - its seq lies in 1..budget;
//   - no earlier result in stream order counted for that seq.
//
// except that a failed attempt (status error or timeout) of a design
// whose fields all validate is Retried, not counted, while the design's
// failed attempts so far, this one included, number at most
// Rules.ErrorRetries: the node it ran on may be at fault, not the design,
// so the design is tried again elsewhere, and only a failure beyond that
// is its terminal result. An infeasible result is the evaluator's verdict
// on the design and is never retried; a lost one is the end of a design
// nobody finished. A failed attempt whose design does not validate (a
// worker rejected it as malformed) would fail anywhere, so it counts.
//
// Everything else is a Duplicate, Foreign or Malformed. Each input of the
// rule is in the stream or in the run's record; none is when a result
// arrived or how far the controller had published then, which a restart
// and the tools cannot know. So a result for a design the controller has
// not published yet (a worker credential suffices to store one, and design
// IDs are predictable) counts if its seq is within the budget: the
// controller then skips that seq instead of publishing it.
//
// The budget is the controller's Config.Budget, which the run's record
// (schema.Run.Budget) holds from the moment that controller starts, before
// it reads a result; tools take it from the record. A budget only grows:
// a restart raises it, and so does `evoq run extend` on a live run, which
// the controller records first and then applies to its tally (Raise),
// between two results. That leaves one edge: a foreign result whose seq
// lies between the old budget and the raised one, stored before the
// raise, was Foreign to the controller that ran then, and counts after the
// raise for a restarted controller and every tool alike, since they all
// read the raised budget. A pool digest logged before the raise can then
// differ from a replay of the same results after it. No worker publishes
// such a result: a design beyond the budget is never published.
//
// The same pass keeps the health of every slot (see Rules.QuarantineAfter
// and SlotEvents), which a restart and the tools rebuild the same way.
type Tally struct {
	run     string
	budget  uint64
	rules   Rules
	done    doneSet
	n       int
	failing map[uint64]*Failures // designs with retried failures and no counted result
	retried int
	health  *health
}

// Rules are the settings of a run that the tally's rules read, recorded
// with the run (see RulesOf).
type Rules struct {
	// ErrorRetries is how many failed attempts of a design are retried
	// before one counts; 0: none, the first result counts.
	ErrorRetries int
	// QuarantineAfter is the number of failed attempts in a row that
	// quarantine a slot, once another slot has a result; 0: never.
	QuarantineAfter int
}

// RulesOf are the rules the run recorded in rec counts by. A run
// recorded before a rule existed counts without it: its absent settings
// read as 0. A nil rec (the record does not decode) has no rules.
func RulesOf(rec *schema.Run) Rules {
	var r Rules
	if rec == nil {
		return r
	}
	if rec.ErrorRetries != nil {
		r.ErrorRetries = *rec.ErrorRetries
	}
	if rec.QuarantineAfter != nil {
		r.QuarantineAfter = *rec.QuarantineAfter
	}
	return r
}

// Failures are the failed attempts of one design that were retried.
type Failures struct {
	// N is their number; the design's next attempt is its retry N.
	N int
	// Workers and Hosts are where they ran, each named once.
	Workers, Hosts []string
}

// NewTally returns an empty tally for run with budget designs, counting
// by rules.
func NewTally(run string, budget int, rules Rules) *Tally {
	return &Tally{run: run, budget: uint64(max(budget, 0)), rules: rules,
		done: doneSet{above: map[uint64]struct{}{}}, failing: map[uint64]*Failures{},
		health: newHealth(rules.QuarantineAfter)}
}

// Judge returns the verdict on r, the next stored result in stream order,
// and records r's seq when r counts. err is the error schema.DecodeResult
// returned with r.
func (t *Tally) Judge(r *schema.Result, err error) Verdict {
	t.health.events = t.health.events[:0]
	switch {
	case err != nil || r == nil:
		return Malformed
	case !t.owns(r):
		return Foreign
	}
	t.health.observe(r)
	switch {
	case t.done.has(r.Design.Seq):
		return Duplicate
	case t.retry(r):
		t.retried++
		return Retried
	}
	t.done.add(r.Design.Seq)
	delete(t.failing, r.Design.Seq)
	t.n++
	return Counted
}

// retry reports whether r is a failed attempt its design may retry, and
// records it if so.
func (t *Tally) retry(r *schema.Result) bool {
	if r.Status != schema.StatusError && r.Status != schema.StatusTimeout {
		return false
	}
	f := t.failing[r.Design.Seq]
	n := 0
	if f != nil {
		n = f.N
	}
	if n >= t.rules.ErrorRetries || r.Design.Validate() != nil {
		return false
	}
	if f == nil {
		f = &Failures{}
		t.failing[r.Design.Seq] = f
	}
	f.N++
	f.Workers = appendNew(f.Workers, r.Worker)
	f.Hosts = appendNew(f.Hosts, r.Host)
	return true
}

func appendNew(list []string, s string) []string {
	if s == "" {
		return list
	}
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// Failing returns the retried failures of design seq while it has no
// counted result; nil otherwise. The caller must not change them.
func (t *Tally) Failing(seq uint64) *Failures { return t.failing[seq] }

// Outstanding lists, in seq order, the designs with retried failures and
// no counted result: each awaits its next retry.
func (t *Tally) Outstanding() []uint64 {
	out := make([]uint64, 0, len(t.failing))
	for seq := range t.failing {
		out = append(out, seq)
	}
	slices.Sort(out)
	return out
}

// Retries is the number of results judged Retried.
func (t *Tally) Retries() int { return t.retried }

// Rules are the rules the tally counts by.
func (t *Tally) Rules() Rules { return t.rules }

// owns reports whether r is a result for one of the run's designs. The
// decoder's validation already ties the result's run and design ID to its
// design; they are checked here again so that the rule does not rest on
// how the caller decoded r.
func (t *Tally) owns(r *schema.Result) bool {
	d := &r.Design
	return d.Seq >= 1 && d.Seq <= t.budget && r.Run == t.run && d.Run == t.run &&
		r.DesignID == d.ID && isDesignID(d.ID, t.run, d.Seq)
}

// isDesignID reports whether id is schema.DesignID(run, seq), without
// building that string for every result.
func isDesignID(id, run string, seq uint64) bool {
	var buf [20]byte
	n := len(run)
	return len(id) > n+1 && id[:n] == run && id[n] == '-' && id[n+1:] == string(strconv.AppendUint(buf[:0], seq, 10))
}

// Counted is the number of results counted: the designs with a terminal
// result.
func (t *Tally) Counted() int { return t.n }

// Has reports whether design seq has a counted result.
func (t *Tally) Has(seq uint64) bool { return t.done.has(seq) }

// CountedUpTo is the number of designs 1..seq with a counted result. It
// takes time in proportion to the counted designs above the lowest one
// without a result: call it once, not per result.
func (t *Tally) CountedUpTo(seq uint64) int {
	n := int(min(seq, t.done.low))
	for s := range t.done.above {
		if s <= seq {
			n++
		}
	}
	return n
}

// Run is the run whose results the tally judges.
func (t *Tally) Run() string { return t.run }

// Raise raises the tally's budget to budget, which the run's record holds
// already (see `evoq run extend`); a smaller one changes nothing, since a
// budget only grows. Results judged before keep their verdicts.
func (t *Tally) Raise(budget int) {
	if budget > 0 && uint64(budget) > t.budget {
		t.budget = uint64(budget)
	}
}

// Budget is the budget the tally bounds the run's designs with.
func (t *Tally) Budget() int { return int(t.budget) }

// doneSet remembers which design sequence numbers are done in memory
// proportional to the designs in flight, not to the history: every seq up
// to low is done, plus those in above.
type doneSet struct {
	low   uint64
	above map[uint64]struct{}
}

func (d *doneSet) has(seq uint64) bool {
	if seq <= d.low {
		return true
	}
	_, ok := d.above[seq]
	return ok
}

func (d *doneSet) add(seq uint64) bool {
	if d.has(seq) {
		return false
	}
	d.above[seq] = struct{}{}
	for {
		if _, ok := d.above[d.low+1]; !ok {
			return true
		}
		delete(d.above, d.low+1)
		d.low++
	}
}
