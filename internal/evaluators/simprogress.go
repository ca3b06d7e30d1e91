package evaluators

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/evoq/evoq/worker"
)

// simProgress is what Sim saves of a design's progress: which design, and
// the last step it trained. A curve depends on the genome alone, so the
// step is all a resumed attempt needs to go on as if never interrupted.
type simProgress struct {
	Design string `json:"design"`
	Step   int64  `json:"step"`
}

// resumeStep is the step, from 0, t's training starts after: the step of
// the progress it was handed, or 0 with Progress off or none handed. A
// progress file Sim cannot use (unreadable, another design's, another
// step than the worker says, past the curve's end) starts the design from
// scratch, and unusable says why, for its result.
func (s Sim) resumeStep(t worker.Task, n int) (from int, unusable string) {
	if !s.SavesProgress() || t.ProgressIn == "" {
		return 0, ""
	}
	b, err := os.ReadFile(t.ProgressIn)
	if err != nil {
		return 0, "sim progress: " + err.Error()
	}
	var p simProgress
	switch err := json.Unmarshal(b, &p); {
	case err != nil:
		return 0, "sim progress: " + err.Error()
	case p.Design != t.Design.ID:
		return 0, fmt.Sprintf("sim progress of design %q, not %q", p.Design, t.Design.ID)
	case p.Step != t.ResumeStep:
		return 0, fmt.Sprintf("sim progress at step %d, the worker says %d", p.Step, t.ResumeStep)
	case p.Step < 1 || p.Step >= int64(n):
		return 0, fmt.Sprintf("sim progress at step %d, want 1 to %d of a curve of %d steps", p.Step, n-1, n)
	}
	return int(p.Step), ""
}

// saveStep saves step as t's progress, when Sim saves progress and the
// task keeps it. The file is replaced whole (written aside, then renamed),
// as worker.Task asks. A save that fails costs the design its resume
// point, not its evaluation: the next attempt starts from the last step
// saved, or from scratch.
func (s Sim) saveStep(t worker.Task, step int64) {
	if !s.SavesProgress() || t.ProgressOut == "" || t.Saved == nil {
		return
	}
	b, err := json.Marshal(simProgress{Design: t.Design.ID, Step: step})
	if err != nil {
		return
	}
	tmp := t.ProgressOut + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return
	}
	if err := os.Rename(tmp, t.ProgressOut); err != nil {
		_ = os.Remove(tmp)
		return
	}
	t.Saved(step)
}

// withUnusable adds to out's metrics why the progress handed to it was
// not used (worker.ProgressMetric), when it was not: the worker then does
// not count the design as resumed.
func withUnusable(out worker.Outcome, unusable string) worker.Outcome {
	if unusable == "" {
		return out
	}
	m := make(map[string]any, len(out.Metrics)+1)
	for k, v := range out.Metrics {
		m[k] = v
	}
	m[worker.ProgressMetric] = unusable
	out.Metrics = m
	return out
}
