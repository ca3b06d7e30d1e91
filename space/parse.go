package space

import (
	"fmt"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// Limits that keep a hostile or mistaken YAML file from exhausting memory:
// aliases can make a small document describe a huge space.
const (
	maxParams = 10000   // params in the whole space, nested ones included
	maxDepth  = 32      // nesting of lists
	maxValues = 1 << 16 // values in the largest possible genome
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// parser carries the state of one Parse call.
type parser struct {
	params int // params seen so far
}

// pair is one key/value of a YAML mapping.
type pair struct {
	name     string
	key, val *yaml.Node
}

func parseSpace(data []byte) (*Space, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpace, err)
	}
	if len(doc.Content) == 0 {
		return nil, spaceErr("", nil, "empty document")
	}
	top, err := mapping(doc.Content[0], "")
	if err != nil {
		return nil, err
	}
	return new(parser).space(top, doc.Content[0])
}

// space builds a Space from the pairs of the top-level mapping n.
func (p *parser) space(top []pair, n *yaml.Node) (*Space, error) {
	s := &Space{}
	for _, kv := range top {
		var err error
		switch kv.name {
		case "name":
			s.name, err = scalar(kv.val, "name")
		case "params":
			s.root, err = p.group(kv.val, "params", 0)
		default:
			err = spaceErr(kv.name, kv.key, "unknown key (want name, params)")
		}
		if err != nil {
			return nil, err
		}
	}
	if s.root == nil {
		return nil, spaceErr("params", n, "missing")
	}
	if size := s.root.size(); size > maxValues {
		return nil, spaceErr("params", n, "genomes may hold %d values, more than the limit of %d", size, maxValues)
	}
	return s, nil
}

// group parses an ordered mapping of param name to spec.
func (p *parser) group(n *yaml.Node, path string, depth int) (*group, error) {
	pairs, err := mapping(n, path)
	if err != nil {
		return nil, err
	}
	if len(pairs) == 0 {
		return nil, spaceErr(path, n, "must be a non-empty mapping of params")
	}
	fields := make([]field, 0, len(pairs))
	for _, kv := range pairs {
		f, err := p.field(kv, path, depth)
		if err != nil {
			return nil, err
		}
		fields = append(fields, f)
	}
	return newGroup(fields), nil
}

func (p *parser) field(kv pair, path string, depth int) (field, error) {
	if !validName.MatchString(kv.name) {
		return field{}, spaceErr(path, kv.key, "invalid param name %q (use letters, digits, '_' and '-')", kv.name)
	}
	if p.params++; p.params > maxParams {
		return field{}, spaceErr(path, kv.key, "more than %d params", maxParams)
	}
	prm, err := p.spec(kv.val, path+"."+kv.name, depth)
	return field{name: kv.name, p: prm}, err
}

// mapping returns the pairs of mapping node n in document order, rejecting
// non-scalar and duplicate keys.
func mapping(n *yaml.Node, path string) ([]pair, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, spaceErr(path, n, "want a mapping, got %s", kindName(n))
	}
	pairs := make([]pair, 0, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			return nil, spaceErr(path, k, "keys must be scalars, got %s", kindName(k))
		}
		if seen[k.Value] {
			return nil, spaceErr(path, k, "duplicate key %q", k.Value)
		}
		seen[k.Value] = true
		pairs = append(pairs, pair{name: k.Value, key: k, val: n.Content[i+1]})
	}
	return pairs, nil
}

// scalar returns the text of a scalar node; null is "".
func scalar(n *yaml.Node, path string) (string, error) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return "", spaceErr(path, n, "want a scalar, got %s", kindName(n))
	}
	if n.ShortTag() == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// kindName describes a node in error messages.
func kindName(n *yaml.Node) string {
	switch {
	case len(n.Content) == 0 && n.Kind == yaml.MappingNode:
		return "an empty mapping"
	case len(n.Content) == 0 && n.Kind == yaml.SequenceNode:
		return "an empty list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode:
		return fmt.Sprintf("%s %q", scalarKinds[n.ShortTag()], n.Value)
	}
	return "nothing"
}

// scalarKinds names YAML scalar tags in error messages.
var scalarKinds = map[string]string{
	"!!str": "string", "!!int": "integer", "!!float": "float", "!!bool": "bool",
	"!!null": "null", "!!timestamp": "timestamp", "!!binary": "binary",
}

// spaceErr formats an error about the param at path, wrapping ErrInvalidSpace
// and giving n's line when known.
func spaceErr(path string, n *yaml.Node, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	if n != nil && n.Line > 0 {
		msg = fmt.Sprintf("%s (line %d)", msg, n.Line)
	}
	return fmt.Errorf("%w: %s", ErrInvalidSpace, msg)
}
