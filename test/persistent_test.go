package test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A persistent evaluator process that dies hands its design back; the
// design is evaluated again (attempt 2) by a fresh process, and every
// other design is served by the long-lived process of its slot.
func TestPersistentEvaluatorRestart(t *testing.T) {
	t.Parallel()
	const run, budget = "persist", 30
	script := filepath.Join(t.TempDir(), "eval.sh")
	write(t, script, `while IFS= read -r line; do
  seq=$(printf '%s\n' "$line" | sed -n 's/.*"seq":\([0-9]*\).*/\1/p')
  case "$line" in *'"attempt":1}'*) [ "$seq" = 7 ] && exit 3 ;; esac
  printf '{"fitness": 0.%s, "metrics": {"pid": %s, "seq": %s}}\n' "$seq" "$$" "$seq"
done
`)
	dir := t.TempDir()
	args := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--run", run, "--eval-cmd", "sh " + script,
		"--persistent", "--slots", "2", "--budget", fmt.Sprint(budget), "--init", "10", "--pool", "5"}
	r := evoq(t, time.Minute, args...)
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, tail(r.stderr, 3000))
	}
	if s := lastJSON(t, r.stdout); s.Evaluations != budget || s.OK != budget {
		t.Fatalf("evaluations %d, ok %d; want %d, %d", s.Evaluations, s.OK, budget, budget)
	}
	if !hasLine(r.stderr, "design handed back", run+"-7", "exit status 3") {
		t.Errorf("no log line says design 7's evaluator died with exit status 3:\n%s", tail(r.stderr, 3000))
	}
	results := readResults(t, dir, run)
	checkOneResultEach(t, results, budget)
	perPid := map[string]int{}
	slotPids := map[int]map[string]bool{}
	for _, res := range results {
		pid, seq := fmt.Sprint(res.Metrics["pid"]), fmt.Sprint(res.Metrics["seq"])
		if res.Status != schema.StatusOK || seq != fmt.Sprint(res.Design.Seq) || res.Fitness != mustFloat(t, "0."+seq) {
			t.Errorf("%s: %s, fitness %v, metrics %v; want ok with its own seq", res.DesignID, res.Status, res.Fitness, res.Metrics)
		}
		wantAttempt := 1
		if res.Design.Seq == 7 {
			wantAttempt = 2
		}
		if res.Attempt != wantAttempt {
			t.Errorf("%s: attempt %d, want %d", res.DesignID, res.Attempt, wantAttempt)
		}
		perPid[pid]++
		if slotPids[res.Slot] == nil {
			slotPids[res.Slot] = map[string]bool{}
		}
		slotPids[res.Slot][pid] = true
	}
	// Two slots' processes and the one started after design 7's died.
	if len(perPid) != 3 {
		t.Errorf("designs by evaluator pid: %v; want 3 processes", perPid)
	}
	if n := len(slotPids[0]) + len(slotPids[1]); len(slotPids) != 2 || n != 3 {
		t.Errorf("evaluator pids by slot: %v; want one slot with 1 process, the other with 2", slotPids)
	}
	t.Logf("designs by evaluator pid: %v", perPid)
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
