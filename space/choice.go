package space

import (
	"fmt"
	"math/rand/v2"
)

// choiceParam is one of a fixed list of distinct scalars, each a string,
// int64, float64 or bool.
type choiceParam struct {
	values []any
	index  map[any]int // choiceKey of each value -> its position
}

// add appends v, reporting false if an equal value is already present.
func (p *choiceParam) add(v any) bool {
	if p.find(v) >= 0 {
		return false
	}
	if p.index == nil {
		p.index = make(map[any]int)
	}
	k, _ := choiceKey(v)
	p.index[k] = len(p.values)
	p.values = append(p.values, v)
	return true
}

func (p *choiceParam) random(r *rand.Rand) any {
	return p.values[r.IntN(len(p.values))]
}

// mutate picks a different value uniformly.
func (p *choiceParam) mutate(v any, r *rand.Rand) any {
	i := p.find(v)
	j := r.IntN(len(p.values) - 1)
	if j >= i {
		j++
	}
	return p.values[j]
}

func (p *choiceParam) validate(v any, path string) (any, error) {
	if i := p.find(v); i >= 0 {
		return p.values[i], nil
	}
	switch v.(type) {
	case string, bool:
	default:
		if _, ok := number(v); !ok {
			return nil, genomeErr(path, "want one of %v, got %T", p.values, v)
		}
	}
	return nil, genomeErr(path, "%v not one of %v", v, p.values)
}

// find returns the index of the value equal to v, or -1. Numbers compare by
// value across Go types, so JSON's 8.0 matches a choice of 8.
func (p *choiceParam) find(v any) int {
	if k, ok := choiceKey(v); ok {
		if i, ok := p.index[k]; ok {
			return i
		}
	}
	if f, ok := v.(float32); ok {
		return p.find32(f)
	}
	return -1
}

// find32 matches a float32 against the float values rounded to float32, as
// float32(0.1) is not float64 0.1.
func (p *choiceParam) find32(f float32) int {
	for i, c := range p.values {
		if c, ok := c.(float64); ok && float32(c) == f {
			return i
		}
	}
	return -1
}

// choiceKey normalizes a scalar for lookup: strings and bools as they are,
// numbers as int64 when integral and in range, else as float64.
func choiceKey(v any) (any, bool) {
	switch v.(type) {
	case string, bool:
		return v, true
	}
	n, ok := number(v)
	switch {
	case !ok:
		return nil, false
	case n.exact:
		return n.i, true
	}
	return n.f, true
}

func (p *choiceParam) mutable() bool { return len(p.values) > 1 }

func (p *choiceParam) describe() string {
	return fmt.Sprintf("choice(%d)", len(p.values))
}

func (p *choiceParam) size() int { return 1 }
