package space

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
)

// param is one kind of search dimension. Values handed to random-access
// methods (mutate) are canonical, as produced by random or validate.
type param interface {
	// random draws a canonical value.
	random(r *rand.Rand) any
	// mutate returns a new, slightly altered value; it must not modify v.
	mutate(v any, r *rand.Rand) any
	// validate returns the canonical copy of v or an error naming path.
	validate(v any, path string) (any, error)
	// mutable reports whether the param has more than one possible value.
	mutable() bool
	// describe returns a short description such as "int[2..64]".
	describe() string
	// size returns the most values a genome can hold for this param.
	size() int
}

// field is a named param.
type field struct {
	name string
	p    param
}

// group is an ordered set of params: the whole space or a list item.
type group struct {
	fields  []field
	index   map[string]int
	movable []int // indexes of mutable fields
}

func newGroup(fields []field) *group {
	g := &group{fields: fields, index: make(map[string]int, len(fields))}
	for i, f := range fields {
		g.index[f.name] = i
		if f.p.mutable() {
			g.movable = append(g.movable, i)
		}
	}
	return g
}

func (g *group) random(r *rand.Rand) map[string]any {
	m := make(map[string]any, len(g.fields))
	for _, f := range g.fields {
		m[f.name] = f.p.random(r)
	}
	return m
}

func (g *group) mutable() bool {
	return len(g.movable) > 0
}

// mutate alters one mutable param of the canonical genome m. It returns a new
// map (sharing the untouched values with m) and whether the value changed.
func (g *group) mutate(m map[string]any, r *rand.Rand) (map[string]any, bool) {
	f := g.fields[g.movable[r.IntN(len(g.movable))]]
	old := m[f.name]
	v := f.p.mutate(old, r)
	if reflect.DeepEqual(old, v) {
		return m, false
	}
	out := maps.Clone(m)
	out[f.name] = v
	return out, true
}

// validate checks an arbitrary value that should be a genome of g.
func (g *group) validate(v any, path string) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, genomeErr(path, "want a mapping, got %T", v)
	}
	return g.validateMap(m, path)
}

func (g *group) validateMap(m map[string]any, path string) (map[string]any, error) {
	out := make(map[string]any, len(g.fields))
	for _, f := range g.fields {
		v, ok := m[f.name]
		if !ok {
			return nil, genomeErr(join(path, f.name), "missing")
		}
		// The param's path is put together only for an error: a genome
		// is checked far more often than it is wrong.
		c, err := f.p.validate(v, "")
		if err != nil {
			return nil, within(err, join(path, f.name))
		}
		out[f.name] = c
	}
	if len(m) > len(out) {
		return nil, genomeErr(join(path, g.extra(m)), "not in the space")
	}
	return out, nil
}

// extra returns the first key of m, in sorted order, that is not a param.
func (g *group) extra(m map[string]any) string {
	var keys []string
	for k := range m {
		if _, ok := g.index[k]; !ok {
			keys = append(keys, k)
		}
	}
	return slices.Min(keys)
}

func (g *group) describe() string {
	parts := make([]string, len(g.fields))
	for i, f := range g.fields {
		parts[i] = f.name + " " + f.p.describe()
	}
	return strings.Join(parts, ", ")
}

func (g *group) size() int {
	n := 0
	for _, f := range g.fields {
		n = addSat(n, f.p.size())
	}
	return n
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func genomeErr(path, format string, args ...any) error {
	return &genomeError{path: path, msg: fmt.Sprintf(format, args...)}
}

// genomeError is a value of a genome that does not fit the space, at
// path.
type genomeError struct{ path, msg string }

func (e *genomeError) Error() string { return ErrInvalidGenome.Error() + ": " + e.path + ": " + e.msg }
func (e *genomeError) Unwrap() error { return ErrInvalidGenome }

// within puts prefix, the path of the value that holds the one err is
// about, before err's path.
func within(err error, prefix string) error {
	e, ok := err.(*genomeError)
	if !ok {
		return err
	}
	tail := e.path
	if tail != "" && tail[0] != '[' && prefix != "" {
		tail = "." + tail
	}
	return &genomeError{path: prefix + tail, msg: e.msg}
}
