package pareto

import (
	"fmt"
	"slices"
	"strings"

	"github.com/evoq/evoq/schema"
)

// Objectives are what a run optimizes and the constraints on it. The
// zero value, like fitness:max alone with no constraint, is the
// single-objective search: the pool keeps the fittest by the result's
// fitness, as runs did before objectives existed. Anything else ranks
// the pool by constraint domination (pareto).
type Objectives struct {
	Objs []Objective
	Cons []Constraint
}

// fitnessMax is the default objective.
var fitnessMax = Objective{Name: "fitness", Maximize: true}

// Pareto reports whether o ranks by domination: several objectives, a
// constraint, or one objective other than fitness:max.
func (o Objectives) Pareto() bool {
	return len(o.Cons) > 0 || len(o.Objs) > 1 || len(o.Objs) == 1 && o.Objs[0] != fitnessMax
}

// List is the objectives, fitness:max when none is set.
func (o Objectives) List() []Objective {
	if len(o.Objs) == 0 {
		return []Objective{fitnessMax}
	}
	return o.Objs
}

// Names are the objectives' names, in order.
func (o Objectives) Names() []string {
	var out []string
	for _, x := range o.List() {
		out = append(out, x.Name)
	}
	return out
}

// Record is o as the run's record holds it: nil for the default.
func (o Objectives) Record() (objs, cons []string) {
	if !o.Pareto() {
		return nil, nil
	}
	for _, x := range o.Objs {
		objs = append(objs, x.String())
	}
	for _, c := range o.Cons {
		cons = append(cons, c.String())
	}
	return objs, cons
}

// String says o in a few words, for the log.
func (o Objectives) String() string {
	objs, cons := o.Record()
	if objs == nil {
		return "fitness:max"
	}
	s := strings.Join(objs, ",")
	if len(cons) > 0 {
		s += " subject to " + strings.Join(cons, ", ")
	}
	return s
}

// ObjectivesOf reads a run's recorded objectives.
func ObjectivesOf(rec *schema.Run) (Objectives, error) {
	var o Objectives
	if rec == nil {
		return o, nil
	}
	if len(rec.Objectives) > 0 {
		objs, err := ParseObjectives(strings.Join(rec.Objectives, ","))
		if err != nil {
			return o, fmt.Errorf("run %s: its objectives: %w", rec.Run, err)
		}
		o.Objs = objs
	}
	for _, s := range rec.Constraints {
		c, err := ParseConstraint(s)
		if err != nil {
			return o, fmt.Errorf("run %s: its constraints: %w", rec.Run, err)
		}
		o.Cons = append(o.Cons, c)
	}
	return o, nil
}

// Measure is a result's point under o: its objectives, oriented to
// minimize, and its total violation. An error names the value missing.
func (o Objectives) Measure(fitness float64, metrics map[string]any) (Point, error) {
	return Measure(o.List(), o.Cons, fitness, metrics)
}

// Values are a point's objectives in their own units (undoing the
// orientation), in the order of o.
func (o Objectives) Values(p Point) []float64 {
	v := slices.Clone(p.Obj)
	for i, x := range o.List() {
		if x.Maximize && i < len(v) {
			v[i] = -v[i]
		}
	}
	return v
}

// Oriented is a reference point given in the objectives' own units,
// oriented to minimize.
func (o Objectives) Oriented(ref []float64) []float64 {
	v := slices.Clone(ref)
	for i, x := range o.List() {
		if x.Maximize && i < len(v) {
			v[i] = -v[i]
		}
	}
	return v
}
