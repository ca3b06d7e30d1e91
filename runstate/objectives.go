package runstate

import (
	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/schema"
)

// Objectives are what a run optimizes and the constraints on it (see
// pareto.Objectives).
type Objectives = pareto.Objectives

// ObjectivesOf reads a run's recorded objectives.
func ObjectivesOf(rec *schema.Run) (Objectives, error) { return pareto.ObjectivesOf(rec) }
