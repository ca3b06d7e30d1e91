package space

import (
	"slices"

	"go.yaml.in/yaml/v3"
)

// specKeys lists the keys each param type accepts.
var specKeys = map[string][]string{
	"int":    {"type", "min", "max", "log"},
	"float":  {"type", "min", "max", "log"},
	"choice": {"type", "values"},
	"list":   {"type", "min", "max", "item"},
}

// spec is the YAML mapping that defines one param.
type spec struct {
	path string
	node *yaml.Node
	typ  string
	keys map[string]*yaml.Node
}

// spec parses the definition of the param at path.
func (p *parser) spec(n *yaml.Node, path string, depth int) (param, error) {
	s, err := newSpec(n, path)
	if err != nil {
		return nil, err
	}
	switch s.typ {
	case "int":
		return s.intParam()
	case "float":
		return s.floatParam()
	case "choice":
		return s.choiceParam()
	}
	return p.listParam(s, depth)
}

func newSpec(n *yaml.Node, path string) (*spec, error) {
	pairs, err := mapping(n, path)
	if err != nil {
		return nil, err
	}
	s := &spec{path: path, node: resolve(n), keys: make(map[string]*yaml.Node, len(pairs))}
	for _, kv := range pairs {
		s.keys[kv.name] = kv.val
	}
	t, ok := s.keys["type"]
	if !ok {
		return nil, s.errf("missing type")
	}
	if s.typ, err = scalar(t, path); err != nil {
		return nil, err
	}
	allowed, ok := specKeys[s.typ]
	if !ok {
		return nil, spaceErr(path, t, "unknown type %q (want int, float, choice or list)", s.typ)
	}
	for _, kv := range pairs {
		if !slices.Contains(allowed, kv.name) {
			return nil, spaceErr(path, kv.key, "unknown key %q for type %s", kv.name, s.typ)
		}
	}
	return s, nil
}

func (s *spec) errf(format string, args ...any) error {
	return spaceErr(s.path, s.node, format, args...)
}

// get returns the scalar node under key, or an error if it is missing or not
// a scalar.
func (s *spec) get(key string) (*yaml.Node, error) {
	n, ok := s.keys[key]
	if !ok {
		return nil, s.errf("missing %s", key)
	}
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return nil, spaceErr(s.path, n, "%s must be a scalar, got %s", key, kindName(n))
	}
	return n, nil
}

// int returns the required integer under key.
func (s *spec) int(key string) (int64, error) {
	n, err := s.get(key)
	if err != nil {
		return 0, err
	}
	if n.ShortTag() != "!!int" {
		return 0, spaceErr(s.path, n, "%s must be an integer, got %s", key, kindName(n))
	}
	var i int64
	if err := n.Decode(&i); err != nil {
		return 0, spaceErr(s.path, n, "%s %s is out of range", key, n.Value)
	}
	return i, nil
}

// float returns the required finite number under key.
func (s *spec) float(key string) (float64, error) {
	n, err := s.get(key)
	if err != nil {
		return 0, err
	}
	if tag := n.ShortTag(); tag != "!!int" && tag != "!!float" {
		return 0, spaceErr(s.path, n, "%s must be a number, got %s", key, kindName(n))
	}
	var f float64
	if err := n.Decode(&f); err != nil {
		return 0, spaceErr(s.path, n, "%s %s is not a valid number", key, n.Value)
	}
	if !finite(f) {
		return 0, spaceErr(s.path, n, "%s must be finite, got %v", key, f)
	}
	return f, nil
}

// flag returns the optional boolean under key, false when absent.
func (s *spec) flag(key string) (bool, error) {
	if _, ok := s.keys[key]; !ok {
		return false, nil
	}
	n, err := s.get(key)
	if err != nil {
		return false, err
	}
	var b bool
	if n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		return false, spaceErr(s.path, n, "%s must be true or false, got %s", key, kindName(n))
	}
	return b, nil
}

// bounds returns the required integer min and max, with min <= max.
func (s *spec) bounds() (lo, hi int64, err error) {
	if lo, err = s.int("min"); err != nil {
		return 0, 0, err
	}
	if hi, err = s.int("max"); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, s.errf("min %d > max %d", lo, hi)
	}
	return lo, hi, nil
}

func (s *spec) intParam() (param, error) {
	lo, hi, err := s.bounds()
	if err != nil {
		return nil, err
	}
	log, err := s.flag("log")
	if err != nil {
		return nil, err
	}
	if log && lo < 1 {
		return nil, s.errf("log scale needs min >= 1, got %d", lo)
	}
	return &intParam{min: lo, max: hi, log: log}, nil
}

func (s *spec) floatParam() (param, error) {
	lo, err := s.float("min")
	if err != nil {
		return nil, err
	}
	hi, err := s.float("max")
	if err != nil {
		return nil, err
	}
	if lo >= hi {
		return nil, s.errf("min %s >= max %s", formatFloat(lo), formatFloat(hi))
	}
	log, err := s.flag("log")
	if err != nil {
		return nil, err
	}
	if log && lo <= 0 {
		return nil, s.errf("log scale needs min > 0, got %s", formatFloat(lo))
	}
	return newFloatParam(lo, hi, log), nil
}

func (s *spec) choiceParam() (param, error) {
	n, ok := s.keys["values"]
	if !ok {
		return nil, s.errf("missing values")
	}
	if n = resolve(n); n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, spaceErr(s.path, n, "values must be a non-empty list, got %s", kindName(n))
	}
	p := &choiceParam{}
	for _, e := range n.Content {
		v, err := s.value(resolve(e))
		if err != nil {
			return nil, err
		}
		if !p.add(v) {
			return nil, spaceErr(s.path, e, "duplicate value %v", v)
		}
	}
	return p, nil
}

// value converts a choice value to its canonical Go form.
func (s *spec) value(n *yaml.Node) (any, error) {
	if n.Kind != yaml.ScalarNode {
		return nil, spaceErr(s.path, n, "values must be scalars, got %s", kindName(n))
	}
	var v any
	var err error
	switch n.ShortTag() {
	case "!!str", "!!timestamp":
		return n.Value, nil
	case "!!int":
		v, err = decode[int64](n)
	case "!!float":
		v, err = decode[float64](n)
		if f, ok := v.(float64); err == nil && ok && !finite(f) {
			return nil, spaceErr(s.path, n, "value %s is not finite", n.Value)
		}
	case "!!bool":
		v, err = decode[bool](n)
	default:
		return nil, spaceErr(s.path, n, "unsupported value %s", kindName(n))
	}
	if err != nil {
		return nil, spaceErr(s.path, n, "value %s is out of range", n.Value)
	}
	return v, nil
}

// decode decodes a scalar node into a T.
func decode[T any](n *yaml.Node) (any, error) {
	var v T
	err := n.Decode(&v)
	return v, err
}

func (p *parser) listParam(s *spec, depth int) (param, error) {
	lo, hi, err := s.bounds()
	switch {
	case err != nil:
		return nil, err
	case lo < 0:
		return nil, s.errf("min %d < 0", lo)
	case hi < 1:
		return nil, s.errf("max must be >= 1, got %d", hi)
	case hi > maxValues:
		return nil, s.errf("max %d above the limit of %d items", hi, maxValues)
	case depth >= maxDepth:
		return nil, s.errf("lists nested more than %d deep", maxDepth)
	}
	n, ok := s.keys["item"]
	if !ok {
		return nil, s.errf("missing item")
	}
	item, err := p.group(n, s.path+".item", depth+1)
	if err != nil {
		return nil, err
	}
	if size := mulSat(int(hi), item.size()); size > maxValues {
		return nil, s.errf("genomes may hold %d values here, more than the limit of %d", size, maxValues)
	}
	return &listParam{min: int(lo), max: int(hi), item: item}, nil
}
