package runstate

import "github.com/evoq/evoq/schema"

// State is a run's whole state as a fold of its two streams: results
// (the counting rule, the pool and front, the statistics) and reports
// (the early-stopping rule's rungs). The two folds read nothing of each
// other, so any interleaving of the streams' events that keeps each
// stream's order gives the same state; that is what lets the controller
// read them beside each other, and a restart or `evoq replay` read them
// one after the other.
type State struct {
	Fold  *Fold
	Rungs *Rungs // nil for a run without an early-stopping rule
}

// NewState returns the empty state of run as its record describes it.
// init, pool and replace are the fold's parameters (the record's, or, for
// a run recorded before they were kept, given).
func NewState(rec *schema.Run, init, pool int, replace Replace) (*State, error) {
	o, err := ObjectivesOf(rec)
	if err != nil {
		return nil, err
	}
	s := &State{Fold: NewFoldFor(NewTally(rec.Run, rec.Budget, RulesOf(rec)), init, pool, replace, o, rec.HVRef)}
	s.Fold.SetStopRule(StopRuleOf(rec))
	s.Fold.SetSelect(rec.EarlyStop)
	if rec.EarlyStop != nil && rec.EarlyStop.Rule != RuleNone {
		s.Rungs = NewRungs(rec.Run, rec.EarlyStop)
	}
	return s, nil
}

// ApplyResult folds the next stored result, as schema.DecodeResult
// returned it.
func (s *State) ApplyResult(r *schema.Result, err error) Verdict { return s.Fold.Apply(r, err) }

// ApplyReport folds the next stored report; a run without a rule ignores
// it.
func (s *State) ApplyReport(r *schema.Report) {
	if s.Rungs != nil {
		s.Rungs.Apply(r)
	}
}

// Digests are the state's digests: the pool's, the front's (for a ranked
// pool) and the rungs' ("" without a rule).
type Digests struct {
	Pool, Front, Rungs string
}

// Digests returns the state's digests.
func (s *State) Digests() Digests {
	d := Digests{Pool: s.Fold.Pool().Digest()}
	if s.Fold.Pool().Ranked() {
		d.Front = s.Fold.Pool().FrontDigest()
	}
	if s.Rungs != nil {
		d.Rungs = s.Rungs.Digest()
	}
	return d
}
