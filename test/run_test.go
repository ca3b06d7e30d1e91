package test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// slotOf names a worker slot.
func slotOf(r *schema.Result) string { return fmt.Sprintf("%s/%d", r.Worker, r.Slot) }

// countBy counts results per status.
func countBy(results []*schema.Result) map[schema.Status]int {
	m := map[schema.Status]int{}
	for _, r := range results {
		m[r.Status]++
	}
	return m
}

// The incident: with --init 5 and 24 slots, every slot must get a design
// long before the initial population is evaluated.
func TestEverySlotBusyWhenInitBelowSlots(t *testing.T) {
	t.Parallel()
	const slots = 24
	s, dir := runJSON(t, 2*time.Minute, "--evaluator", "sim", "--sim-mean", "1", "--slots", fmt.Sprint(slots),
		"--workers", "2", "--init", "5", "--pool", "5", "--budget", "60", "--run", "busy")
	if s.Evaluations != 60 || s.SlotsUsed != slots || s.Slots != slots {
		t.Fatalf("evaluations %d slots %d slots_used %d, want 60, %d, %d", s.Evaluations, s.Slots, s.SlotsUsed, slots, slots)
	}
	results := readResults(t, dir, "busy")
	stops := make([]time.Time, 0, len(results))
	for _, r := range results {
		stops = append(stops, r.Stop)
	}
	sort.Slice(stops, func(i, j int) bool { return stops[i].Before(stops[j]) })
	initDone := stops[4] // the fifth result: the initial population is evaluated
	started := map[string]bool{}
	for _, r := range results {
		if r.Start.Before(initDone) {
			started[slotOf(r)] = true
		}
	}
	if len(started) != slots {
		t.Fatalf("%d of %d slots started a design before the first 5 results were in; in-flight work is bounded by --init", len(started), slots)
	}
}

// An infeasible design returns at once and its slot takes the next design
// at once, not after some other evaluation finishes.
func TestInfeasibleFreesSlotAtOnce(t *testing.T) {
	t.Parallel()
	s, dir := runJSON(t, 2*time.Minute, "--evaluator", "sim", "--sim-mean", "1", "--sim-fail", "0.5",
		"--slots", "4", "--init", "4", "--pool", "4", "--budget", "40", "--run", "infeasible")
	if s.Infeasible < 5 {
		t.Fatalf("only %d infeasible designs; the test needs some", s.Infeasible)
	}
	results := readResults(t, dir, "infeasible")
	bySlot := map[string][]*schema.Result{}
	for _, r := range results {
		bySlot[slotOf(r)] = append(bySlot[slotOf(r)], r)
	}
	checked := 0
	for slot, rs := range bySlot {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
		for i := 0; i+1 < len(rs); i++ {
			if rs[i].Status != schema.StatusInfeasible {
				continue
			}
			checked++
			// Evaluations take ~1 s here; a slot that waited for anything
			// but the queue would idle for a large part of that.
			if gap := rs[i+1].Start.Sub(rs[i].Stop); gap > 300*time.Millisecond {
				t.Errorf("slot %s idled %s after infeasible design %s", slot, gap, rs[i].DesignID)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no infeasible design was followed by another on its slot")
	}
}

// The external-command evaluator: good, infeasible, failing and
// garbage-printing designs each end in their own terminal result.
func TestCommandEvaluator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	space := filepath.Join(dir, "space.yaml")
	script := filepath.Join(dir, "eval.sh")
	write(t, space, "name: tiny\nparams:\n  x: {type: float, min: 0, max: 1}\n  n: {type: int, min: 1, max: 9}\n")
	write(t, script, `#!/bin/sh
input=$(cat)
case "$input" in *"\"id\":\"$EVOQ_DESIGN_ID\""*) ;; *) echo "design JSON on stdin lacks its id" >&2; exit 9;; esac
seq=${EVOQ_DESIGN_ID##*-}
case $((seq % 5)) in
  0) echo "some progress"; echo "boom: CUDA out of memory" >&2; exit 3;;
  1) echo "this is not json";;
  2) echo '{"infeasible": "too many parameters"}';;
  *) echo "epoch 1"; echo "{\"fitness\": 0.$seq, \"metrics\": {\"slot\": $EVOQ_SLOT, \"attempt\": $EVOQ_ATTEMPT, \"run\": \"$EVOQ_RUN\"}}";;
esac
`)
	// Two designs in five fail by design, not by slot: no slot is to be
	// quarantined for them (each is retried, and fails again).
	s, store := runJSON(t, 2*time.Minute, "--eval-cmd", "sh "+script, "--config", space, "--slots", "3",
		"--init", "5", "--pool", "3", "--budget", "30", "--run", "cmd", "--quarantine-after", "0")
	if s.Evaluations != 30 || s.Error != 12 || s.Infeasible != 6 || s.OK != 12 {
		t.Fatalf("got %d evaluations: %d ok, %d infeasible, %d error; want 30: 12, 6, 12", s.Evaluations, s.OK, s.Infeasible, s.Error)
	}
	for _, r := range readResults(t, store, "cmd") {
		checkCommandResult(t, r)
	}
	// evoq run keeps every evaluation's whole output under --dir/eval-logs.
	for file, want := range map[string]string{"cmd-1-1.out": "this is not json", "cmd-5-1.err": "boom: CUDA out of memory",
		"cmd-5-1.out": "some progress"} {
		b, err := os.ReadFile(filepath.Join(store, "eval-logs", "cmd", file))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("eval-logs/cmd/%s: %v, %q; want it to hold %q", file, err, b, want)
		}
	}
}

// checkCommandResult checks one result of the script in TestCommandEvaluator.
func checkCommandResult(t *testing.T, r *schema.Result) {
	t.Helper()
	switch seq := r.Design.Seq; {
	case seq%5 == 0:
		if r.Status != schema.StatusError || !strings.Contains(r.Error, "exit status 3") || !strings.Contains(r.Error, "boom: CUDA out of memory") {
			t.Errorf("%s: want an error with the exit status and stderr tail, got %s %q", r.DesignID, r.Status, r.Error)
		}
	case seq%5 == 1:
		if r.Status != schema.StatusError || !strings.Contains(r.Error, "this is not json") {
			t.Errorf("%s: want an error quoting the garbage line, got %s %q", r.DesignID, r.Status, r.Error)
		}
	case seq%5 == 2:
		if r.Status != schema.StatusInfeasible || r.Error != "too many parameters" {
			t.Errorf("%s: want infeasible with its reason, got %s %q", r.DesignID, r.Status, r.Error)
		}
	default:
		want := fmt.Sprintf("0.%d", seq)
		if r.Status != schema.StatusOK || fmt.Sprint(r.Fitness) != want || r.Metrics["run"] != "cmd" ||
			fmt.Sprint(r.Metrics["slot"]) != fmt.Sprint(r.Slot) || fmt.Sprint(r.Metrics["attempt"]) != "1" {
			t.Errorf("%s: want ok fitness %s with metrics echoing run, slot %d and attempt 1, got %s %v %v", r.DesignID, want, r.Slot, r.Status, r.Fitness, r.Metrics)
		}
	}
}

// Replace-worst keeps the fittest --pool designs, replace-oldest the latest;
// replaying the stored results rebuilds exactly the live pool.
func TestReplacePolicies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		replace runstate.Replace
		expect  func([]runstate.Member, int) []runstate.Member
	}{
		{runstate.ReplaceWorst, fittest},
		{runstate.ReplaceOldest, latest},
	} {
		t.Run(string(tc.replace), func(t *testing.T) {
			t.Parallel()
			run := "replace-" + string(tc.replace)
			s, dir := runJSON(t, 2*time.Minute, "--evaluator", "sim", "--sim-mean", "0.005", "--sim-fail", "0.2",
				"--slots", "4", "--init", "10", "--pool", "5", "--budget", "150", "--replace", string(tc.replace), "--run", run)
			results := readResults(t, dir, run)
			f := fold(results, run, 150, 10, 5, tc.replace)
			if f.Terminal() != 150 || f.Pool().Digest() != s.PoolDigest {
				t.Fatalf("replay: %d results, digest %s; live run: 150, %s", f.Terminal(), f.Pool().Digest(), s.PoolDigest)
			}
			want := tc.expect(okMembers(results), 5)
			if got := f.Pool().Members(); !sameMembers(got, want) {
				t.Fatalf("pool %v, want %v", ids(got), ids(want))
			}
		})
	}
}

// okMembers are the ok results as pool candidates, in stream order, once
// per design.
func okMembers(results []*schema.Result) []runstate.Member {
	seen := map[string]bool{}
	var ms []runstate.Member
	for _, r := range results {
		if seen[r.DesignID] {
			continue
		}
		seen[r.DesignID] = true
		if r.Status == schema.StatusOK {
			ms = append(ms, runstate.Member{Design: r.Design, Fitness: r.Fitness})
		}
	}
	return ms
}

// fittest is what replace-worst keeps: the n best, a later one winning a
// tie, in arrival order.
func fittest(ms []runstate.Member, n int) []runstate.Member {
	idx := make([]int, len(ms))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		if ms[idx[a]].Fitness != ms[idx[b]].Fitness {
			return ms[idx[a]].Fitness > ms[idx[b]].Fitness
		}
		return idx[a] > idx[b]
	})
	keep := idx[:min(n, len(idx))]
	sort.Ints(keep)
	out := make([]runstate.Member, len(keep))
	for i, k := range keep {
		out[i] = ms[k]
	}
	return out
}

// latest is what replace-oldest keeps: the last n.
func latest(ms []runstate.Member, n int) []runstate.Member { return ms[max(0, len(ms)-n):] }

func sameMembers(a, b []runstate.Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Design.ID != b[i].Design.ID || a[i].Fitness != b[i].Fitness {
			return false
		}
	}
	return true
}

func ids(ms []runstate.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%s:%.4f", m.Design.ID, m.Fitness)
	}
	return out
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// A done run leaves nothing unacked on its work queue: a worker that
// leaves when the run is done still waits for the confirmation of the
// result it is storing, and acks its design. An unacked design would be
// evaluated again when the run is continued. The run ends as its last
// result is stored, so it is run a few times: a lost ack showed in about
// two runs of five.
func TestDoneRunAckedAll(t *testing.T) {
	t.Parallel()
	for i := range 4 {
		run := fmt.Sprintf("acked%d", i)
		_, dir := runJSON(t, 2*time.Minute, "--run", run, "--evaluator", "sim", "--sim-mean", "0.004", "--workers", "2",
			"--slots", "4", "--gpus", "none", "--budget", "300")
		ctx := testutil.Context(t, 10*time.Second)
		c, err := openStore(t, dir).JS.Consumer(ctx, schema.DesignStream, schema.ConsumerName(run))
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			t.Fatalf("run %d: %d designs unacked, %d queued after the run was done", i+1, info.NumAckPending, info.NumPending)
		}
	}
}
