package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// printSummary writes the run's outcome for a person, and with jsonOut the
// figures as one JSON object on the last line.
func printSummary(w io.Writer, s *runstate.Summary, jsonOut bool) error {
	stopped := ""
	if s.EarlyStop != nil || s.Stopped > 0 {
		// Only where designs can be stopped: the line of a run without
		// early stopping is what scripts and the README quote.
		stopped = fmt.Sprintf(", %d stopped", s.Stopped)
	}
	// The rate is over the time slots were live: say so where the run
	// waited for its first slot, or wall time × rate would not add up.
	waited := ""
	if s.WaitFirstSlotS >= 1 {
		waited = fmt.Sprintf(" over the %.1f s after the first slot joined", s.WallS-s.WaitFirstSlotS)
	}
	fmt.Fprintf(w, "run %s: %d evaluations (%d ok, %d infeasible, %d error, %d timeout, %d lost%s) in %.1f s, %.1f/s%s\n",
		s.Run, s.Evaluations, s.OK, s.Infeasible, s.Error, s.Timeout, s.Lost, stopped, s.WallS, s.EvalsPerS, waited)
	fmt.Fprintf(w, "slots: %d live, %d used; steady-state utilization %.3f; gap between designs on a slot p50 %.2f ms, p99 %.2f ms\n",
		s.Slots, s.SlotsUsed, s.UtilSteady, s.GapP50Ms, s.GapP99Ms)
	if s.StopReason != "" && s.StopReason != schema.StopBudget {
		// Only for a run that ended before its budget: the line of a run
		// that spent it is what scripts and the README quote.
		fmt.Fprintf(w, "ended before its budget: stop reason %s\n", s.StopReason)
	}
	if s.BestRandomFitness != nil {
		fmt.Fprintf(w, "best of the random initial designs: %.4f\n", *s.BestRandomFitness)
	}
	if s.BestFitness == nil {
		fmt.Fprintln(w, "no design evaluated ok")
	} else {
		g, _ := json.Marshal(s.Best)
		fmt.Fprintf(w, "best: %.4f  design %s\n  %s\n", *s.BestFitness, s.BestID, g)
	}
	if c := s.Checkpoints; c != nil && (c.Stored > 0 || c.Deleted > 0 || c.Mutants > 0) {
		line := fmt.Sprintf("checkpoints: %d stored, %d deleted", c.Stored, c.Deleted)
		if c.Mutants > 0 {
			line += fmt.Sprintf("; %d of %d mutants inherited their parent's weights", c.Inherited, c.Mutants)
		}
		fmt.Fprintln(w, line)
	}
	if p := s.Pareto; p != nil {
		line := fmt.Sprintf("front: %d designs (objectives %s", len(p.Front), strings.Join(p.Objectives, ","))
		if len(p.Constraints) > 0 {
			line += "; subject to " + strings.Join(p.Constraints, ", ")
		}
		line += ")"
		if p.Hypervolume != nil {
			line += fmt.Sprintf("; hypervolume %.6g from %v", *p.Hypervolume, p.HVRef)
			if p.HypervolumeRatio != nil {
				line += fmt.Sprintf(", %.4f of the true front's", *p.HypervolumeRatio)
			}
		}
		fmt.Fprintln(w, line)
		if p.Unmeasured > 0 {
			fmt.Fprintf(w, "%d ok results lacked an objective and are not in the pool\n", p.Unmeasured)
		}
	}
	if len(s.Warnings) > 0 {
		fmt.Fprintf(w, "warnings:\n%s", runstate.WarningsText(s.Warnings))
	}
	if !jsonOut {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
