package test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A worker with a walltime stops taking designs when less than a typical
// evaluation is left before the walltime less its margin, hands back what
// still runs then (design 1, which takes 20 s) and exits 0 before the
// batch system would kill it. No design it took is lost: each has its
// result, or is evaluated again by a worker started after it left. The
// walltime comes from --walltime or from Slurm's SLURM_JOB_END_TIME.
func TestWalltime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		source string
		setup  func() (env, args []string, deadline time.Time)
	}{{
		name:   "walltime-flag",
		source: "from=--walltime",
		setup: func() ([]string, []string, time.Time) {
			return nil, []string{"--walltime", "6s"}, time.Now().Add(6 * time.Second)
		},
	}, {
		name:   "slurm-end-time",
		source: "from=SLURM_JOB_END_TIME",
		setup: func() ([]string, []string, time.Time) {
			end := time.Now().Add(6 * time.Second).Unix()
			return []string{"SLURM_JOB_END_TIME=" + strconv.FormatInt(end, 10), "PBS_WALLTIME="}, nil, time.Unix(end, 0)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const run, budget, margin, minEval = "wall", 200, 2 * time.Second, time.Second
			starts := filepath.Join(t.TempDir(), "starts")
			_, url := startBroker(t, t.TempDir())
			ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "20",
				"--pool", "10", "--json")
			waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "work queue ready") })
			env, extra, deadline := tc.setup()
			began := time.Now()
			w := backgroundEnv(t, env, append([]string{"worker", "--nats", url, "--run", run, "--id", "w", "--slots", "2",
				"--walltime-margin", margin.String(), "--min-eval-time", minEval.String(),
				"--eval-cmd", fmt.Sprintf(`echo "$EVOQ_DESIGN_ID $(date +%%s.%%N)" >> '%s'
case $EVOQ_DESIGN_ID in *-1) sleep 20 ;; *) sleep 1 ;; esac
echo '{"fitness": 1}'`, starts)},
				extra...)...)
			if err := w.wait(t, 10*time.Second); err != nil {
				t.Fatalf("w exited with %v, want 0\n%s", err, tail(w.stderr.String(), 3000))
			}
			ran := time.Since(began)
			if ran > 8*time.Second {
				t.Errorf("w ran %s, want to leave within 8 s (walltime 6 s, margin 2 s)", ran.Round(time.Millisecond))
			}
			log := w.stderr.String()
			for _, want := range [][]string{{"msg=walltime", tc.source}, {"too little time left"},
				{"walltime: handing back the designs still running", "busy=1"}} {
				if !hasLine(log, want...) {
					t.Fatalf("w's log has no line with %q:\n%s", want, tail(log, 3000))
				}
			}
			soft := logLineTime(t, log, "too little time left")
			if ctl.exited() {
				t.Fatalf("the run ended with w alone:\n%s", tail(ctl.stderr.String(), 3000))
			}
			b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2", "--evaluator", "noop")
			if err := ctl.wait(t, time.Minute); err != nil {
				t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
			}
			if err := b.wait(t, 30*time.Second); err != nil {
				t.Fatalf("b: %v", err)
			}
			if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget || s.OK != budget || s.Lost != 0 {
				t.Errorf("evaluations %d, ok %d, lost %d; want %d, %d, 0", s.Evaluations, s.OK, s.Lost, budget, budget)
			}
			_, js := connectJS(t, url)
			results := storedResults(t, js, run)
			checkOneResultEach(t, results, budget)
			byID := map[string]*schema.Result{}
			for _, r := range results {
				byID[r.DesignID] = r
			}
			end := deadline.Add(-margin)
			fromW := resultsOf(results, "w")
			if len(fromW) == 0 {
				t.Errorf("w stored no result")
			}
			for _, r := range fromW {
				if r.Attempt != 1 || r.Stop.After(end.Add(500*time.Millisecond)) {
					t.Errorf("w's %s: attempt %d, stopped %s before the walltime less margin; want attempt 1, before it",
						r.DesignID, r.Attempt, end.Sub(r.Stop).Round(time.Millisecond))
				}
			}
			if d := end.Sub(soft); d <= 0 || d > minEval+time.Second+200*time.Millisecond {
				t.Errorf("w stopped taking designs %s before the walltime less margin; want under a typical evaluation (1 s) plus the 1 s check period", d.Round(time.Millisecond))
			}
			taken := readStarts(t, starts)
			var handedBack []string
			latest := time.Duration(1 << 62)
			for id, at := range taken {
				latest = min(latest, end.Sub(at))
				if at.After(soft.Add(200 * time.Millisecond)) {
					t.Errorf("w started %s %s after it logged that it takes no new designs", id, at.Sub(soft).Round(time.Millisecond))
				}
				r := byID[id]
				switch {
				case r == nil:
					t.Errorf("w took %s and it has no result", id)
				case r.Worker == "w":
				case r.Worker == "b" && r.Attempt == 2:
					handedBack = append(handedBack, id)
				default:
					t.Errorf("w took %s; its result is by %s, attempt %d; want w's, or b's attempt 2", id, r.Worker, r.Attempt)
				}
			}
			if len(taken) != len(fromW)+len(handedBack) || !slices.Contains(handedBack, run+"-1") {
				t.Errorf("w took %d designs: %d results of its own, handed back %v; want the others and %s-1 handed back",
					len(taken), len(fromW), handedBack, run)
			}
			t.Logf("w ran %s, took %d designs (%d stored, handed back %v); soft stop %s and its last evaluation began %s before the walltime less margin",
				ran.Round(time.Millisecond), len(taken), len(fromW), handedBack, end.Sub(soft).Round(time.Millisecond), latest.Round(time.Millisecond))
		})
	}
}

// readStarts reads the evaluator's record of the designs it started: the
// design ID and the Unix time, one a line.
func readStarts(t *testing.T, file string) map[string]time.Time {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("the evaluator recorded no start: %v", err)
	}
	defer f.Close()
	out := map[string]time.Time{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, at, ok := strings.Cut(sc.Text(), " ")
		sec, err := strconv.ParseFloat(at, 64)
		if !ok || err != nil {
			t.Fatalf("bad start record %q", sc.Text())
		}
		if _, dup := out[id]; dup {
			t.Errorf("w started %s twice", id)
		}
		out[id] = time.Unix(0, int64(sec*1e9))
	}
	return out
}
