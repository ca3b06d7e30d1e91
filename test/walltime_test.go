package test

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A worker with a walltime takes no design it cannot finish before the
// walltime less its margin, by its own estimate of an evaluation (at least
// --min-eval-time), hands back what still runs then (design 1, which takes
// 20 s, and any other that ran late) and exits 0 before the walltime. No
// design it took is lost: each has its result, or is evaluated again by a
// worker started after it left, and counts once. The walltime comes from
// --walltime or from Slurm's SLURM_JOB_END_TIME.
//
// What it asserts holds on a loaded machine: how many designs the worker
// gets through, and whether a 1 s evaluation near the end overruns and is
// handed back, depend on the load; the rule the worker follows does not.
func TestWalltime(t *testing.T) {
	t.Parallel()
	const walltime = 6 * time.Second
	for _, tc := range []struct {
		name   string
		source string
		// setup returns the worker's environment and flags, and the
		// earliest its deadline can be.
		setup func() (env, args []string, deadline time.Time)
		// exact: the deadline is known to the test (whole seconds of
		// SLURM_JOB_END_TIME); else the worker computes it from its own
		// start, which the test bounds by the worker's first log line.
		exact bool
	}{{
		name:   "walltime-flag",
		source: "from=--walltime",
		setup: func() ([]string, []string, time.Time) {
			return nil, []string{"--walltime", walltime.String()}, time.Now().Add(walltime)
		},
	}, {
		name:   "slurm-end-time",
		source: "from=SLURM_JOB_END_TIME",
		setup: func() ([]string, []string, time.Time) {
			// Whole seconds: the job ends up to 1 s sooner than now + 6 s.
			end := time.Now().Add(walltime).Unix()
			return []string{"SLURM_JOB_END_TIME=" + strconv.FormatInt(end, 10), "PBS_WALLTIME="}, nil, time.Unix(end, 0)
		},
		exact: true,
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
			w := backgroundEnv(t, env, append([]string{"worker", "--nats", url, "--run", run, "--id", "w", "--slots", "2",
				"--walltime-margin", margin.String(), "--min-eval-time", minEval.String(),
				"--eval-cmd", fmt.Sprintf(`echo "$EVOQ_DESIGN_ID $EVOQ_SLOT $(date +%%s.%%N)" >> '%s'
case $EVOQ_DESIGN_ID in *-1) sleep 20 ;; *) sleep 1 ;; esac
echo '{"fitness": 1}'`, starts)},
				extra...)...)
			// The limit only ends a hung test; the deadline is checked below.
			if err := w.wait(t, walltime+time.Minute); err != nil {
				t.Fatalf("w exited with %v, want 0\n%s", err, tail(w.stderr.String(), 3000))
			}
			exited := time.Now() // no sooner than w's exit
			log := w.stderr.String()
			for _, want := range [][]string{{"msg=walltime", tc.source}, {"too little time left"},
				{"walltime: handing back the designs still running"}} {
				if !hasLine(log, want...) {
					t.Fatalf("w's log has no line with %q:\n%s", want, tail(log, 3000))
				}
			}
			// latest bounds w's own deadline from above: it logs the walltime
			// just after reading the clock (log times are in whole ms).
			latest := deadline
			if !tc.exact {
				latest = logLineTime(t, log, "msg=walltime", tc.source).Add(walltime + time.Millisecond)
			}
			if !exited.Before(deadline) {
				t.Errorf("w left %s after its walltime, want before it", exited.Sub(deadline).Round(time.Millisecond))
			}
			soft := logLineTime(t, log, "too little time left").Add(time.Millisecond)
			if ctl.exited() {
				t.Fatalf("the run ended with w alone:\n%s", tail(ctl.stderr.String(), 3000))
			}
			b := background(t, "worker", "--nats", url, "--run", run, "--id", "b", "--slots", "2", "--evaluator", "noop")
			if err := ctl.wait(t, 2*time.Minute); err != nil {
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
			checkWalltimeRule(t, run, results, readStarts(t, starts), handBacks(t, log), walltimeBounds{
				earliest: deadline.Add(-margin), latest: latest.Add(-margin), soft: soft, minEval: minEval})
		})
	}
}

// walltimeBounds is what the test knows of a worker's walltime: its
// deadline less margin lies between earliest and latest; it logged that it
// takes no new designs by soft; its estimate of an evaluation was never
// under minEval.
type walltimeBounds struct {
	earliest, latest, soft time.Time
	minEval                time.Duration
}

// hardStopLatency allows for a loaded machine running the worker's hard
// stop at its walltime less margin late: an evaluation that ends before
// the cancellation reaches it is stored.
const hardStopLatency = 500 * time.Millisecond

// checkWalltimeRule checks what worker w did against the stored results
// and its log: it started no design that could not finish before its
// deadline less margin by its estimate at the time, nor any after it said
// it takes no more; each result of its own is a first attempt stopped
// before the hard stop; each design it started (by the evaluator's record)
// has its result or was handed back; each design it handed back,
// cancelled or unstarted, was evaluated again by worker b; design 1,
// which takes 20 s, is among them.
func checkWalltimeRule(t *testing.T, run string, results []*schema.Result, taken map[string]start, back handedBack, wb walltimeBounds) {
	t.Helper()
	byID := map[string]*schema.Result{}
	for _, r := range results {
		byID[r.DesignID] = r
	}
	// w's estimate is the p90 of its finished evaluations, at least
	// minEval; with ten or fewer, as here, the p90 is the longest. The
	// soft stop comes when the time left falls under it, so no sooner than
	// the longest of them all before the end.
	fromW := resultsOf(results, "w")
	estimate := wb.minEval
	for _, r := range fromW {
		estimate = max(estimate, r.Duration())
	}
	if d := wb.earliest.Sub(wb.soft); d > estimate {
		t.Errorf("w stopped taking designs %s before its walltime less margin, want no sooner than its estimate %s",
			d.Round(time.Millisecond), estimate.Round(time.Millisecond))
	}
	// The estimate when a slot checks a design includes at least that
	// slot's earlier evaluations: the slot counts each before it asks for
	// the next design.
	estimateAt := func(slot int, at time.Time) time.Duration {
		e := wb.minEval
		for _, r := range fromW {
			if r.Slot == slot && r.Stop.Before(at) {
				e = max(e, r.Duration())
			}
		}
		return e
	}
	// Each start is the worker's, taken just before it checked the design.
	began := map[string]start{}
	for _, r := range fromW {
		began[r.DesignID] = start{at: r.Start, slot: r.Slot}
		if r.Attempt != 1 || r.Stop.After(wb.latest.Add(hardStopLatency)) {
			t.Errorf("w's %s: attempt %d, stopped %s after its walltime less margin; want attempt 1, before it",
				r.DesignID, r.Attempt, r.Stop.Sub(wb.latest).Round(time.Millisecond))
		}
		if _, ok := taken[r.DesignID]; !ok {
			t.Errorf("w stored a result of %s, which its evaluator never started", r.DesignID)
		}
	}
	for id, st := range back.cancelled {
		if _, dup := began[id]; dup {
			t.Errorf("w stored a result of %s and handed it back", id)
		}
		began[id] = st
	}
	for id, st := range began {
		est := estimateAt(st.slot, st.at)
		if left := wb.latest.Sub(st.at); left < est || !st.at.Before(wb.soft) {
			t.Errorf("w started %s with %s left before its walltime less margin, %s before its soft stop; want its estimate %s, and before it",
				id, left.Round(time.Millisecond), wb.soft.Sub(st.at).Round(time.Millisecond), est.Round(time.Millisecond))
		}
	}
	for id := range taken {
		if _, ok := began[id]; !ok {
			t.Errorf("w's evaluator started %s; w neither stored its result nor handed it back", id)
		}
	}
	for _, ids := range []map[string]start{back.cancelled, back.late} {
		for id := range ids {
			if r := byID[id]; r == nil || r.Worker != "b" || r.Attempt < 2 {
				t.Errorf("w handed back %s; its result is %+v, want b's after the hand-back", id, r)
			}
		}
	}
	first := schema.DesignID(run, 1)
	if _, ok := back.cancelled[first]; len(fromW) == 0 || !ok {
		t.Errorf("w stored %d results and handed back %v; want results, and %s handed back", len(fromW), slices.Sorted(maps.Keys(back.cancelled)), first)
	}
	t.Logf("w took %d designs: stored %d, handed back %v running and %v on arrival; soft stop %s before its walltime less margin (estimate %s)",
		len(began), len(fromW), slices.Sorted(maps.Keys(back.cancelled)), slices.Sorted(maps.Keys(back.late)),
		wb.earliest.Sub(wb.soft).Round(time.Millisecond), estimate.Round(time.Millisecond))
}

// handedBack is what a worker's log says it handed back: the designs whose
// evaluation the hard stop cancelled, with when and on which slot they
// started, and those that arrived too late to start.
type handedBack struct {
	cancelled, late map[string]start
}

var (
	logDesign  = regexp.MustCompile(` design=(\S+)`)
	logSlot    = regexp.MustCompile(` slot=(\d+)`)
	logStarted = regexp.MustCompile(` started="?([^" ]+)"?`)
)

// handBacks reads a worker's text log for its hand-backs.
func handBacks(t *testing.T, log string) handedBack {
	t.Helper()
	h := handedBack{cancelled: map[string]start{}, late: map[string]start{}}
	for _, line := range strings.Split(log, "\n") {
		cancelled := strings.Contains(line, "evaluation cancelled; design handed back")
		if !cancelled && !strings.Contains(line, "arrived too late to finish in time; handed it back") {
			continue
		}
		d, sl := logDesign.FindStringSubmatch(line), logSlot.FindStringSubmatch(line)
		if d == nil || sl == nil {
			t.Fatalf("hand-back without design or slot: %s", line)
		}
		var st start
		st.slot, _ = strconv.Atoi(sl[1])
		if !cancelled {
			h.late[d[1]] = st
			continue
		}
		m := logStarted.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("cancelled design without its start: %s", line)
		}
		var err error
		if st.at, err = time.Parse(time.RFC3339Nano, m[1]); err != nil {
			t.Fatalf("cancelled design with a bad start: %v: %s", err, line)
		}
		h.cancelled[d[1]] = st
	}
	return h
}

// start is when the evaluator command began a design, on which slot.
type start struct {
	at   time.Time
	slot int
}

// readStarts reads the evaluator's record of the designs it started: the
// design ID, the slot and the Unix time, one a line.
func readStarts(t *testing.T, file string) map[string]start {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("the evaluator recorded no start: %v", err)
	}
	defer f.Close()
	out := map[string]start{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var id string
		var slot int
		var sec float64
		if _, err := fmt.Sscan(sc.Text(), &id, &slot, &sec); err != nil {
			t.Fatalf("bad start record %q: %v", sc.Text(), err)
		}
		if _, dup := out[id]; dup {
			t.Errorf("w started %s twice", id)
		}
		out[id] = start{at: time.Unix(0, int64(sec*1e9)), slot: slot}
	}
	return out
}
