package test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// brokenGPU is the evaluator of a node whose GPU is broken: it fails at
// once, saying so on stderr.
const brokenGPU = `echo "RuntimeError: CUDA error: uncorrectable ECC error encountered" >&2; exit 1`

// TestBrokenNode runs a search with a healthy worker (4 slots) and a
// worker whose one slot fails every design at once, as a node with a
// broken GPU does. Its failures are retried on the healthy worker, the
// slot is quarantined within its first failures, its worker exits with
// code 4, and every design ends ok (at most 5 as error), counted once
// with every attempt kept in the stream. Once the controller is killed
// mid-run and restarted: the restarted controller finishes the run from
// the stream and the queue. Either way `evoq replay` rebuilds the
// controller's final pool.
func TestBrokenNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		restart bool
	}{{"steady", false}, {"controller restarted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testBrokenNode(t, tc.restart)
		})
	}
}

func testBrokenNode(t *testing.T, restart bool) {
	const run, budget = "broken", 200
	_, url := startBroker(t, t.TempDir())
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	ctlArgs := []string{"controller", "--nats", url, "--run", run, "--budget", strconv.Itoa(budget), "--init", "20",
		"--pool", "10", "--wait-slots", "5", "--json"}
	ctl := background(t, ctlArgs...)
	healthy := background(t, "worker", "--nats", url, "--run", run, "--id", "healthy", "--gpus", "none", "--slots", "4",
		"--evaluator", "sim", "--sim-mean", "0.3")
	broken := background(t, "worker", "--nats", url, "--run", run, "--id", "broken", "--gpus", "3",
		"--eval-cmd", brokenGPU)

	// evoq status shows the slot quarantined while the run is live.
	var st statusOut
	waitFor(t, 2*time.Minute, func() bool {
		if ctl.exited() {
			t.Fatalf("the controller ended before status showed the quarantine:\n%s", tail(ctl.stderr.String(), 4000))
		}
		var ok bool
		st, ok = status(t, url, run)
		return ok && st.worker("broken").State == "quarantined"
	})
	if st.Phase != schema.PhaseRunning && st.Phase != schema.PhaseDraining {
		t.Errorf("status showed the quarantine in phase %s, want the run live", st.Phase)
	}
	if w := st.worker("broken"); !slices.Equal(w.Quarantined, []int{0}) || w.Host != host {
		t.Errorf("status of the broken worker: %+v; want slot 0 quarantined, host %s", w, host)
	}
	if !hasProblem(st, "worker broken slot 0 on host "+host+" is quarantined", "GPU 3", "uncorrectable ECC error") {
		t.Errorf("status problems %q do not name the quarantined slot, its GPU and its error", st.Problems)
	}

	// The controller named the slot's worker, host and GPU by its third
	// failure: a warning with failures_in_a_row=3, the slot suspect when
	// no other slot had succeeded yet, else quarantined.
	first := waitLine(t, ctl, time.Minute, "level=warning", "worker=broken", "slot=0")
	for _, want := range []string{"host=" + host, "gpu=3", "failures_in_a_row=3", "uncorrectable ECC error"} {
		if !strings.Contains(first, want) {
			t.Errorf("the controller's first warning about the slot lacks %s: %s", want, first)
		}
	}
	waitLine(t, ctl, time.Minute, `msg="slot quarantined`, "worker=broken", "host="+host, "gpu=3", "advice=")

	if restart {
		// Killed as it quarantines the slot: retries of the broken slot's
		// designs are on the queue or running, its order to the broken
		// worker may not be sent yet. The lease of a dead controller of
		// this host is taken over at once; the quarantined slot no longer
		// counts among the 5 to wait for.
		if err := ctl.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = ctl.wait(t, 30*time.Second)
		ctlArgs[slices.Index(ctlArgs, "--wait-slots")+1] = "4"
		ctl = background(t, ctlArgs...)
	}

	// The broken worker leaves with exit code 4, saying why.
	werr := broken.wait(t, 2*time.Minute)
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 4 {
		t.Errorf("the broken worker exited with %v, want exit code 4\n%s", werr, tail(broken.stderr.String(), 3000))
	}
	if !hasLine(broken.stderr.String(), "every slot of this worker is quarantined", "host="+host, "gpu=3", "uncorrectable ECC error") {
		t.Errorf("the broken worker's log does not say why it left:\n%s", tail(broken.stderr.String(), 3000))
	}

	if err := ctl.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 4000))
	}
	if err := healthy.wait(t, time.Minute); err != nil {
		t.Errorf("the healthy worker: %v", err)
	}
	s := lastJSON(t, ctl.stderr.String())
	if s.Evaluations != budget || s.Error > 5 || s.OK != budget-s.Error {
		t.Errorf("evaluations %d, ok %d, error %d, timeout %d, lost %d; want %d, all ok but at most 5 errors",
			s.Evaluations, s.OK, s.Error, s.Timeout, s.Lost, budget)
	}
	if s.Retried == 0 || !slices.Equal(s.Quarantined, []string{"broken/0"}) {
		t.Errorf("summary: %d retried, quarantined %v; want the broken slot's failures retried and the slot quarantined", s.Retried, s.Quarantined)
	}
	if restart {
		if s.Replay == nil || s.Replay.Results == 0 {
			t.Errorf("the restarted controller replayed nothing: %+v", s.Replay)
		}
		if !hasLine(ctl.stderr.String(), `msg="slot quarantined by the run's earlier results"`, "worker=broken", "host="+host) {
			t.Errorf("the restarted controller did not warn of the slot quarantined before it started:\n%s", tail(ctl.stderr.String(), 3000))
		}
	}

	// Every attempt is in the export: a design that failed on the broken
	// worker and succeeded on the healthy one counts once, as ok.
	rows := exportRows(t, url, run)
	designs, retriedOK := map[uint64]int{}, 0
	bySeq := map[uint64][]exportRow{}
	for _, r := range rows {
		bySeq[r.Design.Seq] = append(bySeq[r.Design.Seq], r)
		if r.Counted {
			designs[r.Design.Seq]++
		}
	}
	for seq, rs := range bySeq {
		if designs[seq] != 1 {
			t.Errorf("design %d counted %d times", seq, designs[seq])
		}
		if len(rs) >= 2 && rs[0].Worker == "broken" && rs[0].Verdict == "retried" && rs[0].Status == schema.StatusError {
			last := rs[len(rs)-1]
			if last.Worker == "healthy" && last.Verdict == "counted" && last.Status == schema.StatusOK && last.Design.Retry > 0 &&
				slices.Contains(last.Design.AvoidWorkers, "broken") {
				retriedOK++
			}
		}
	}
	if len(designs) != budget || retriedOK == 0 {
		t.Errorf("%d designs counted; %d failed on the broken worker and counted ok after a retry on the healthy one; want %d and some",
			len(designs), retriedOK, budget)
	}

	rep := replayJSON(t, 0, "--nats", url, "--run", run)
	if rep.PoolDigest != s.PoolDigest || rep.Integrity != "ok" || rep.Evaluations != budget {
		t.Errorf("replay: digest %s, integrity %s, %d evaluations; the controller's final digest %s",
			rep.PoolDigest, rep.Integrity, rep.Evaluations, s.PoolDigest)
	}
	t.Logf("%d ok, %d error, %d attempts retried, %d designs failed on the broken slot and counted ok elsewhere; %d results stored",
		s.OK, s.Error, s.Retried, retriedOK, len(rows))
}

// statusOut is the part of `evoq status --json` the test reads.
type statusOut struct {
	Phase    schema.Phase   `json:"phase"`
	Workers  []statusWorker `json:"workers"`
	Problems []string       `json:"problems"`
}

type statusWorker struct {
	Worker      string `json:"worker"`
	Host        string `json:"host"`
	State       string `json:"state"`
	Quarantined []int  `json:"quarantined"`
}

func (s statusOut) worker(id string) statusWorker {
	for _, w := range s.Workers {
		if w.Worker == id {
			return w
		}
	}
	return statusWorker{}
}

func hasProblem(s statusOut, parts ...string) bool {
	return hasLine(strings.Join(s.Problems, "\n"), parts...)
}

// status is `evoq status --json` of run; false while the run is not on
// the broker yet.
func status(t *testing.T, url, run string) (statusOut, bool) {
	t.Helper()
	r := evoq(t, 30*time.Second, "status", "--nats", url, "--run", run, "--json")
	if r.code != 0 {
		if strings.Contains(r.stderr, "no such run") {
			return statusOut{}, false
		}
		t.Fatalf("status: exit %d\n%s", r.code, r.stderr)
	}
	var s statusOut
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return s, true
}

// exportRow is one line of `evoq export --format jsonl`.
type exportRow struct {
	Counted bool          `json:"counted"`
	Verdict string        `json:"verdict"`
	Status  schema.Status `json:"status"`
	Worker  string        `json:"worker"`
	Design  schema.Design `json:"design"`
}

func exportRows(t *testing.T, url, run string) []exportRow {
	t.Helper()
	r := evoq(t, 30*time.Second, "export", "--nats", url, "--run", run, "--format", "jsonl")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	var rows []exportRow
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var row exportRow
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("export row %q: %v", sc.Text(), err)
		}
		rows = append(rows, row)
	}
	return rows
}
