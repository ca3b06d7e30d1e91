package controller

import (
	"fmt"
	"math"
	"strings"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// Objectives are what a run optimizes and the constraints on it (see
// pareto.Objectives).
type Objectives = runstate.Objectives

// validate checks o and a reference point given for it.
func validateObjectives(o Objectives, ref []float64) error {
	seen := map[string]bool{}
	for _, x := range o.Objs {
		if x.Name == "" || seen[x.Name] {
			return &schema.FieldError{Err: ErrConfig, Field: "Objectives", Value: x.String(), Reason: "each objective needs a name, once"}
		}
		seen[x.Name] = true
	}
	if len(ref) > 0 && len(ref) != len(o.List()) {
		return &schema.FieldError{Err: ErrConfig, Field: "HVRef", Value: ref,
			Reason:  fmt.Sprintf("%d values for %d objectives (%s): give one per objective, in its own units", len(ref), len(o.List()), strings.Join(o.Names(), ", ")),
			Related: []string{"Objectives"}}
	}
	for _, v := range ref {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return &schema.FieldError{Err: ErrConfig, Field: "HVRef", Value: ref, Reason: "every value must be a finite number"}
		}
	}
	return nil
}
