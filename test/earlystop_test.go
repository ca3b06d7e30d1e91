package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// python3 is the interpreter the Python evaluators of these tests run
// with: any Python 3, since the evoq_eval helper is stdlib only. It is the
// python3 first on PATH, named by its own sys.executable: where that
// python3 is a version manager's shim (pyenv's is a shell script that
// runs pyenv), each start costs ten times the interpreter's own, and the
// tests start it for every design.
func python3(t *testing.T) string {
	t.Helper()
	p, err := python3Path()
	if err != nil {
		t.Fatalf("python3 not found: the evaluator helper is tested with a real interpreter: %v", err)
	}
	return p
}

var python3Path = sync.OnceValues(func() (string, error) {
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("%s does not run: %w", p, err)
	}
	if exe := strings.TrimSpace(string(out)); exe != "" {
		if _, err := os.Stat(exe); err == nil {
			return exe, nil
		}
	}
	return p, nil
})

// storedReports reads every report of run from a stopped store.
func storedReports(t *testing.T, dir, run string) []*schema.Report {
	t.Helper()
	var out []*schema.Report
	err := broker.ReadReports(testutil.Context(t, 30*time.Second), openStore(t, dir).JS, run, func(_ uint64, _ time.Time, r *schema.Report, err error) error {
		if err != nil {
			t.Errorf("a stored report does not decode: %v", err)
			return nil
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A one-shot and a persistent Python evaluator that report every step
// through the evoq_eval helper are stopped by asha: the stopped designs end
// with status stopped and the fitness of their last report, which is at a
// rung; the others run all nine steps; every design has one counted
// result; export shows the status and the fitness, and writes the reports.
func TestEarlyStopEvaluators(t *testing.T) {
	t.Parallel()
	py := python3(t)
	eval := py + " " + filepath.Join("testdata", "curve", "evaluate.py")
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"one-shot", nil}, {"persistent", []string{"--persistent"}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			const run, budget = "es", 40
			args := append([]string{"--run", run, "--config", filepath.Join("testdata", "curve", "space.yaml"), "--eval-cmd", eval,
				"--slots", "2", "--budget", fmt.Sprint(budget), "--init", "20", "--pool", "5",
				"--early-stop", "asha", "--max-step", "9", "--eta", "3", "--stop-grace", "5s"}, mode.extra...)
			s, dir := runJSON(t, 3*time.Minute, args...)
			if s.Evaluations != budget || s.Stopped == 0 || s.OK == 0 || s.OK+s.Stopped != budget {
				t.Fatalf("summary: %d evaluations, %d ok, %d stopped; want %d, all ok or stopped, some of each", s.Evaluations, s.OK, s.Stopped, budget)
			}
			if s.EarlyStop == nil || s.EarlyStop.Stops != s.Stopped {
				t.Errorf("summary's early_stop %+v, want %d stops", s.EarlyStop, s.Stopped)
			}
			exp := evoq(t, time.Minute, "export", "--dir", dir, "--run", run, "--format", "csv")
			if exp.code != 0 {
				t.Fatalf("export: exit %d\n%s", exp.code, exp.stderr)
			}
			_, rows := readCSVRows(t, exp.stdout)
			stopped := 0
			for _, row := range rows {
				if row["status"] == "stopped" {
					stopped++
					if row["fitness"] == "" {
						t.Errorf("export leaves a stopped design's fitness empty: %v", row)
					}
				}
			}
			if stopped != s.Stopped {
				t.Errorf("export has %d stopped rows, the run %d", stopped, s.Stopped)
			}
			reps := evoq(t, time.Minute, "export", "--dir", dir, "--run", run, "--what", "reports", "--format", "csv")
			_, reportRows := readCSVRows(t, reps.stdout)
			if reps.code != 0 {
				t.Fatalf("export --what reports: exit %d\n%s", reps.code, reps.stderr)
			}
			results := readResults(t, dir, run)
			checkOneResultEach(t, results, budget)
			stored := storedReports(t, dir, run)
			if len(reportRows) != len(stored) {
				t.Errorf("export --what reports wrote %d rows; %d reports are stored", len(reportRows), len(stored))
			}
			last := map[string]*schema.Report{}
			steps := map[string]int{}
			for _, r := range stored {
				if l := last[r.DesignID]; l != nil && r.Last && r.Step == l.Step {
					// The helper's mark, one-shot: the report before was
					// the last.
					last[r.DesignID] = r
					continue
				}
				last[r.DesignID] = r
				steps[r.DesignID]++
			}
			for _, res := range results {
				l := last[res.DesignID]
				switch res.Status {
				case schema.StatusStopped:
					if l == nil || res.Fitness != l.Fitness || (l.Step != 1 && l.Step != 3) {
						t.Errorf("%s stopped with fitness %v; its last report %+v, want it at rung 1 or 3 with that fitness", res.DesignID, res.Fitness, l)
					}
					if !strings.Contains(res.Error, "asha at rung") {
						t.Errorf("%s stopped saying %q, want the rule's reason", res.DesignID, res.Error)
					}
				case schema.StatusOK:
					// One-shot, the helper marks the last report when
					// train_fn returns; persistent, train_fn would.
					if steps[res.DesignID] != 9 || l.Fitness != res.Fitness || l.Last != (mode.name == "one-shot") {
						t.Errorf("%s ok with fitness %v after %d reports (last %v), want 9 reports ending at its fitness, the last marked one-shot", res.DesignID, res.Fitness, steps[res.DesignID], l)
					}
				}
			}
		})
	}
}

var rungsDigestRE = regexp.MustCompile(`evaluations=(\d+) .*pool_digest=(\w+).*rungs_digest=(\w+)`)

// A controller killed mid-run rebuilds, from the reports stream, the rung
// statistics it had (the digest of its decisions), and from the results
// stream the same pool; the run finishes, and evoq replay reaches the
// controller's final digests. A conflicting rule on the restart is
// refused. With --rung-select reached, stopped designs are parents too,
// and the restart, given no --rung-select, keeps selecting them.
func TestEarlyStopRestart(t *testing.T) {
	t.Parallel()
	for _, sel := range []string{"off", "reached", ""} {
		t.Run("select="+sel, func(t *testing.T) {
			t.Parallel()
			testEarlyStopRestart(t, sel, 0)
		})
	}
	// Asynchronous Hyperband: three brackets, whose first rungs are 1, 3
	// and 9 (--max-step 27 --eta 3).
	t.Run("brackets=3", func(t *testing.T) {
		t.Parallel()
		testEarlyStopRestart(t, "", 3)
	})
}

func testEarlyStopRestart(t *testing.T, given string, brackets int) {
	sel := given
	if sel == "" {
		sel = controller.SelectDefault
	}
	dir, port := t.TempDir(), freePort(t)
	listen, url := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("nats://127.0.0.1:%d", port)
	ctlArgs := []string{"controller", "--dir", dir, "--listen", listen, "--run", "esr", "--progress", "100ms", "--ack-wait", "3s"}
	firstArgs := append(ctlArgs, "--budget", "300", "--init", "30", "--pool", "10",
		"--early-stop", "asha", "--max-step", "27", "--eta", "3")
	if given != "" {
		firstArgs = append(firstArgs, "--rung-select", given)
	}
	if brackets > 0 {
		firstArgs = append(firstArgs, "--brackets", strconv.Itoa(brackets))
	}
	first := background(t, firstArgs...)
	workerArgs := []string{"worker", "--nats", url, "--run", "esr", "--evaluator", "sim", "--sim-curve", "--sim-mean", "0.1",
		"--slots", "8", "--gpus", "none"}
	w1 := background(t, workerArgs...)
	lines := func(log string) [][]string { return rungsDigestRE.FindAllStringSubmatch(log, -1) }
	waitFor(t, 2*time.Minute, func() bool {
		p := lines(first.stderr.String())
		return len(p) > 0 && atoi(p[len(p)-1][1]) >= 80
	})
	_ = w1.cmd.Process.Kill()
	_ = w1.wait(t, 10*time.Second)
	// Nothing reports now: once three progress lines in a row agree, the
	// last digests are the controller's state.
	seen := len(lines(first.stderr.String()))
	waitFor(t, 30*time.Second, func() bool {
		p := lines(first.stderr.String())
		n := len(p)
		return n >= seen+3 && slicesEqual(p[n-1][1:], p[n-2][1:]) && slicesEqual(p[n-2][1:], p[n-3][1:])
	})
	_ = first.cmd.Process.Kill()
	_ = first.wait(t, 10*time.Second)
	killed := time.Now()
	p := lines(first.stderr.String())
	before := p[len(p)-1]

	conflict := evoq(t, time.Minute, append(ctlArgs, "--early-stop", "median")...)
	if conflict.code != 2 || !strings.Contains(conflict.stderr, "--early-stop") || !strings.Contains(conflict.stderr, "records asha") {
		t.Errorf("restart with another rule: exit %d, want 2 naming --early-stop and the recorded asha\n%s", conflict.code, tail(conflict.stderr, 2000))
	}
	if brackets > 0 {
		other := evoq(t, time.Minute, append(ctlArgs, "--early-stop", "asha", "--max-step", "27", "--eta", "3", "--brackets", "2")...)
		if other.code != 2 || !strings.Contains(other.stderr, fmt.Sprintf("brackets=%d", brackets)) {
			t.Errorf("restart with other brackets: exit %d, want 2 naming the recorded brackets=%d\n%s", other.code, brackets, tail(other.stderr, 2000))
		}
	}

	var stdout bytes.Buffer
	second := newProc(&stdout, append(ctlArgs, "--json")...)
	second.start(t, nil)
	waitFor(t, 30*time.Second, func() bool {
		log := second.stderr.String()
		return strings.Contains(log, "resumed run from its results stream") && strings.Contains(log, "rebuilt the early-stopping rule")
	})
	log := second.stderr.String()
	if want := "rungs_digest=" + before[3]; !strings.Contains(lineWith(log, "rebuilt the early-stopping rule"), want) {
		t.Errorf("rungs digest before the kill %s (after %s evaluations); the restart logged:\n%s", before[3], before[1], lineWith(log, "rebuilt the early-stopping rule"))
	}
	if want := "pool_digest=" + before[2]; !strings.Contains(lineWith(log, "resumed run from its results stream"), want) {
		t.Errorf("pool digest before the kill %s; the restart logged:\n%s", before[2], lineWith(log, "resumed run"))
	}
	if !strings.Contains(lineWith(log, "continuing the run"), "early_stop=asha") {
		t.Errorf("the restart did not take the recorded rule:\n%s", lineWith(log, "continuing the run"))
	}
	if got := strings.Contains(lineWith(log, "continuing the run"), "select=reached"); got != (sel == "reached") {
		t.Errorf("select %q: the restart's rule says select=reached: %v\n%s", sel, got, lineWith(log, "continuing the run"))
	}
	if got := strings.Contains(lineWith(log, "continuing the run"), fmt.Sprintf("brackets=%d", brackets)); got != (brackets > 1) {
		t.Errorf("brackets %d: the restart's rule says brackets=%d: %v\n%s", brackets, brackets, got, lineWith(log, "continuing the run"))
	}
	background(t, workerArgs...)
	if err := second.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("restarted controller: %v\n%s", err, tail(second.stderr.String(), 3000))
	}
	s := lastJSON(t, stdout.String())
	if s.Evaluations != 300 || s.Stopped == 0 || s.EarlyStop == nil {
		t.Fatalf("the restarted run ended with %d evaluations, %d stopped, rule %+v", s.Evaluations, s.Stopped, s.EarlyStop)
	}
	r := evoq(t, time.Minute, "replay", "--dir", dir, "--run", "esr", "--json")
	var rep struct {
		PoolDigest string `json:"pool_digest"`
		Counts     map[string]int
		EarlyStop  *struct {
			Digest string `json:"rungs_digest"`
			Stops  int    `json:"stops"`
		} `json:"early_stop"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &rep); err != nil || rep.EarlyStop == nil {
		t.Fatalf("replay --json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	if rep.PoolDigest != s.PoolDigest || rep.EarlyStop.Digest != s.EarlyStop.Digest || rep.Counts["stopped"] != s.Stopped {
		t.Errorf("replay: pool %s, rungs %s, %d stopped; the controller: %s, %s, %d",
			rep.PoolDigest, rep.EarlyStop.Digest, rep.Counts["stopped"], s.PoolDigest, s.EarlyStop.Digest, s.Stopped)
	}
	results := readResults(t, dir, "esr")
	checkDesigns(t, results, 300)
	if got := stoppedParents(results); (got > 0) != (sel == "reached") {
		t.Errorf("select %q: %d designs have a stopped parent", sel, got)
	}
	checkReplayAtKill(t, dir, results, killed, before[2], sel == "reached")
	if brackets > 0 {
		checkBrackets(t, results, s, brackets)
	}
}

// checkBrackets checks a run of several brackets (--min-step 1, --eta 3):
// every stopped design stopped at or past its bracket's first rung, 3^b,
// and each bracket's rungs were kept apart in the run's figures.
func checkBrackets(t *testing.T, results []*schema.Result, s *runstate.Summary, brackets int) {
	t.Helper()
	rule := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 27, Eta: 3, Brackets: brackets}
	stoppedIn := make([]int, brackets)
	for _, r := range results {
		if r.Status != schema.StatusStopped {
			continue
		}
		b := rule.Bracket(r.Design.Seq)
		first := rule.BracketRungs(b, 27)[0]
		at, ok := r.Metrics["stopped_at"].(int64)
		if !ok || at < first {
			t.Errorf("%s of bracket %d stopped at %v, before its bracket's first rung %d", r.DesignID, b, r.Metrics["stopped_at"], first)
		}
		stoppedIn[b]++
	}
	for b, n := range stoppedIn {
		if n == 0 {
			t.Errorf("bracket %d stopped no design (stopped per bracket %v)", b, stoppedIn)
		}
	}
	seen := map[int]bool{}
	for _, g := range s.EarlyStop.Rungs {
		seen[g.Bracket] = true
		if g.Step < rule.BracketRungs(g.Bracket, 27)[0] {
			t.Errorf("rung %d in bracket %d's figures, below its first rung", g.Step, g.Bracket)
		}
	}
	if len(seen) != brackets {
		t.Errorf("the summary's rungs cover brackets %v, want %d", seen, brackets)
	}
}

// checkReplayAtKill replays the results stored before the first
// controller was killed, as a prefix of the stream, and wants the pool it
// had then; with stopped designs selected, replay up to the result of a
// stopped design that became a parent has it in the pool.
func checkReplayAtKill(t *testing.T, dir string, results []*schema.Result, killed time.Time, digest string, stopped bool) {
	t.Helper()
	n := 0
	for n < len(results) && results[n].Stop.Before(killed) {
		n++
	}
	if rep := replayUntil(t, dir, n); rep.PoolDigest != digest {
		t.Errorf("replay of the %d results stored before the kill: pool %s; the controller had %s", n, rep.PoolDigest, digest)
	}
	if !stopped {
		return
	}
	parent := map[string]bool{}
	for _, r := range results {
		if len(r.Design.Parents) > 0 {
			parent[r.Design.Parents[0]] = true
		}
	}
	for i, r := range results {
		if r.Status != schema.StatusStopped || !parent[r.DesignID] {
			continue
		}
		// Pool membership is lost once and for good: a design chosen as
		// a parent later was in the pool from its result on.
		rep := replayUntil(t, dir, i+1)
		for _, m := range rep.Pool {
			if m.DesignID == r.DesignID {
				return
			}
		}
		t.Fatalf("replay up to the stopped parent %s (result %d): pool %+v, without it", r.DesignID, i+1, rep.Pool)
	}
	t.Fatal("no stopped design was a parent")
}

type replayPool struct {
	PoolDigest string `json:"pool_digest"`
	Pool       []struct {
		DesignID string `json:"design_id"`
	} `json:"pool"`
}

// replayUntil is evoq replay's report of the first n results of the run.
// The store is open in the test's broker (readResults): it reads it there.
func replayUntil(t *testing.T, dir string, n int) replayPool {
	t.Helper()
	r := evoq(t, time.Minute, "replay", "--nats", openStore(t, dir).ClientURL(), "--run", "esr", "--until", fmt.Sprint(n), "--json")
	var rep replayPool
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &rep); err != nil {
		t.Fatalf("replay --until %d: %v\n%s\n%s", n, err, r.stdout, r.stderr)
	}
	return rep
}

// stoppedParents is the number of designs whose first parent ended
// stopped.
func stoppedParents(results []*schema.Result) int {
	// A design's first result is the one that counts: a design evaluated
	// twice (its worker killed) may have a stopped result after the ok one
	// that went into the pool.
	stopped := map[string]bool{}
	for _, r := range results {
		if _, seen := stopped[r.DesignID]; !seen {
			stopped[r.DesignID] = r.Status == schema.StatusStopped
		}
	}
	n := 0
	for _, r := range results {
		if len(r.Design.Parents) > 0 && stopped[r.Design.Parents[0]] && r.Design.Retry == 0 {
			n++
		}
	}
	return n
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// --early-stop none, given or left out, stops nothing: with learning
// curves reported, every design trains to its last step and its fitness
// is the curve's end; the run records no rule and its workers ask
// nothing.
func TestEarlyStopNone(t *testing.T) {
	t.Parallel()
	for _, given := range [][]string{nil, {"--early-stop", "none"}} {
		t.Run(fmt.Sprint(given), func(t *testing.T) {
			t.Parallel()
			const budget = 60
			args := append([]string{"--run", "esn", "--evaluator", "sim", "--sim-curve", "--sim-steps", "9", "--sim-mean", "0.02",
				"--slots", "4", "--budget", fmt.Sprint(budget), "--log-level", "debug"}, given...)
			dir := t.TempDir()
			r := evoq(t, 2*time.Minute, append([]string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json"}, args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, tail(r.stderr, 3000))
			}
			s := lastJSON(t, r.stdout)
			if s.Stopped != 0 || s.EarlyStop != nil || s.OK != budget {
				t.Fatalf("summary: %d ok, %d stopped, rule %+v; want %d ok and no rule", s.OK, s.Stopped, s.EarlyStop, budget)
			}
			if strings.Contains(r.stderr, "rung decision") {
				t.Error("a worker asked for a rung decision in a run without a rule")
			}
			for _, res := range readResults(t, dir, "esn") {
				if c := evaluators.SimCurve(res.Design.Genome, 9); res.Fitness != c[len(c)-1] {
					t.Errorf("%s: fitness %v, want the end of its curve %v", res.DesignID, res.Fitness, c[len(c)-1])
				}
			}
			if n := len(storedReports(t, dir, "esn")); n != budget*9 {
				t.Errorf("%d reports stored, want %d: curves are kept without a rule too", n, budget*9)
			}
		})
	}
}
