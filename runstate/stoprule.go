package runstate

import (
	"fmt"
	"strconv"

	"github.com/evoq/evoq/schema"
)

// StopRule ends a run before its budget, from its results alone: when
// the best fitness reaches Target, or when Plateau counted results in a
// row did not improve the best. Both read only the results in stream
// order, so the controller, a restarted one and `evoq replay` stop at
// the same result.
type StopRule struct {
	// Target is the fitness that ends the run once the best reaches it;
	// nil: none.
	Target *float64
	// Plateau is the number of counted results in a row without a better
	// best that ends the run; 0: none. Every counted result is one of
	// them, whatever its status: a run whose designs all fail does not
	// improve either.
	Plateau int
}

// StopRuleOf is the stop rule the run recorded in rec; nil rec: none.
func StopRuleOf(rec *schema.Run) StopRule {
	if rec == nil {
		return StopRule{}
	}
	return StopRule{Target: rec.Target, Plateau: rec.Plateau}
}

// On reports whether the rule can end a run.
func (r StopRule) On() bool { return r.Target != nil || r.Plateau > 0 }

// TargetText and PlateauText are the rule's settings as logs and status
// print them.
func TargetText(t *float64) string {
	if t == nil {
		return "none"
	}
	return strconv.FormatFloat(*t, 'g', -1, 64)
}

func PlateauText(n int) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d results", n)
}

// stopTrack is the rule's state in a fold.
type stopTrack struct {
	rule      StopRule
	sinceBest int               // counted results since the best last improved
	reason    schema.StopReason // the first reason met; "" while none is
	at        int               // the counted results when it was met
}

// observe takes one counted result; improved says whether it made a
// better best. The first reason met stays: the designs in flight then
// finish, and what they bring does not change why the run ended.
func (s *stopTrack) observe(improved bool, best *Member, counted int) {
	if improved {
		s.sinceBest = 0
	} else {
		s.sinceBest++
	}
	if s.reason != "" {
		return
	}
	switch {
	case s.rule.Target != nil && best != nil && best.Fitness >= *s.rule.Target:
		s.reason = schema.StopTarget
	case s.rule.Plateau > 0 && s.sinceBest >= s.rule.Plateau:
		s.reason = schema.StopPlateau
	default:
		return
	}
	s.at = counted
}

// StopRuleText is the rule as tools print it.
func StopRuleText(r StopRule) string {
	return "target " + TargetText(r.Target) + ", plateau " + PlateauText(r.Plateau)
}
