package space_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/evoq/evoq/space"
)

const mlpYAML = `name: mlp
params:
  layers:
    type: list
    min: 1
    max: 4
    item:
      units: {type: int, min: 2, max: 64}
      activation: {type: choice, values: [relu, tanh, sigmoid]}
  lr: {type: float, min: 0.001, max: 0.5, log: true}
  epochs: {type: int, min: 20, max: 200}
  momentum: {type: float, min: 0.0, max: 0.95}
  batch: {type: choice, values: [8, 16, 32]}
`

// nestedYAML exercises every kind, log scales, nested lists and empty lists.
const nestedYAML = `name: nested
params:
  blocks:
    type: list
    min: 0
    max: 3
    item:
      kind: {type: choice, values: [conv, pool, 3, 2.5, true]}
      layers:
        type: list
        min: 1
        max: 2
        item:
          width: {type: int, min: 1, max: 4096, log: true}
          dropout: {type: float, min: 0, max: 0.5}
  lr: {type: float, min: 1e-5, max: 1, log: true}
  seed: {type: int, min: -5, max: 5}
  fixed: {type: int, min: 7, max: 7}
  flag: {type: choice, values: [true, false]}
`

// tinyYAML is a space with little room to move, which stresses the retry
// logic of Mutate.
const tinyYAML = `params:
  a: {type: int, min: 0, max: 1}
  b: {type: choice, values: [x]}
  c: {type: float, min: 0, max: 1e-300}
  d:
    type: list
    min: 1
    max: 1
    item:
      e: {type: choice, values: [1, 2]}
`

// singleYAML is a space that holds exactly one genome.
const singleYAML = `params:
  a: {type: int, min: 3, max: 3}
  b: {type: choice, values: [only]}
  c: {type: list, min: 2, max: 2, item: {d: {type: int, min: 1, max: 1}}}
`

func mustParse(t testing.TB, yml string) *space.Space {
	t.Helper()
	s, err := space.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

var testSpaces = []struct {
	name string
	yml  string
}{
	{"mlp", mlpYAML},
	{"nested", nestedYAML},
	{"tiny", tinyYAML},
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yml     string
		wantStr string
		wantCol []string
	}{
		{
			name: "mlp",
			yml:  mlpYAML,
			wantStr: "mlp: 5 params (layers list[1..4] of {units int[2..64], activation choice(3)}, " +
				"lr float[0.001..0.5] log, epochs int[20..200], momentum float[0..0.95], batch choice(3))",
			wantCol: []string{"layers", "lr", "epochs", "momentum", "batch"},
		},
		{
			name:    "unnamed single param",
			yml:     "params:\n  x: {type: int, min: 1, max: 9, log: true}\n",
			wantStr: "1 param (x int[1..9] log)",
			wantCol: []string{"x"},
		},
		{
			name:    "document order kept",
			yml:     "name: order\nparams:\n  z: {type: choice, values: [a]}\n  a: {type: choice, values: [b]}\n  m: {type: choice, values: [c]}\n",
			wantStr: "order: 3 params (z choice(1), a choice(1), m choice(1))",
			wantCol: []string{"z", "a", "m"},
		},
		{
			name:    "aliases",
			yml:     "params:\n  a: &u {type: int, min: 1, max: 2}\n  b: *u\n",
			wantStr: "2 params (a int[1..2], b int[1..2])",
			wantCol: []string{"a", "b"},
		},
		{
			name:    "explicit false log and null name",
			yml:     "name:\nparams:\n  f: {type: float, min: -1, max: 1, log: false}\n",
			wantStr: "1 param (f float[-1..1])",
			wantCol: []string{"f"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, tt.yml)
			if got := s.String(); got != tt.wantStr {
				t.Errorf("String() = %q, want %q", got, tt.wantStr)
			}
			if got := s.Columns(); !reflect.DeepEqual(got, tt.wantCol) {
				t.Errorf("Columns() = %q, want %q", got, tt.wantCol)
			}
		})
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	if got := mustParse(t, mlpYAML).Name(); got != "mlp" {
		t.Errorf("Name() = %q, want mlp", got)
	}
	if got := mustParse(t, tinyYAML).Name(); got != "" {
		t.Errorf("Name() = %q, want empty", got)
	}
}

func TestColumnsIsACopy(t *testing.T) {
	t.Parallel()
	s := mustParse(t, mlpYAML)
	s.Columns()[0] = "changed"
	if got := s.Columns()[0]; got != "layers" {
		t.Errorf("Columns()[0] = %q after editing a returned slice", got)
	}
}

// inParams prefixes a params block.
func inParams(body string) string { return "params:\n" + body }

var parseErrorTests = []struct {
	name string
	yml  string
	want string // substring of the error
}{
	{"syntax", "params: {a: [", "yaml:"},
	{"empty document", "", "empty document"},
	{"only a comment", "# nothing\n", "empty document"},
	{"top not a mapping", "- a\n- b\n", "want a mapping, got a list"},
	{"unknown top key", "nme: x\n" + inParams("  a: {type: int, min: 1, max: 2}\n"), `nme: unknown key`},
	{"duplicate top key", "name: a\nname: b\n", `duplicate key "name"`},
	{"name not scalar", "name: [a]\n" + inParams("  a: {type: int, min: 1, max: 2}\n"), "name: want a scalar"},
	{"missing params", "name: x\n", "params: missing"},
	{"null params", "params:\n", "params: want a mapping"},
	{"empty params", "params: {}\n", "params: must be a non-empty mapping"},
	{"params a list", "params: [a]\n", "params: want a mapping, got a list"},
	{"bad param name", inParams("  a b: {type: int, min: 1, max: 2}\n"), `params: invalid param name "a b"`},
	{"dotted param name", inParams("  a.b: {type: int, min: 1, max: 2}\n"), `params: invalid param name "a.b"`},
	{"empty param name", inParams("  '': {type: int, min: 1, max: 2}\n"), `params: invalid param name ""`},
	{"duplicate param", inParams("  a: {type: int, min: 1, max: 2}\n  a: {type: int, min: 1, max: 2}\n"), `params: duplicate key "a"`},
	{"non-scalar key", inParams("  [a]: {type: int, min: 1, max: 2}\n"), "params: keys must be scalars"},
	{"spec not mapping", inParams("  a: 5\n"), "params.a: want a mapping"},
	{"missing type", inParams("  a: {min: 1, max: 2}\n"), "params.a: missing type"},
	{"unknown type", inParams("  a: {type: string}\n"), `params.a: unknown type "string"`},
	{"type not scalar", inParams("  a: {type: [int]}\n"), "params.a: want a scalar"},
	{"unknown key int", inParams("  a: {type: int, min: 1, max: 2, step: 1}\n"), `params.a: unknown key "step" for type int`},
	{"unknown key choice", inParams("  a: {type: choice, values: [1], min: 1}\n"), `params.a: unknown key "min" for type choice`},
	{"unknown key list", inParams("  a: {type: list, min: 1, max: 2, values: [1], item: {b: {type: int, min: 1, max: 2}}}\n"), `params.a: unknown key "values" for type list`},
	{"int missing min", inParams("  a: {type: int, max: 2}\n"), "params.a: missing min"},
	{"int missing max", inParams("  a: {type: int, min: 2}\n"), "params.a: missing max"},
	{"int float bound", inParams("  a: {type: int, min: 1.5, max: 2}\n"), "params.a: min must be an integer"},
	{"int string bound", inParams("  a: {type: int, min: '1', max: 2}\n"), "params.a: min must be an integer"},
	{"int list bound", inParams("  a: {type: int, min: [1], max: 2}\n"), "params.a: min must be a scalar"},
	{"int huge bound", inParams("  a: {type: int, min: 1, max: 18446744073709551615}\n"), "params.a: max 18446744073709551615 is out of range"},
	{"int min above max", inParams("  units: {type: int, min: 70, max: 64}\n"), "params.units: min 70 > max 64"},
	{"int log min zero", inParams("  a: {type: int, min: 0, max: 64, log: true}\n"), "params.a: log scale needs min >= 1"},
	{"log not bool", inParams("  a: {type: int, min: 1, max: 64, log: yes}\n"), "params.a: log must be true or false"},
	{"float min equals max", inParams("  a: {type: float, min: 1, max: 1}\n"), "params.a: min 1 >= max 1"},
	{"float min above max", inParams("  a: {type: float, min: 2, max: 1.5}\n"), "params.a: min 2 >= max 1.5"},
	{"float infinite", inParams("  a: {type: float, min: 0, max: .inf}\n"), "params.a: max must be finite"},
	{"float nan", inParams("  a: {type: float, min: .nan, max: 1}\n"), "params.a: min must be finite"},
	{"float string bound", inParams("  a: {type: float, min: low, max: 1}\n"), "params.a: min must be a number"},
	{"float log min zero", inParams("  a: {type: float, min: 0, max: 1, log: true}\n"), "params.a: log scale needs min > 0"},
	{"choice missing values", inParams("  a: {type: choice}\n"), "params.a: missing values"},
	{"choice empty values", inParams("  a: {type: choice, values: []}\n"), "params.a: values must be a non-empty list"},
	{"choice scalar values", inParams("  a: {type: choice, values: relu}\n"), "params.a: values must be a non-empty list"},
	{"choice duplicate string", inParams("  a: {type: choice, values: [relu, tanh, relu]}\n"), "params.a: duplicate value relu"},
	{"choice duplicate number", inParams("  a: {type: choice, values: [8, 8.0]}\n"), "params.a: duplicate value 8"},
	{"choice null value", inParams("  a: {type: choice, values: [1, null]}\n"), "params.a: unsupported value"},
	{"choice nested value", inParams("  a: {type: choice, values: [[1]]}\n"), "params.a: values must be scalars"},
	{"choice nan value", inParams("  a: {type: choice, values: [.nan]}\n"), "params.a: value .nan is not finite"},
	{"choice huge int", inParams("  a: {type: choice, values: [18446744073709551615]}\n"), "params.a: value 18446744073709551615 is out of range"},
	{"list negative min", inParams("  l: {type: list, min: -1, max: 2, item: {b: {type: int, min: 1, max: 2}}}\n"), "params.l: min -1 < 0"},
	{"list max below min", inParams("  l: {type: list, min: 3, max: 2, item: {b: {type: int, min: 1, max: 2}}}\n"), "params.l: min 3 > max 2"},
	{"list max zero", inParams("  l: {type: list, min: 0, max: 0, item: {b: {type: int, min: 1, max: 2}}}\n"), "params.l: max must be >= 1"},
	{"list missing item", inParams("  l: {type: list, min: 0, max: 2}\n"), "params.l: missing item"},
	{"list empty item", inParams("  l: {type: list, min: 0, max: 2, item: {}}\n"), "params.l.item: must be a non-empty mapping"},
	{"list item not mapping", inParams("  l: {type: list, min: 0, max: 2, item: [a]}\n"), "params.l.item: want a mapping"},
	{"list too long", inParams("  l: {type: list, min: 0, max: 1000000, item: {b: {type: int, min: 1, max: 2}}}\n"), "params.l: max 1000000 above the limit"},
	{"list genome too big", inParams("  l: {type: list, min: 0, max: 60000, item: {b: {type: int, min: 1, max: 2}, c: {type: int, min: 1, max: 2}}}\n"), "params.l: genomes may hold"},
	{"nested item error", mlpErrYAML, "params.layers.item.units: min 70 > max 64"},
	{"nested list item error", inParams("  a: {type: list, min: 0, max: 2, item: {b: {type: list, min: 0, max: 2, item: {c: {type: choice, values: []}}}}}\n"), "params.a.item.b.item.c: values must be a non-empty list"},
	{"nested bad name", inParams("  a: {type: list, min: 0, max: 2, item: {'b!': {type: int, min: 1, max: 2}}}\n"), `params.a.item: invalid param name "b!"`},
	{"too deep", deepYAML(40), "lists nested more than 32 deep"},
	{"self alias", "params: &p\n  a: {type: list, min: 1, max: 1, item: *p}\n", "lists nested more than 32 deep"},
	{"alias bomb", aliasBombYAML(), "more than 10000 params"},
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range parseErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := space.Parse([]byte(tt.yml))
			if err == nil {
				t.Fatalf("Parse succeeded: %v", s)
			}
			if !errors.Is(err, space.ErrInvalidSpace) {
				t.Errorf("error %q does not wrap ErrInvalidSpace", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

var mlpErrYAML = strings.Replace(mlpYAML, "{type: int, min: 2, max: 64}", "{type: int, min: 70, max: 64}", 1)

// deepYAML nests n single-item lists.
func deepYAML(n int) string {
	var b strings.Builder
	b.WriteString("params:\n")
	indent := "  "
	for range n {
		b.WriteString(indent + "l:\n" + indent + "  type: list\n" + indent + "  min: 1\n" + indent + "  max: 1\n" + indent + "  item:\n")
		indent += "    "
	}
	b.WriteString(indent + "x: {type: int, min: 1, max: 2}\n")
	return b.String()
}

// aliasBombYAML describes an exponentially large space in a few lines: each
// param reuses the previous one twice through aliases.
func aliasBombYAML() string {
	var b strings.Builder
	b.WriteString("params:\n  a0: &a0 {type: int, min: 1, max: 2}\n")
	for i := 1; i < 30; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d {type: list, min: 1, max: 1, item: {p: *a%d, q: *a%d}}\n", i, i, i-1, i-1)
	}
	return b.String()
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	missing := filepath.Join(dir, "missing.yaml")
	if err := os.WriteFile(good, []byte(mlpYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(mlpErrYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{"good", good, nil},
		{"invalid space", bad, space.ErrInvalidSpace},
		{"missing file", missing, os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := space.Load(tt.path)
			if tt.wantErr == nil {
				if err != nil || s.Name() != "mlp" {
					t.Fatalf("Load = %v, %v", s, err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Load error %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.path) {
				t.Errorf("Load error %q does not mention %s", err, tt.path)
			}
		})
	}
}

func TestRandomValidates(t *testing.T) {
	t.Parallel()
	for _, sp := range testSpaces {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, sp.yml)
			for seed := range uint64(500) {
				g := s.Random(newRand(seed))
				c, err := s.Validate(g)
				if err != nil {
					t.Fatalf("seed %d: Validate(Random) = %v for %v", seed, err, g)
				}
				if !reflect.DeepEqual(c, g) {
					t.Fatalf("seed %d: Random is not canonical:\n got %#v\nwant %#v", seed, g, c)
				}
			}
		})
	}
}

func TestRandomCoversBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yml  string
		want []any // values that must all show up for param "x"
	}{
		{"int", "params:\n  x: {type: int, min: -2, max: 2}\n", []any{int64(-2), int64(-1), int64(0), int64(1), int64(2)}},
		{"log int", "params:\n  x: {type: int, min: 1, max: 4, log: true}\n", []any{int64(1), int64(2), int64(3), int64(4)}},
		{"choice", "params:\n  x: {type: choice, values: [a, 2, 2.5, false]}\n", []any{"a", int64(2), 2.5, false}},
		{"list length", "params:\n  x: {type: list, min: 1, max: 3, item: {y: {type: choice, values: [k]}}}\n", []any{1, 2, 3}},
		{"extreme int", "params:\n  x: {type: int, min: -9223372036854775808, max: -9223372036854775807}\n", []any{int64(math.MinInt64), int64(math.MinInt64 + 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, r := mustParse(t, tt.yml), newRand(1)
			seen := map[any]bool{}
			for range 2000 {
				v := s.Random(r)["x"]
				if l, ok := v.([]any); ok {
					v = len(l)
				}
				seen[v] = true
			}
			if len(seen) != len(tt.want) {
				t.Errorf("saw %v, want exactly %v", seen, tt.want)
			}
			for _, w := range tt.want {
				if !seen[w] {
					t.Errorf("value %#v never drawn (saw %v)", w, seen)
				}
			}
		})
	}
}

func TestRandomFloatRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		yml      string
		lo, hi   float64
		wantBelw float64 // fraction of draws expected below mid
		mid      float64
	}{
		{"linear", "params:\n  x: {type: float, min: -1, max: 3}\n", -1, 3, 0.5, 1},
		{"log", "params:\n  x: {type: float, min: 0.001, max: 1000, log: true}\n", 0.001, 1000, 0.5, 1},
		{"extreme", "params:\n  x: {type: float, min: -1.7e308, max: 1.7e308}\n", -1.7e308, 1.7e308, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, r := mustParse(t, tt.yml), newRand(2)
			below := 0
			const n = 4000
			for range n {
				x := s.Random(r)["x"].(float64)
				if x < tt.lo || x > tt.hi || math.IsNaN(x) {
					t.Fatalf("draw %v outside [%v, %v]", x, tt.lo, tt.hi)
				}
				if x < tt.mid {
					below++
				}
			}
			if frac := float64(below) / n; math.Abs(frac-tt.wantBelw) > 0.05 {
				t.Errorf("%.3f of draws below %v, want about %v", frac, tt.mid, tt.wantBelw)
			}
		})
	}
}

// snapshot returns an independent deep copy of g.
func snapshot(t *testing.T, s *space.Space, g map[string]any) map[string]any {
	t.Helper()
	c, err := s.Validate(g)
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return c
}

// scramble overwrites every value reachable from g.
func scramble(g map[string]any) {
	for k, v := range g {
		if l, ok := v.([]any); ok {
			for i, it := range l {
				scramble(it.(map[string]any))
				l[i] = nil
			}
		}
		g[k] = "scrambled"
	}
}

func TestMutate(t *testing.T) {
	t.Parallel()
	for _, sp := range testSpaces {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, sp.yml)
			for seed := range uint64(300) {
				r := newRand(seed)
				parent := s.Random(r)
				for step := range 10 {
					before := snapshot(t, s, parent)
					child, err := s.Mutate(parent, r)
					if err != nil {
						t.Fatalf("seed %d step %d: Mutate: %v", seed, step, err)
					}
					checkChild(t, s, parent, before, child)
					parent = child
				}
			}
		})
	}
}

// checkChild checks a mutation: the child validates, differs from the parent
// in exactly one top-level param, and shares no memory with the parent.
func checkChild(t *testing.T, s *space.Space, parent, before, child map[string]any) {
	t.Helper()
	if _, err := s.Validate(child); err != nil {
		t.Fatalf("child does not validate: %v\nchild %v", err, child)
	}
	if !reflect.DeepEqual(parent, before) {
		t.Fatalf("parent modified:\n got %v\nwant %v", parent, before)
	}
	diff := 0
	for k := range parent {
		if !reflect.DeepEqual(parent[k], child[k]) {
			diff++
		}
	}
	if diff != 1 {
		t.Fatalf("child differs in %d params, want 1\nparent %v\nchild  %v", diff, parent, child)
	}
	c := snapshot(t, s, child)
	scramble(child)
	if !reflect.DeepEqual(parent, before) {
		t.Fatalf("parent shares memory with child")
	}
	for k, v := range c {
		child[k] = v
	}
}

func TestMutateSteps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		yml    string
		parent any
		check  func(child any) error
	}{
		{"int step up from min", "params:\n  x: {type: int, min: 0, max: 100}\n", int64(0), wantValue(int64(10))},
		{"int step down from max", "params:\n  x: {type: int, min: 0, max: 100}\n", int64(100), wantValue(int64(90))},
		{"int step clamped", "params:\n  x: {type: int, min: 0, max: 100}\n", int64(95), wantOneOf(int64(85), int64(100))},
		{"int step at least one", "params:\n  x: {type: int, min: 0, max: 3}\n", int64(1), wantOneOf(int64(0), int64(2))},
		{"log int at least one", "params:\n  x: {type: int, min: 1, max: 2, log: true}\n", int64(1), wantValue(int64(2))},
		{"log int step", "params:\n  x: {type: int, min: 1, max: 10000, log: true}\n", int64(100), wantOneOf(int64(40), int64(251))},
		{"full range int", "params:\n  x: {type: int, min: -9223372036854775808, max: 9223372036854775807}\n", int64(math.MaxInt64), wantRange(math.MinInt64, math.MaxInt64-1)},
		{"float near", "params:\n  x: {type: float, min: 0, max: 1}\n", 0.5, wantFloat(0, 1)},
		{"float extreme", "params:\n  x: {type: float, min: -1.7e308, max: 1.7e308}\n", 1.7e308, wantFloat(-1.7e308, 1.7e308)},
		{"float range of one ulp", "params:\n  x: {type: float, min: 1, max: 1.0000000000000002}\n", 1.0, wantValue(1.0000000000000002)},
		{"log float range of one ulp", "params:\n  x: {type: float, min: 1, max: 1.0000000000000002, log: true}\n", 1.0000000000000002, wantValue(1.0)},
		{"log float", "params:\n  x: {type: float, min: 1e-6, max: 1, log: true}\n", 1e-6, wantFloat(1e-6, 1)},
		{"choice differs", "params:\n  x: {type: choice, values: [a, b]}\n", "a", wantValue("b")},
		{"list grows from min", "params:\n  x: {type: list, min: 0, max: 2, item: {y: {type: choice, values: [k]}}}\n", []any{}, wantLen(1)},
		{"list shrinks from max", "params:\n  x: {type: list, min: 1, max: 2, item: {y: {type: choice, values: [k]}}}\n", []any{map[string]any{"y": "k"}, map[string]any{"y": "k"}}, wantLen(1)},
		{"list edits at fixed length", "params:\n  x: {type: list, min: 1, max: 1, item: {y: {type: choice, values: [k, j]}}}\n", []any{map[string]any{"y": "k"}}, wantValue([]any{map[string]any{"y": "j"}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, tt.yml)
			for seed := range uint64(200) {
				child, err := s.Mutate(map[string]any{"x": tt.parent}, newRand(seed))
				if err != nil {
					t.Fatalf("Mutate: %v", err)
				}
				if err := tt.check(child["x"]); err != nil {
					t.Fatalf("seed %d: %v -> %v: %v", seed, tt.parent, child["x"], err)
				}
				if reflect.DeepEqual(child["x"], tt.parent) {
					t.Fatalf("seed %d: child equals parent %v", seed, tt.parent)
				}
			}
		})
	}
}

func TestMutateFloatSigma(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		yml    string
		parent float64
		log    bool
		sigma  float64
	}{
		{"linear", "params:\n  x: {type: float, min: -100, max: 100}\n", 0, false, 20},
		{"log", "params:\n  x: {type: float, min: 1e-4, max: 1e4, log: true}\n", 1, true, 0.1 * math.Log(1e8)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, r := mustParse(t, tt.yml), newRand(3)
			const n = 5000
			sum := 0.0
			for range n {
				child, err := s.Mutate(map[string]any{"x": tt.parent}, r)
				if err != nil {
					t.Fatal(err)
				}
				d := child["x"].(float64) - tt.parent
				if tt.log {
					d = math.Log(child["x"].(float64)) - math.Log(tt.parent)
				}
				sum += d * d
			}
			if got := math.Sqrt(sum / n); math.Abs(got-tt.sigma) > 0.05*tt.sigma {
				t.Errorf("standard deviation %v, want about %v", got, tt.sigma)
			}
		})
	}
}

func TestMutatePicksParamsUniformly(t *testing.T) {
	t.Parallel()
	s, r := mustParse(t, mlpYAML), newRand(4)
	parent := map[string]any{
		"layers": []any{map[string]any{"units": int64(8), "activation": "relu"}},
		"lr":     0.01, "epochs": int64(100), "momentum": 0.5, "batch": int64(16),
	}
	counts := map[string]int{}
	const n = 10000
	for range n {
		child, err := s.Mutate(parent, r)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range s.Columns() {
			if !reflect.DeepEqual(parent[k], child[k]) {
				counts[k]++
			}
		}
	}
	for _, k := range s.Columns() {
		if frac := float64(counts[k]) / n; math.Abs(frac-0.2) > 0.02 {
			t.Errorf("param %s mutated in %.3f of children, want about 0.2", k, frac)
		}
	}
}

func TestParseLargeChoice(t *testing.T) {
	t.Parallel()
	values := make([]string, 50000)
	for i := range values {
		values[i] = fmt.Sprint(i)
	}
	s := mustParse(t, "params:\n  c: {type: choice, values: ["+strings.Join(values, ", ")+"]}\n")
	g, err := s.Validate(map[string]any{"c": 49999.0})
	if err != nil || g["c"] != int64(49999) {
		t.Fatalf("Validate = %v, %v", g, err)
	}
}

func wantValue(want any) func(any) error {
	return wantOneOf(want)
}

func wantOneOf(want ...any) func(any) error {
	return func(got any) error {
		for _, w := range want {
			if reflect.DeepEqual(got, w) {
				return nil
			}
		}
		return fmt.Errorf("got %#v, want one of %#v", got, want)
	}
}

func wantRange(lo, hi int64) func(any) error {
	return func(got any) error {
		if x, ok := got.(int64); !ok || x < lo || x > hi {
			return fmt.Errorf("got %#v, want int64 in [%d, %d]", got, lo, hi)
		}
		return nil
	}
}

func wantFloat(lo, hi float64) func(any) error {
	return func(got any) error {
		if x, ok := got.(float64); !ok || !(x >= lo && x <= hi) {
			return fmt.Errorf("got %#v, want float64 in [%v, %v]", got, lo, hi)
		}
		return nil
	}
}

func wantLen(n int) func(any) error {
	return func(got any) error {
		if l, ok := got.([]any); !ok || len(l) != n {
			return fmt.Errorf("got %#v, want a list of %d", got, n)
		}
		return nil
	}
}

func TestMutateSingleGenome(t *testing.T) {
	t.Parallel()
	s := mustParse(t, singleYAML)
	g := s.Random(newRand(1))
	before := snapshot(t, s, g)
	child, err := s.Mutate(g, newRand(2))
	if err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	if !reflect.DeepEqual(child, before) || !reflect.DeepEqual(g, before) {
		t.Fatalf("Mutate = %v, want a copy of %v", child, before)
	}
	scramble(child)
	if !reflect.DeepEqual(g, before) {
		t.Fatal("returned copy shares memory with the parent")
	}
}

func TestMutateInvalidParent(t *testing.T) {
	t.Parallel()
	s := mustParse(t, mlpYAML)
	g := s.Random(newRand(1))
	g["epochs"] = int64(1000)
	if _, err := s.Mutate(g, newRand(1)); !errors.Is(err, space.ErrInvalidGenome) {
		t.Fatalf("Mutate error = %v, want ErrInvalidGenome", err)
	}
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	for _, sp := range testSpaces {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, sp.yml)
			// A second parse must not change the outcome either.
			s2 := mustParse(t, sp.yml)
			for seed := range uint64(50) {
				a, b := run(t, s, seed), run(t, s2, seed)
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("seed %d: runs differ:\n%v\n%v", seed, a, b)
				}
			}
		})
	}
}

// run draws a genome and mutates it 20 times, returning every genome.
func run(t *testing.T, s *space.Space, seed uint64) []map[string]any {
	t.Helper()
	r := newRand(seed)
	out := []map[string]any{s.Random(r)}
	for range 20 {
		g, err := s.Mutate(out[len(out)-1], r)
		if err != nil {
			t.Fatalf("Mutate: %v", err)
		}
		out = append(out, g)
	}
	return out
}

func TestValidateJSON(t *testing.T) {
	t.Parallel()
	for _, sp := range testSpaces {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, sp.yml)
			for seed := range uint64(100) {
				g := s.Random(newRand(seed))
				data, err := json.Marshal(g)
				if err != nil {
					t.Fatal(err)
				}
				var decoded map[string]any
				if err := json.Unmarshal(data, &decoded); err != nil {
					t.Fatal(err)
				}
				got, err := s.Validate(decoded)
				if err != nil {
					t.Fatalf("Validate(%s): %v", data, err)
				}
				if !reflect.DeepEqual(got, g) {
					t.Fatalf("JSON round trip:\n got %#v\nwant %#v", got, g)
				}
			}
		})
	}
}

func TestValidateCanonical(t *testing.T) {
	t.Parallel()
	s := mustParse(t, mlpYAML)
	want := map[string]any{
		"layers":   []any{map[string]any{"units": int64(8), "activation": "relu"}},
		"lr":       0.25,
		"epochs":   int64(100),
		"momentum": 0.0,
		"batch":    int64(16),
	}
	tests := []struct {
		name string
		in   map[string]any
	}{
		{"canonical", want},
		{"json floats", map[string]any{
			"layers": []any{map[string]any{"units": 8.0, "activation": "relu"}},
			"lr":     0.25, "epochs": 100.0, "momentum": 0.0, "batch": 16.0,
		}},
		{"msgpack ints", map[string]any{
			"layers": []map[string]any{{"units": int8(8), "activation": "relu"}},
			"lr":     float32(0.25), "epochs": uint16(100), "momentum": float32(0), "batch": uint8(16),
		}},
		{"go ints", map[string]any{
			"layers": []any{map[string]any{"units": uint(8), "activation": "relu"}},
			"lr":     0.25, "epochs": 100, "momentum": int32(0), "batch": int16(16),
		}},
		{"json numbers", map[string]any{
			"layers": []any{map[string]any{"units": json.Number("8"), "activation": "relu"}},
			"lr":     json.Number("0.25"), "epochs": json.Number("100.0"), "momentum": json.Number("0"), "batch": json.Number("16"),
		}},
		{"wide types", map[string]any{
			"layers": []any{map[string]any{"units": uint32(8), "activation": "relu"}},
			"lr":     0.25, "epochs": uint64(100), "momentum": uint64(0), "batch": float32(16),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := s.Validate(tt.in)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Validate:\n got %#v\nwant %#v", got, want)
			}
		})
	}
}

func TestValidateChoiceTypes(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "params:\n  c: {type: choice, values: [relu, 3, 0.1, true, '8', 2024-01-02]}\n")
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"string", "relu", "relu"},
		{"int", 3, int64(3)},
		{"json int", 3.0, int64(3)},
		{"uint8", uint8(3), int64(3)},
		{"float", 0.1, 0.1},
		{"float32", float32(0.1), 0.1},
		{"bool", true, true},
		{"quoted number", "8", "8"},
		{"timestamp kept as text", "2024-01-02", "2024-01-02"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := s.Validate(map[string]any{"c": tt.in})
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !reflect.DeepEqual(got["c"], tt.want) {
				t.Fatalf("c = %#v, want %#v", got["c"], tt.want)
			}
		})
	}
}

func TestValidateFloat32(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "params:\n  f: {type: float, min: 0.1, max: 0.3}\n")
	tests := []struct {
		name string
		in   float32
		want float64
	}{
		{"rounded min", 0.1, 0.1},
		{"rounded max above the float64 bound", 0.3, 0.3},
		{"inside", 0.25, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := s.Validate(map[string]any{"f": tt.in})
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got["f"] != tt.want {
				t.Fatalf("f = %#v, want %#v", got["f"], tt.want)
			}
		})
	}
}

// validMLP is a valid genome of mlpYAML with three layers.
var validMLP = map[string]any{
	"layers": []any{
		map[string]any{"units": int64(8), "activation": "relu"},
		map[string]any{"units": int64(8), "activation": "relu"},
		map[string]any{"units": int64(8), "activation": "relu"},
	},
	"lr": 0.25, "epochs": int64(100), "momentum": 0.5, "batch": int64(16),
}

// editItem returns validMLP with layer i replaced by edit(layer i).
func editItem(i int, edit func(map[string]any) map[string]any) map[string]any {
	l := append([]any(nil), validMLP["layers"].([]any)...)
	l[i] = edit(l[i].(map[string]any))
	return withValue(validMLP, "layers", l)
}

// item returns validMLP with param k of layer i set to v.
func item(i int, k string, v any) map[string]any {
	return editItem(i, func(m map[string]any) map[string]any { return withValue(m, k, v) })
}

// nItems returns validMLP with n layers.
func nItems(n int) map[string]any {
	l := make([]any, n)
	for i := range l {
		l[i] = map[string]any{"units": int64(8), "activation": "relu"}
	}
	return withValue(validMLP, "layers", l)
}

var validateErrorTests = []struct {
	name string
	in   map[string]any
	want string
}{
	{"nil genome", nil, "layers: missing"},
	{"missing", without(validMLP, "lr"), "lr: missing"},
	{"extra key", withValue(validMLP, "foo", 1), "foo: not in the space"},
	{"extra keys sorted", withValue(withValue(validMLP, "zz", 1), "aa", 1), "aa: not in the space"},
	{"int above max", withValue(validMLP, "epochs", 201), "epochs: 201 above max 200"},
	{"int below min", withValue(validMLP, "epochs", int8(19)), "epochs: 19 below min 20"},
	{"int not integral", withValue(validMLP, "epochs", 100.5), "epochs: 100.5 is not an integer"},
	{"int nan", withValue(validMLP, "epochs", math.NaN()), "epochs: NaN is not an integer"},
	{"int huge uint", withValue(validMLP, "epochs", uint64(math.MaxUint64)), "epochs: 18446744073709551615 above max 200"},
	{"int huge float", withValue(validMLP, "epochs", -1e300), "epochs: -1e+300 below min 20"},
	{"int wrong type", withValue(validMLP, "epochs", "100"), "epochs: want an int, got string"},
	{"int bool", withValue(validMLP, "epochs", true), "epochs: want an int, got bool"},
	{"float above max", withValue(validMLP, "lr", 0.6), "lr: 0.6 above max 0.5"},
	{"float below min", withValue(validMLP, "lr", 0), "lr: 0 below min 0.001"},
	{"float nan", withValue(validMLP, "momentum", math.NaN()), "momentum: NaN is not finite"},
	{"float inf", withValue(validMLP, "momentum", math.Inf(1)), "momentum: +Inf is not finite"},
	{"float wrong type", withValue(validMLP, "lr", "0.1"), "lr: want a float, got string"},
	{"float nil", withValue(validMLP, "lr", nil), "lr: want a float, got <nil>"},
	{"choice not a value", withValue(validMLP, "batch", 12), "batch: 12 not one of [8 16 32]"},
	{"choice string for number", withValue(validMLP, "batch", "16"), "batch: 16 not one of [8 16 32]"},
	{"choice wrong type", withValue(validMLP, "batch", []any{16}), "batch: want one of [8 16 32], got []interface {}"},
	{"list too long", nItems(5), "layers: 5 items above max 4"},
	{"list too short", nItems(0), "layers: 0 items below min 1"},
	{"list wrong type", withValue(validMLP, "layers", "conv"), "layers: want a list, got string"},
	{"list of strings", withValue(validMLP, "layers", []string{"a"}), "layers: want a list, got []string"},
	{"item not a mapping", withValue(validMLP, "layers", []any{"a"}), "layers[0]: want a mapping, got string"},
	{"item out of range", item(2, "units", 90), "layers[2].units: 90 above max 64"},
	{"item missing", editItem(1, func(m map[string]any) map[string]any { return without(m, "units") }), "layers[1].units: missing"},
	{"item extra key", item(1, "foo", 1), "layers[1].foo: not in the space"},
	{"item bad choice", item(0, "activation", "gelu"), "layers[0].activation: gelu not one of [relu tanh sigmoid]"},
}

func TestValidateErrors(t *testing.T) {
	t.Parallel()
	s := mustParse(t, mlpYAML)
	if _, err := s.Validate(validMLP); err != nil {
		t.Fatalf("Validate(validMLP): %v", err)
	}
	for _, tt := range validateErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := s.Validate(tt.in)
			if err == nil {
				t.Fatalf("Validate succeeded: %v", got)
			}
			if !errors.Is(err, space.ErrInvalidGenome) {
				t.Errorf("error %q does not wrap ErrInvalidGenome", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateDeepCopy(t *testing.T) {
	t.Parallel()
	s := mustParse(t, nestedYAML)
	for seed := range uint64(50) {
		g := s.Random(newRand(seed))
		before := snapshot(t, s, g)
		c := snapshot(t, s, g)
		scramble(c)
		if !reflect.DeepEqual(g, before) {
			t.Fatalf("seed %d: Validate's copy shares memory with its input", seed)
		}
	}
}

func withValue(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

func without(m map[string]any, k string) map[string]any {
	out := withValue(m, k, nil)
	delete(out, k)
	return out
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		mlpYAML, nestedYAML, tinyYAML, singleYAML, mlpErrYAML,
		"", "params: {}", "params: &p {a: {type: list, min: 1, max: 1, item: *p}}",
		"params:\n  a: {type: choice, values: [1, 1.0, '1', true]}\n",
		"params:\n  a: {type: float, min: -1e308, max: 1e308, log: true}\n",
		"params:\n  a: {type: int, min: -9223372036854775808, max: 9223372036854775807}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := space.Parse(data)
		if err != nil {
			if !errors.Is(err, space.ErrInvalidSpace) {
				t.Fatalf("error %q does not wrap ErrInvalidSpace", err)
			}
			return
		}
		_, _ = s.String(), s.Columns()
		r := newRand(uint64(len(data)))
		g := s.Random(r)
		if _, err := s.Validate(g); err != nil {
			t.Fatalf("Validate(Random): %v", err)
		}
		child, err := s.Mutate(g, r)
		if err != nil {
			t.Fatalf("Mutate: %v", err)
		}
		if _, err := s.Validate(child); err != nil {
			t.Fatalf("Validate(Mutate): %v", err)
		}
	})
}

func FuzzValidate(f *testing.F) {
	s := mustParse(f, nestedYAML)
	for seed := range uint64(8) {
		data, err := json.Marshal(s.Random(newRand(seed)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"blocks": [{"kind": 3.0, "layers": [{"width": 1e3, "dropout": 0}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var g map[string]any
		if json.Unmarshal(data, &g) != nil {
			return
		}
		c, err := s.Validate(g)
		if err != nil {
			if !errors.Is(err, space.ErrInvalidGenome) {
				t.Fatalf("error %q does not wrap ErrInvalidGenome", err)
			}
			return
		}
		if again, err := s.Validate(c); err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("canonical genome does not round trip: %v", err)
		}
		child, err := s.Mutate(c, newRand(uint64(len(data))))
		if err != nil {
			t.Fatalf("Mutate: %v", err)
		}
		if _, err := s.Validate(child); err != nil {
			t.Fatalf("Validate(Mutate): %v", err)
		}
	})
}

func BenchmarkRandom(b *testing.B) {
	s, r := mustParse(b, mlpYAML), newRand(1)
	for b.Loop() {
		s.Random(r)
	}
}

func BenchmarkMutate(b *testing.B) {
	s, r := mustParse(b, mlpYAML), newRand(1)
	g := s.Random(r)
	for b.Loop() {
		var err error
		if g, err = s.Mutate(g, r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	s, r := mustParse(b, mlpYAML), newRand(1)
	g := s.Random(r)
	for b.Loop() {
		if _, err := s.Validate(g); err != nil {
			b.Fatal(err)
		}
	}
}
