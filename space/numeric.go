package space

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// stepFraction is the size of a mutation step (int) or the standard deviation
// of a mutation (float), as a fraction of the param's (log) range.
const stepFraction = 0.1

// intParam is an integer in [min, max], optionally on a log scale (min >= 1).
type intParam struct {
	min, max int64
	log      bool
}

func (p *intParam) random(r *rand.Rand) any {
	if !p.log {
		return uniformInt(r, p.min, p.max)
	}
	lo, hi := math.Log(float64(p.min)), math.Log(float64(p.max)+1)
	return clampI(math.Floor(math.Exp(lerp(lo, hi, r.Float64()))), p.min, p.max)
}

func (p *intParam) mutate(v any, r *rand.Rand) any {
	x := v.(int64)
	dir := direction(r, x, p.min, p.max)
	if p.log {
		return p.logStep(x, dir)
	}
	span := float64(uint64(p.max) - uint64(p.min))
	step := int64(max(1, math.Round(stepFraction*span)))
	// step <= max-min, so neither bound expression overflows.
	if dir > 0 {
		return min(x, p.max-step) + step
	}
	return max(x, p.min+step) - step
}

// logStep moves x by a tenth of the log range in direction dir, and by at
// least one.
func (p *intParam) logStep(x, dir int64) int64 {
	span := math.Log(float64(p.max)) - math.Log(float64(p.min))
	y := math.Log(float64(x)) + float64(dir)*stepFraction*span
	n := clampI(math.Round(math.Exp(y)), p.min, p.max)
	if n == x {
		n = x + dir // direction keeps x+dir within bounds
	}
	return n
}

func (p *intParam) validate(v any, path string) (any, error) {
	n, ok := number(v)
	switch {
	case !ok:
		return nil, genomeErr(path, "want an int, got %T", v)
	case !finite(n.f) || n.f != math.Trunc(n.f):
		return nil, genomeErr(path, "%v is not an integer", v)
	case !n.exact && n.f > 0, n.exact && n.i > p.max:
		return nil, genomeErr(path, "%v above max %d", v, p.max)
	case !n.exact, n.i < p.min:
		return nil, genomeErr(path, "%v below min %d", v, p.min)
	}
	return n.i, nil
}

func (p *intParam) mutable() bool { return p.min < p.max }

func (p *intParam) describe() string {
	return fmt.Sprintf("int[%d..%d]%s", p.min, p.max, logSuffix(p.log))
}

func (p *intParam) size() int { return 1 }

// floatParam is a float64 in [min, max], optionally on a log scale (min > 0).
type floatParam struct {
	min, max float64
	log      bool
	// lmin, lmax are the log bounds; sigma the mutation's standard deviation.
	lmin, lmax, sigma float64
}

func newFloatParam(lo, hi float64, log bool) *floatParam {
	p := &floatParam{min: lo, max: hi, log: log}
	p.sigma = stepFraction*hi - stepFraction*lo
	if log {
		p.lmin, p.lmax = math.Log(lo), math.Log(hi)
		p.sigma = stepFraction * (p.lmax - p.lmin)
	}
	return p
}

func (p *floatParam) random(r *rand.Rand) any {
	u := r.Float64()
	if p.log {
		return p.fromLog(lerp(p.lmin, p.lmax, u))
	}
	return clampF(lerp(p.min, p.max, u), p.min, p.max)
}

func (p *floatParam) mutate(v any, r *rand.Rand) any {
	x, d := v.(float64), p.sigma*r.NormFloat64()
	var y float64
	if p.log {
		y = p.fromLog(math.Log(x) + d)
	} else {
		y = clampF(x+d, p.min, p.max)
	}
	if y == x && d != 0 {
		// A step too small to show in x's precision (a range only a few
		// ulps wide): move to the neighbouring float instead.
		y = clampF(math.Nextafter(x, math.Copysign(math.Inf(1), d)), p.min, p.max)
	}
	return y
}

func (p *floatParam) fromLog(y float64) float64 {
	return clampF(math.Exp(y), p.min, p.max)
}

func (p *floatParam) validate(v any, path string) (any, error) {
	n, ok := number(v)
	switch {
	case !ok:
		return nil, genomeErr(path, "want a float, got %T", v)
	case !finite(n.f):
		return nil, genomeErr(path, "%v is not finite", v)
	case n.f32:
		n.f = p.snap32(n.f)
	}
	if n.f < p.min {
		return nil, genomeErr(path, "%v below min %s", v, formatFloat(p.min))
	}
	if n.f > p.max {
		return nil, genomeErr(path, "%v above max %s", v, formatFloat(p.max))
	}
	return n.f, nil
}

// snap32 maps a float32 that rounds a bound to that bound, so that a value
// sent as float32 does not fall just outside the range.
func (p *floatParam) snap32(f float64) float64 {
	switch float32(f) {
	case float32(p.min):
		return p.min
	case float32(p.max):
		return p.max
	}
	return f
}

func (p *floatParam) mutable() bool { return true }

func (p *floatParam) describe() string {
	return fmt.Sprintf("float[%s..%s]%s", formatFloat(p.min), formatFloat(p.max), logSuffix(p.log))
}

func (p *floatParam) size() int { return 1 }

func logSuffix(log bool) string {
	if log {
		return " log"
	}
	return ""
}

func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}
