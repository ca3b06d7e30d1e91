package test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// A design that trained to its end is never stopped, however its end is
// declared: by the evoq_eval helper when train_fn returns (one-shot), by
// train_fn's report(..., last=True) (persistent), by the evaluator's own
// report line ("last": true), or by the run naming the gene that holds
// each design's length (--max-step-gene epochs). asha's rungs are at 1, 3
// and 9 and the gene epochs runs 1 to 9, so designs of 1, 3 and 9 epochs
// make their last report on a rung; the test checks that some of them
// would have lost there (the rule folded again over the stored reports,
// their marks taken off), and that none of them, nor any design, is
// stopped at or past its end. With --inherit, the stopped mutants keep
// the evaluator's inherited metric, and the summary counts inherited
// mutants over every mutant that trained, stopped ones too. Without
// --max-step or --max-step-gene the controller warns at start; evoq
// replay reaches the run's rungs digest.
func TestEarlyStopAtTheEnd(t *testing.T) {
	t.Parallel()
	py := python3(t)
	eval := func(mode string) string {
		return py + " " + filepath.Join("testdata", "epochs", "evaluate.py") + " " + mode
	}
	for _, tc := range []struct {
		name  string
		extra []string
		gene  bool
	}{
		{"helper marks it when train_fn returns", []string{"--eval-cmd", eval("helper")}, false},
		{"train_fn marks it, persistent", []string{"--eval-cmd", eval("helper-last"), "--persistent"}, false},
		{"report line marks it", []string{"--eval-cmd", eval("raw-last")}, false},
		{"max-step-gene", []string{"--eval-cmd", eval("raw"), "--max-step-gene", "epochs"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const run, budget = "ee", 96
			dir := t.TempDir()
			args := append([]string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--run", run,
				"--config", filepath.Join("testdata", "epochs", "space.yaml"), "--slots", "2", "--gpus", "none",
				"--budget", fmt.Sprint(budget), "--init", "24", "--pool", "8", "--seed", "3",
				"--early-stop", "asha", "--eta", "3", "--inherit", "--stop-grace", "5s"}, tc.extra...)
			r := evoq(t, 8*time.Minute, args...) // 30 s for all four alone on a slower machine; 80 s each beside the whole suite
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, tail(r.stderr, 4000))
			}
			s := lastJSON(t, r.stdout)
			if s.Evaluations != budget || s.OK+s.Stopped != budget || s.Stopped == 0 || s.EarlyStop == nil {
				t.Fatalf("summary: %d evaluations, %d ok, %d stopped; want %d, all ok or stopped, some stopped\n%s",
					s.Evaluations, s.OK, s.Stopped, budget, warnLines(r.stderr))
			}
			warned := strings.Contains(r.stderr, "--early-stop without --max-step or --max-step-gene")
			if warned == tc.gene {
				t.Errorf("warned at start that designs may be stopped at their last report: %v, want %v", warned, !tc.gene)
			}

			rp := evoq(t, time.Minute, "replay", "--dir", dir, "--run", run, "--json")
			var rep struct {
				EarlyStop *struct {
					Digest string `json:"rungs_digest"`
					Stops  int    `json:"stops"`
				} `json:"early_stop"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(rp.stdout)), &rep); err != nil || rep.EarlyStop == nil {
				t.Fatalf("replay --json: %v\n%s\n%s", err, rp.stdout, rp.stderr)
			}
			if rep.EarlyStop.Digest != s.EarlyStop.Digest || rep.EarlyStop.Stops != s.EarlyStop.Stops {
				t.Errorf("replay: rungs %s, %d stops; the run: %s, %d", rep.EarlyStop.Digest, rep.EarlyStop.Stops, s.EarlyStop.Digest, s.EarlyStop.Stops)
			}

			results := readResults(t, dir, run)
			checkOneResultEach(t, results, budget)
			reports := storedReports(t, dir, run)
			gene := &schema.EarlyStop{MaxStepGene: "epochs"}
			epochs := map[string]int64{}
			for _, res := range results {
				e, ok := gene.End(res.Design.Genome)
				if !ok {
					t.Fatalf("%s: no epochs gene in %v", res.DesignID, res.Design.Genome)
				}
				epochs[res.DesignID] = int64(e)
			}

			// The rule again over the stored reports, their marks taken
			// off: which designs it would have stopped at their last report.
			shadow := runstate.NewRungs(run, &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3})
			wouldStop := map[string]bool{}
			lastOf := map[string]*schema.Report{}
			for _, rep := range reports {
				lastOf[rep.DesignID] = rep
				plain := *rep
				plain.Last = false
				if d, _ := shadow.Apply(&plain); d.Stop && rep.Step == epochs[rep.DesignID] {
					wouldStop[rep.DesignID] = true
				}
			}
			if len(wouldStop) == 0 {
				t.Fatal("no design would have been stopped at its last report: the test checks nothing")
			}

			var mutants, okMutants, inherited, stoppedInherit int
			for _, res := range results {
				id, end := res.DesignID, epochs[res.DesignID]
				switch res.Status {
				case schema.StatusStopped:
					at, _ := res.Metrics["stopped_at"].(int64)
					if wouldStop[id] || at < 1 || at >= end {
						t.Errorf("%s (%d epochs) stopped at step %v: a design is stopped only before its end", id, end, res.Metrics["stopped_at"])
					}
				case schema.StatusOK:
					if l := lastOf[id]; l == nil || !l.Last || l.Step != end {
						t.Errorf("%s (%d epochs) ok; its last stored report %+v, want one at step %d marked last", id, end, l, end)
					}
				}
				if res.Design.Origin != schema.OriginMutant {
					continue
				}
				mutants++
				if res.Status == schema.StatusOK {
					okMutants++
				}
				if res.Metrics["inherited"] == true {
					inherited++
				}
				if res.Status == schema.StatusStopped && res.Design.Inherit != nil {
					if n, _ := res.Metrics["epochs"].(float64); res.Metrics["inherited"] != true || n != float64(end) {
						t.Errorf("stopped mutant %s lost its evaluator's metrics: %v", id, res.Metrics)
					}
					stoppedInherit++
				}
			}
			t.Logf("%d ok, %d stopped (the rule's stops %d); %d designs would have been stopped at their last report; %d of %d mutants inherited, %d of them stopped",
				s.OK, s.Stopped, s.EarlyStop.Stops, len(wouldStop), inherited, mutants, stoppedInherit)
			if stoppedInherit == 0 {
				t.Error("no stopped mutant started from its parent's checkpoint: the test checks nothing of their metrics")
			}
			c := s.Checkpoints
			if c == nil || c.Mutants != mutants || c.Inherited != inherited || c.Mutants == okMutants {
				t.Errorf("summary's checkpoints %+v; want %d mutants (%d of them ok), %d inherited", c, mutants, okMutants, inherited)
			}
			if s.EarlyStop.Stops < s.Stopped {
				t.Errorf("summary's early_stop %+v: fewer stops than the %d stopped results", s.EarlyStop, s.Stopped)
			}

		})
	}
}
