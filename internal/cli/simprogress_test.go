package cli

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// evalSpec parses args as evaluator flags and returns the evaluator they
// give on top of rec.
func evalSpec(t *testing.T, rec *schema.Evaluator, args ...string) (*schema.Evaluator, error) {
	t.Helper()
	var e evalFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := e.validate(); err != nil {
		return nil, err
	}
	return e.spec(rec)
}

// --sim-progress is recorded with the run: a restart given no evaluator
// flags keeps it, a run recorded before it existed keeps it off, and
// without a curve it is refused, naming the flag to add.
func TestSimProgressFlag(t *testing.T) {
	t.Parallel()
	curve := &schema.Evaluator{Builtin: schema.EvaluatorSim, StopGrace: time.Second,
		Sim: &schema.SimEvaluator{Mean: time.Second, Sigma: 0.8, Curve: true, Steps: 9}}
	withProgress := *curve
	sim := *curve.Sim
	sim.Progress = true
	withProgress.Sim = &sim
	for _, tc := range []struct {
		name     string
		rec      *schema.Evaluator
		args     []string
		progress bool
		err      string
	}{
		{"new run", nil, []string{"--evaluator", "sim", "--sim-curve", "--sim-progress"}, true, ""},
		{"new run, fixed times", nil, []string{"--evaluator", "sim", "--sim-curve", "--sim-progress", "--sim-fixed-time"}, true, ""},
		{"new run without", nil, []string{"--evaluator", "sim", "--sim-curve"}, false, ""},
		{"new run without a curve", nil, []string{"--evaluator", "sim", "--sim-progress"}, false, "--sim-progress needs --sim-curve"},
		{"restart keeps it", &withProgress, nil, true, ""},
		{"run recorded before it", curve, nil, false, ""},
		{"given on a recorded curve", curve, []string{"--sim-progress"}, true, ""},
		{"curve turned off under it", &withProgress, []string{"--sim-curve=false"}, false, "--sim-progress needs --sim-curve"},
	} {
		s, err := evalSpec(t, tc.rec, tc.args...)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case s.Sim.Progress != tc.progress || slices.Contains(s.Settings(), "--sim-progress") != tc.progress ||
			s.Sim.FixedTime != slices.Contains(tc.args, "--sim-fixed-time"):
			t.Errorf("%s: progress %v, settings %v; want progress %v", tc.name, s.Sim.Progress, s.Settings(), tc.progress)
		}
	}
}
