package mlp

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"strings"
)

// Genome keys understood by Evaluate.
const (
	keyLayers     = "layers"
	keyUnits      = "units"
	keyActivation = "activation"
	keyLR         = "lr"
	keyEpochs     = "epochs"
	keyMomentum   = "momentum"
	keyBatch      = "batch"
	keyL2         = "l2"
)

// maxUnits bounds the width of a single layer so that parameter counts
// cannot overflow; any width near it is infeasible anyway.
const maxUnits = math.MaxInt32

// activation identifies a layer's non-linearity.
type activation uint8

const (
	actIdentity activation = iota // output logits
	actReLU
	actTanh
	actSigmoid
)

// activationNames maps genome spellings to activations.
var activationNames = map[string]activation{
	"relu":    actReLU,
	"tanh":    actTanh,
	"sigmoid": actSigmoid,
}

// layerSpec describes one hidden layer.
type layerSpec struct {
	units int
	act   activation
}

// config is a validated genome.
type config struct {
	layers   []layerSpec
	lr       float64
	momentum float64
	l2       float64
	epochs   int
	batch    int
}

// parseGenome validates genome and converts it into a config.
func parseGenome(g map[string]any) (config, error) {
	c, err := parseConfig(g)
	if err != nil {
		return c, fmt.Errorf("mlp: bad genome: %w", err)
	}
	return c, nil
}

// parseConfig does the work of parseGenome.
func parseConfig(g map[string]any) (config, error) {
	var c config
	var err error
	if c.layers, err = parseLayers(g); err != nil {
		return c, err
	}
	if c.lr, err = boundedFloat(g, keyLR, isPositive, "must be positive"); err != nil {
		return c, err
	}
	if c.momentum, err = boundedFloat(g, keyMomentum, isFraction, "must be in [0, 1)"); err != nil {
		return c, err
	}
	if c.epochs, err = positiveIntKey(g, keyEpochs); err != nil {
		return c, err
	}
	if c.batch, err = positiveIntKey(g, keyBatch); err != nil {
		return c, err
	}
	if _, ok := g[keyL2]; ok {
		c.l2, err = boundedFloat(g, keyL2, isNonNegative, "must be non-negative")
	}
	return c, err
}

// Range predicates for boundedFloat.
func isPositive(f float64) bool    { return f > 0 }
func isNonNegative(f float64) bool { return f >= 0 }
func isFraction(f float64) bool    { return f >= 0 && f < 1 }

// boundedFloat reads the number under key and checks it with ok; want
// describes the accepted range in the error.
func boundedFloat(g map[string]any, key string, ok func(float64) bool, want string) (float64, error) {
	f, err := floatKey(g, key)
	if err == nil && !ok(f) {
		err = fmt.Errorf("%s: %s, got %v", key, want, f)
	}
	return f, err
}

// parseLayers reads the hidden-layer list.
func parseLayers(g map[string]any) ([]layerSpec, error) {
	v, ok := g[keyLayers]
	if !ok {
		return nil, missing(keyLayers)
	}
	items, err := layerItems(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%s: need at least one hidden layer", keyLayers)
	}
	specs := make([]layerSpec, len(items))
	for i, item := range items {
		if specs[i], err = parseLayer(item); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", keyLayers, i, err)
		}
	}
	return specs, nil
}

// layerItems converts the loosely typed layer list into mappings.
func layerItems(v any) ([]map[string]any, error) {
	switch l := v.(type) {
	case []map[string]any:
		return l, nil
	case []any:
		out := make([]map[string]any, len(l))
		for i, item := range l {
			m, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s[%d]: want a mapping, got %T", keyLayers, i, item)
			}
			out[i] = m
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: want a list of mappings, got %T", keyLayers, v)
}

// parseLayer reads one hidden layer's width and activation.
func parseLayer(m map[string]any) (layerSpec, error) {
	units, err := positiveIntKey(m, keyUnits)
	if err != nil {
		return layerSpec{}, err
	}
	if units > maxUnits {
		return layerSpec{}, fmt.Errorf("%s: %d is out of range", keyUnits, units)
	}
	v, ok := m[keyActivation]
	if !ok {
		return layerSpec{}, missing(keyActivation)
	}
	name, ok := v.(string)
	if !ok {
		return layerSpec{}, fmt.Errorf("%s: want a string, got %T", keyActivation, v)
	}
	act, ok := activationNames[strings.ToLower(name)]
	if !ok {
		return layerSpec{}, fmt.Errorf("%s: unknown %q (want relu, tanh or sigmoid)", keyActivation, name)
	}
	return layerSpec{units: units, act: act}, nil
}

// missing reports an absent genome key.
func missing(key string) error {
	return fmt.Errorf("missing key %q", key)
}

// floatKey reads a finite number stored under key.
func floatKey(m map[string]any, key string) (float64, error) {
	v, ok := m[key]
	if !ok {
		return 0, missing(key)
	}
	f, ok := toFloat(v)
	if !ok {
		return 0, fmt.Errorf("%s: want a number, got %T (%v)", key, v, v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s: want a finite number, got %v", key, f)
	}
	return f, nil
}

// positiveIntKey reads a positive integer stored under key.
func positiveIntKey(m map[string]any, key string) (int, error) {
	v, ok := m[key]
	if !ok {
		return 0, missing(key)
	}
	n, ok := toInt(v)
	if !ok {
		return 0, fmt.Errorf("%s: want an integer, got %T (%v)", key, v, v)
	}
	if n < 1 {
		return 0, fmt.Errorf("%s: must be at least 1, got %d", key, n)
	}
	return n, nil
}

// toFloat converts any Go numeric kind (or a json.Number) to float64.
func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	if i, ok := toInt64(v); ok {
		return float64(i), true
	}
	if u, ok := v.(uint64); ok {
		return float64(u), true
	}
	if u, ok := v.(uint); ok {
		return float64(u), true
	}
	return 0, false
}

// toInt converts any integral numeric value to int. Floats are accepted when
// they hold a whole number; values that do not fit an int are rejected.
func toInt(v any) (int, bool) {
	if i, ok := toInt64(v); ok {
		return int(i), int64(int(i)) == i
	}
	switch x := v.(type) {
	case uint64:
		return int(x), x <= math.MaxInt
	case uint:
		return int(x), x <= math.MaxInt
	}
	f, ok := toFloat(v)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int(f), true
}

// toInt64 converts the signed and the small unsigned integer kinds.
func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	}
	return 0, false
}

// params returns the number of trainable parameters (weights and biases) of
// the network, saturating at math.MaxInt.
func (c *config) params() int {
	total, in := 0, inputDim
	for _, l := range c.layers {
		total = satAdd(total, satMul(in+1, l.units))
		in = l.units
	}
	return satAdd(total, satMul(in+1, numClasses))
}

// satMul multiplies non-negative a and b, saturating at math.MaxInt.
func satMul(a, b int) int {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt {
		return math.MaxInt
	}
	return int(lo)
}

// satAdd adds non-negative a and b, saturating at math.MaxInt.
func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// seed derives the weight-initialisation and shuffling seed from a hash of
// the validated genome, so equal designs train identically however their
// numbers were typed.
func (c *config) seed() uint64 {
	h := fnv.New64a()
	var buf [8]byte
	put := func(u uint64) {
		binary.LittleEndian.PutUint64(buf[:], u)
		h.Write(buf[:])
	}
	put(uint64(len(c.layers)))
	for _, l := range c.layers {
		put(uint64(l.units))
		put(uint64(l.act))
	}
	for _, f := range []float64{c.lr, c.momentum, c.l2} {
		put(math.Float64bits(f))
	}
	put(uint64(c.epochs))
	put(uint64(c.batch))
	return h.Sum64()
}
