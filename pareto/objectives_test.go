package pareto

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParseObjectives(t *testing.T) {
	t.Parallel()
	got, err := ParseObjectives("fitness:max, params:min")
	if err != nil || !slices.Equal(got, []Objective{{"fitness", true}, {"params", false}}) {
		t.Fatalf("ParseObjectives = %v, %v", got, err)
	}
	if s := got[0].String() + "," + got[1].String(); s != "fitness:max,params:min" {
		t.Errorf("String gives %q", s)
	}
	for _, bad := range []string{"", "fitness", "fitness:up", ":max", "a:max,a:min"} {
		if _, err := ParseObjectives(bad); err == nil {
			t.Errorf("ParseObjectives(%q) accepted", bad)
		}
	}
}

func TestParseConstraint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Constraint{
		"params<=60000": {"params", "<=", 60000},
		"latency < 2.5": {"latency", "<", 2.5},
		"fitness>=0.9":  {"fitness", ">=", 0.9},
		"energy>1e3":    {"energy", ">", 1000},
	} {
		got, err := ParseConstraint(in)
		if err != nil || got != want {
			t.Errorf("ParseConstraint(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"params", "<=3", "params<=", "params<=x", "params<=NaN", "params=3"} {
		if _, err := ParseConstraint(bad); err == nil {
			t.Errorf("ParseConstraint(%q) accepted", bad)
		}
	}
}

func TestViolation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    string
		v    float64
		want float64
	}{
		{"p<=10", 9, 0}, {"p<=10", 10, 0}, {"p<=10", 12, 2},
		{"p>=10", 12, 0}, {"p>=10", 7, 3},
		{"p<10", 10, math.SmallestNonzeroFloat64}, {"p>10", 10, math.SmallestNonzeroFloat64},
	} {
		c, err := ParseConstraint(tc.c)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Violation(tc.v); got != tc.want {
			t.Errorf("%s at %v: violation %v, want %v", tc.c, tc.v, got, tc.want)
		}
	}
}

func TestMeasure(t *testing.T) {
	t.Parallel()
	objs, _ := ParseObjectives("fitness:max,params:min")
	c1, _ := ParseConstraint("params<=100")
	c2, _ := ParseConstraint("latency<=2")
	p, err := Measure(objs, []Constraint{c1, c2}, 0.9, map[string]any{"params": int64(150), "latency": 1.5})
	if err != nil || !slices.Equal(p.Obj, []float64{-0.9, 150}) || p.Violation != 50 {
		t.Fatalf("Measure = %+v, %v; want objectives (-0.9, 150), violation 50", p, err)
	}
	for name, m := range map[string]map[string]any{
		"params":  {"latency": 1.0},
		"latency": {"params": 3, "latency": "fast"},
	} {
		_, err := Measure(objs, []Constraint{c1, c2}, 0.9, m)
		if !errors.Is(err, ErrObjective) || !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("metrics %v: %v; want ErrObjective naming %s", m, err, name)
		}
	}
}
