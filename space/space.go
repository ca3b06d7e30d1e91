// Package space describes the search space of an evoq run and the genomes
// that live in it.
//
// A space is loaded from YAML: an optional name and an ordered mapping of
// params, each an int, float, choice or list (a variable-length list of items,
// each item a genome of a nested sub-space). A genome is a map[string]any with
// one canonical value per param: int64 for int, float64 for float, the
// decoded YAML scalar (string, int64, float64 or bool) for choice, and []any
// of map[string]any item genomes for list.
//
// Params are always visited in document order, so sampling and mutation are
// deterministic for a given random source.
package space

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// ErrInvalidSpace is wrapped by every error that reports a malformed search
// space, including YAML syntax errors.
var ErrInvalidSpace = errors.New("invalid search space")

// ErrInvalidGenome is wrapped by every error that reports a genome that does
// not fit its search space.
var ErrInvalidGenome = errors.New("invalid genome")

// maxAttempts bounds the tries Mutate makes to produce a genome that differs
// from its parent.
const maxAttempts = 20

// Space is a parsed search space. It is immutable and safe for concurrent use;
// the *rand.Rand passed to its methods is not.
type Space struct {
	name   string
	root   *group
	source []byte
}

// Parse reads a search space from YAML. Errors wrap ErrInvalidSpace and name
// the path of the offending param, e.g. "params.layers.item.units".
func Parse(data []byte) (*Space, error) {
	s, err := parseSpace(data)
	if err != nil {
		return nil, err
	}
	s.source = append([]byte(nil), data...)
	return s, nil
}

// Source is the YAML the space was parsed from, so that it can travel to
// workers and be parsed again there.
func (s *Space) Source() []byte { return s.source }

// Load reads and parses the search space in the YAML file at path. Errors
// mention the path.
func Load(path string) (*Space, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load space: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("load space %s: %w", path, err)
	}
	return s, nil
}

// Name returns the space's name, or "" when the YAML has none.
func (s *Space) Name() string {
	return s.name
}

// Random returns a genome drawn uniformly from the space: ints and floats
// uniformly (log-uniformly for log params) within their bounds, choices
// uniformly, and list lengths uniformly in [min, max].
func (s *Space) Random(r *rand.Rand) map[string]any {
	return s.root.random(r)
}

// Mutate returns a new genome that is g altered slightly; g itself is left
// untouched. One param is picked uniformly, in document order, among those
// with more than one possible value, and altered:
//   - int: a step of ±max(1, round(10% of the range)), in log space for a log
//     param, clamped to the bounds;
//   - float: a gaussian perturbation with a standard deviation of 10% of the
//     range (of the log range for a log param), clamped to the bounds;
//   - choice: a different value, uniformly;
//   - list: one of adding a random item at a random position, removing a
//     random item, or mutating one param of a random item, among those the
//     list's length and item allow.
//
// An attempt that leaves the genome unchanged (a float clamped back to the
// bound it sat on) is retried, up to 20 attempts; so the result differs from
// g except when the space holds a single genome, or every attempt failed
// (odds below one in a million), where a copy of g is returned. The result
// depends only on g and the state of r. Errors wrap ErrInvalidGenome when g
// does not validate.
func (s *Space) Mutate(g map[string]any, r *rand.Rand) (map[string]any, error) {
	parent, err := s.Validate(g)
	if err != nil {
		return nil, err
	}
	return s.MutateValid(parent, r), nil
}

// MutateValid is Mutate of a canonical genome (see CrossoverValid).
func (s *Space) MutateValid(parent map[string]any, r *rand.Rand) map[string]any {
	if !s.root.mutable() {
		return parent
	}
	for range maxAttempts {
		if child, changed := s.root.mutate(parent, r); changed {
			return child
		}
	}
	return parent
}

// Validate checks that g fits the space and returns a canonical deep copy of
// it. Numbers may have any Go numeric type (an integral float is accepted for
// an int param), lists may be []any or []map[string]any. Errors wrap
// ErrInvalidGenome and name the param path, e.g. "layers[2].units".
func (s *Space) Validate(g map[string]any) (map[string]any, error) {
	return s.root.validateMap(g, "")
}

// Columns returns the names of the top-level params in document order; a list
// param is a single column.
func (s *Space) Columns() []string {
	cols := make([]string, len(s.root.fields))
	for i, f := range s.root.fields {
		cols[i] = f.name
	}
	return cols
}

// String returns a one-line description of the space, e.g.
// "mlp: 2 params (lr float[0.001..0.5] log, batch choice(3))".
func (s *Space) String() string {
	var b strings.Builder
	if s.name != "" {
		b.WriteString(s.name + ": ")
	}
	n := len(s.root.fields)
	fmt.Fprintf(&b, "%d param%s (%s)", n, plural(n), s.root.describe())
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
