package pareto

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrObjective means a result lacks an objective or a constrained value,
// or holds one that is not a finite number.
var ErrObjective = errors.New("objective missing")

// Objective is one value a search optimizes: "fitness", or a key of the
// result's metrics, with its direction.
type Objective struct {
	Name     string
	Maximize bool
}

// Constraint bounds one value ("fitness" or a metric): Op is one of <=,
// >=, < and >.
type Constraint struct {
	Name  string
	Op    string
	Bound float64
}

// ParseObjectives reads "fitness:max,params:min": names with a direction,
// max or min, each name once.
func ParseObjectives(s string) ([]Objective, error) {
	var out []Objective
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, dir, ok := strings.Cut(strings.TrimSpace(part), ":")
		name = strings.TrimSpace(name)
		switch {
		case !ok || name == "":
			return nil, fmt.Errorf("objective %q: want name:max or name:min", part)
		case seen[name]:
			return nil, fmt.Errorf("objective %q given twice", name)
		}
		seen[name] = true
		switch strings.TrimSpace(dir) {
		case "max":
			out = append(out, Objective{Name: name, Maximize: true})
		case "min":
			out = append(out, Objective{Name: name})
		default:
			return nil, fmt.Errorf("objective %q: direction %q, want max or min", name, dir)
		}
	}
	return out, nil
}

// String is the objective as ParseObjectives reads it.
func (o Objective) String() string {
	if o.Maximize {
		return o.Name + ":max"
	}
	return o.Name + ":min"
}

// ParseConstraint reads "params<=60000".
func ParseConstraint(s string) (Constraint, error) {
	for _, op := range []string{"<=", ">=", "<", ">"} { // two-character operators first
		if name, bound, ok := strings.Cut(s, op); ok {
			name = strings.TrimSpace(name)
			b, err := strconv.ParseFloat(strings.TrimSpace(bound), 64)
			if name == "" || err != nil || math.IsNaN(b) || math.IsInf(b, 0) {
				return Constraint{}, fmt.Errorf("constraint %q: want name<=number (or >=, <, >)", s)
			}
			return Constraint{Name: name, Op: op, Bound: b}, nil
		}
	}
	return Constraint{}, fmt.Errorf("constraint %q: no <=, >=, < or >", s)
}

// String is the constraint as ParseConstraint reads it.
func (c Constraint) String() string {
	return c.Name + c.Op + strconv.FormatFloat(c.Bound, 'g', -1, 64)
}

// Violation is how far v misses the constraint: 0 when it meets it. A
// strict bound missed by equality counts as the smallest violation there
// is, so that it still ranks after every feasible design.
func (c Constraint) Violation(v float64) float64 {
	var miss float64
	switch c.Op {
	case "<=", "<":
		miss = v - c.Bound
	default:
		miss = c.Bound - v
	}
	switch {
	case miss > 0:
		return miss
	case miss == 0 && (c.Op == "<" || c.Op == ">"):
		return math.SmallestNonzeroFloat64
	}
	return 0
}

// Measure is a result's point: its objectives, oriented to minimize, and
// its total constraint violation, read from fitness and metrics. A value
// missing or not a finite number is an error wrapping ErrObjective that
// names it.
func Measure(objs []Objective, cons []Constraint, fitness float64, metrics map[string]any) (Point, error) {
	value := func(name string) (float64, error) {
		if name == "fitness" {
			return fitness, nil
		}
		v, ok := metrics[name]
		if !ok {
			return 0, fmt.Errorf("%w: the result has no metric %q", ErrObjective, name)
		}
		f, ok := number(v)
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("%w: metric %q is %v, not a finite number", ErrObjective, name, v)
		}
		return f, nil
	}
	p := Point{Obj: make([]float64, len(objs))}
	for i, o := range objs {
		v, err := value(o.Name)
		if err != nil {
			return Point{}, err
		}
		if o.Maximize {
			v = -v
		}
		p.Obj[i] = v
	}
	for _, c := range cons {
		v, err := value(c.Name)
		if err != nil {
			return Point{}, err
		}
		p.Violation += c.Violation(v)
	}
	return p, nil
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case int32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case uint32:
		return float64(x), true
	}
	return 0, false
}
