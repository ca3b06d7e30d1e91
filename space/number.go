package space

import (
	"encoding/json"
	"math"
	"math/rand/v2"
)

// two63 is 2^63, the first float64 above math.MaxInt64.
const two63 = 9223372036854775808.0

// num is a Go numeric value as decoded from YAML, JSON or msgpack.
type num struct {
	f     float64 // the value as a float64
	i     int64   // the value as an int64, when exact
	exact bool    // the value is an integer that fits int64
	f32   bool    // the value arrived as a float32
}

// number converts any Go numeric type (and json.Number); ok is false for
// anything else.
func number(v any) (num, bool) {
	switch x := v.(type) {
	case int:
		return intNum(int64(x)), true
	case int8:
		return intNum(int64(x)), true
	case int16:
		return intNum(int64(x)), true
	case int32:
		return intNum(int64(x)), true
	case int64:
		return intNum(x), true
	case float32:
		n := floatNum(float64(x))
		n.f32 = true
		return n, true
	case float64:
		return floatNum(x), true
	case json.Number:
		return jsonNum(x)
	}
	return unsignedNumber(v)
}

func unsignedNumber(v any) (num, bool) {
	switch x := v.(type) {
	case uint:
		return uintNum(uint64(x)), true
	case uint8:
		return uintNum(uint64(x)), true
	case uint16:
		return uintNum(uint64(x)), true
	case uint32:
		return uintNum(uint64(x)), true
	case uint64:
		return uintNum(x), true
	case uintptr:
		return uintNum(uint64(x)), true
	}
	return num{}, false
}

func intNum(i int64) num {
	return num{f: float64(i), i: i, exact: true}
}

func uintNum(u uint64) num {
	if u > math.MaxInt64 {
		return num{f: float64(u)}
	}
	return intNum(int64(u))
}

func floatNum(f float64) num {
	n := num{f: f}
	if f == math.Trunc(f) && f >= -two63 && f < two63 {
		n.i, n.exact = int64(f), true
	}
	return n
}

func jsonNum(x json.Number) (num, bool) {
	if i, err := x.Int64(); err == nil {
		return intNum(i), true
	}
	f, err := x.Float64()
	if err != nil {
		return num{}, false
	}
	return floatNum(f), true
}

// finite reports whether f is neither NaN nor infinite.
func finite(f float64) bool {
	return !math.IsNaN(f) && !math.IsInf(f, 0)
}

// lerp interpolates between a and b without overflowing for finite inputs.
func lerp(a, b, u float64) float64 {
	return a*(1-u) + b*u
}

// clampF clamps f into [lo, hi]; NaN becomes lo.
func clampF(f, lo, hi float64) float64 {
	if !(f >= lo) {
		return lo
	}
	return min(f, hi)
}

// clampI converts f to an int64 clamped into [lo, hi]; NaN becomes lo.
func clampI(f float64, lo, hi int64) int64 {
	if !(f > float64(lo)) {
		return lo
	}
	if f >= float64(hi) {
		return hi
	}
	return int64(f)
}

// uniformInt draws uniformly from [lo, hi].
func uniformInt(r *rand.Rand, lo, hi int64) int64 {
	span := uint64(hi) - uint64(lo)
	if span == math.MaxUint64 {
		return int64(r.Uint64())
	}
	return int64(uint64(lo) + r.Uint64N(span+1))
}

// direction returns the sign of a step from x that stays within [lo, hi]:
// up from the lower bound, down from the upper, random in between.
func direction(r *rand.Rand, x, lo, hi int64) int64 {
	switch {
	case x <= lo:
		return 1
	case x >= hi:
		return -1
	}
	return int64(r.IntN(2)*2 - 1)
}

// addSat adds two non-negative ints, saturating at math.MaxInt.
func addSat(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// mulSat multiplies two non-negative ints, saturating at math.MaxInt.
func mulSat(a, b int) int {
	if a != 0 && b > math.MaxInt/a {
		return math.MaxInt
	}
	return a * b
}
