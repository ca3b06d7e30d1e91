package controller

import (
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
// it reads a result; tools take it from the record. A budget only grows,
// and only a restart raises it. That leaves one edge: a foreign result
// whose seq lies between the old budget and the raised one, stored before
// the raise, was Foreign to the controller that ran then, and counts after
// the restart that raised the budget, for the restarted controller and
// every tool alike, since they all read the raised budget. A pool digest
// logged before the raise can then differ from a replay of the same
// results after it.
type Tally struct {
	run    string
	budget uint64
	done   doneSet
	n      int
}

// NewTally returns an empty tally for run with budget designs.
func NewTally(run string, budget int) *Tally {
	return &Tally{run: run, budget: uint64(max(budget, 0)), done: doneSet{above: map[uint64]struct{}{}}}
}

// Judge returns the verdict on r, the next stored result in stream order,
// and records r's seq when r counts. err is the error schema.DecodeResult
// returned with r.
func (t *Tally) Judge(r *schema.Result, err error) Verdict {
	switch {
	case err != nil || r == nil:
		return Malformed
	case !t.owns(r):
		return Foreign
	case !t.done.add(r.Design.Seq):
		return Duplicate
	}
	t.n++
	return Counted
}

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
