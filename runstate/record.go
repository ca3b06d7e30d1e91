package runstate

import (
	"fmt"
	"strings"
	"time"

	"github.com/evoq/evoq/schema"
)

// CheckpointText says the settings in a few words.
func CheckpointText(c *schema.Checkpoints) string {
	if c == nil {
		return "none"
	}
	where := c.Store
	if c.Store == schema.CheckpointDir {
		where = c.Dir
	}
	return fmt.Sprintf("%s max %d keep %s inherit %t", where, c.Max, c.Keep, c.Inherit)
}

// EarlyStopText says a rule and its rungs in a few words.
func EarlyStopText(e *schema.EarlyStop) string {
	if e == nil {
		return RuleNone
	}
	s := fmt.Sprintf("%s min_step=%d eta=%d", e.Rule, e.MinStep, e.Eta)
	if e.MaxStep > 0 {
		s += fmt.Sprintf(" max_step=%d rungs=%v", e.MaxStep, e.Rungs(e.MaxStep))
	}
	if e.MaxStepGene != "" {
		s += " max_step_gene=" + e.MaxStepGene
	}
	if e.Select == schema.SelectReached || e.Select == schema.SelectPromoted {
		s += " select=" + e.Select
	}
	if e.Brackets > 1 {
		s += fmt.Sprintf(" brackets=%d", e.Brackets)
	}
	return s
}

// MarginFor is the number of designs kept queued beyond slots live slots,
// so that a slot that frees finds a design waiting while the controller
// reacts: 5% of the slots, at least 2.
func MarginFor(slots int) int { return max(2, (slots+19)/20) }

// VariationText says a run's operators in a few words; nil is the one
// runs recorded before operators were kept used.
func VariationText(v *schema.Variation) string {
	if v == nil {
		v = &schema.Variation{}
	}
	m := "one parameter"
	if v.MutationRate > 0 {
		m = fmt.Sprintf("each parameter with p=%g", v.MutationRate)
	}
	s := fmt.Sprintf("crossover p=%g, mutation of %s", v.Crossover, m)
	if v.Novel {
		s += ", novel children"
	}
	if v.CostTie > 0 {
		s += fmt.Sprintf(", the cheaper of entrants within %g", v.CostTie)
	}
	return s
}

func FailFastText(n int) string {
	if n < 0 {
		return "off"
	}
	return fmt.Sprint(n)
}

func MarginText(m int) string {
	if m <= 0 {
		return "auto (5% of live slots, >= 2)"
	}
	return fmt.Sprint(m)
}

// RecordSettings are the search settings rec records, as name=value, in
// the form the continuation log line takes them.
func RecordSettings(rec *schema.Run) []string {
	out := []string{"space=" + rec.Space, fmt.Sprintf("budget=%d", rec.Budget), fmt.Sprintf("seed=%d", rec.Seed)}
	for _, f := range []struct {
		name string
		v    int
	}{{"init", rec.Init}, {"pool", rec.Pool}, {"tournament", rec.Tournament}, {"max_deliver", rec.MaxDeliver}} {
		if f.v != 0 {
			out = append(out, fmt.Sprintf("%s=%d", f.name, f.v))
		}
	}
	if rec.Replace != "" {
		out = append(out, "replace="+rec.Replace)
	}
	if rec.Margin != 0 {
		out = append(out, "margin="+strings.Fields(MarginText(rec.Margin))[0])
	}
	if rec.FailFast != 0 {
		out = append(out, "fail_fast="+FailFastText(rec.FailFast))
	}
	if rec.MadeUp > 0 {
		out = append(out, fmt.Sprintf("made_up=%d", rec.MadeUp))
	}
	out = append(out, "ack_wait="+rec.AckWait.String())
	r := RulesOf(rec)
	out = append(out, fmt.Sprintf("error_retries=%d", r.ErrorRetries), fmt.Sprintf("quarantine_after=%d", r.QuarantineAfter))
	if rec.SeedsFrom != "" {
		out = append(out, fmt.Sprintf("from_run=%s", rec.SeedsFrom))
	}
	if rec.Target != nil {
		out = append(out, "target="+TargetText(rec.Target))
	}
	if rec.Plateau > 0 {
		out = append(out, fmt.Sprintf("plateau=%d", rec.Plateau))
	}
	if rec.TimeBudget > 0 {
		out = append(out, "time_budget="+rec.TimeBudget.String(), "deadline="+rec.Deadline.UTC().Format(time.RFC3339))
	}
	if rec.EarlyStop != nil {
		out = append(out, "early_stop="+strings.ReplaceAll(EarlyStopText(rec.EarlyStop), " ", ","))
	}
	if c := rec.Checkpoints; c != nil {
		if c.Store == schema.CheckpointDir {
			out = append(out, "checkpoint_dir="+c.Dir)
		}
		out = append(out, fmt.Sprintf("max_checkpoint=%d", c.Max), "keep_checkpoints="+c.Keep, fmt.Sprintf("inherit=%t", c.Inherit))
	}
	if len(rec.Objectives) > 0 {
		out = append(out, "objectives="+strings.Join(rec.Objectives, ","))
	}
	for _, c := range rec.Constraints {
		out = append(out, "constraint="+c)
	}
	if rec.HVRef != nil {
		out = append(out, "hv_ref="+RefText(rec.HVRef))
	}
	if v := rec.Variation; v != nil {
		out = append(out, fmt.Sprintf("crossover=%g", v.Crossover), fmt.Sprintf("mutation_rate=%g", v.MutationRate))
		if v.Novel {
			out = append(out, "novel=true")
		}
		if v.CostTie > 0 {
			out = append(out, fmt.Sprintf("cost_tie=%g", v.CostTie))
		}
	}
	if rec.Evaluator != nil {
		out = append(out, "evaluator="+rec.Evaluator.String())
	}
	return out
}

// RefText is a reference point as a flag gives it.
func RefText(ref []float64) string {
	if ref == nil {
		return "derived"
	}
	parts := make([]string, len(ref))
	for i, v := range ref {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ",")
}

// RuleNone, as an early-stopping rule, says explicitly that the run stops
// no design early.
const RuleNone = "none"

// The fold's defaults: a run that does not choose evaluates InitDefault
// random designs, keeps a pool of PoolDefault and replaces its worst.
const (
	InitDefault    = 20
	PoolDefault    = 10
	ReplaceDefault = ReplaceWorst
)
