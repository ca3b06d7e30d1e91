package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/pareto"
)

// A search of the built-in zdt1 problem, run by evoq run with real worker
// processes: its summary has the front and its hypervolume from the
// default reference point (1.1, 1.1), with the ratio to the true front;
// export marks exactly the front's designs; replay rebuilds the same
// front. A metric objective an evaluator does not report ends the design
// as an error naming it.
func TestParetoZDT(t *testing.T) {
	t.Parallel()
	sum, dir := runJSON(t, 3*time.Minute, "--run", "z1", "--evaluator", "zdt1", "--budget", "3000", "--init", "100", "--pool", "60",
		"--slots", "4", "--workers", "2", "--crossover", "0.9")
	if sum.Evaluations != 3000 || sum.OK != 3000 || sum.Pareto == nil {
		t.Fatalf("zdt1: %d evaluations, %d ok, front %v", sum.Evaluations, sum.OK, sum.Pareto)
	}
	p := sum.Pareto
	if !slices.Equal(p.Objectives, []string{"f1:min", "f2:min"}) || !slices.Equal(p.HVRef, []float64{1.1, 1.1}) {
		t.Errorf("objectives %v, reference point %v; want zdt1's f1:min,f2:min and 1.1,1.1", p.Objectives, p.HVRef)
	}
	if len(p.Front) < 10 || len(p.Front) > 60 || p.Hypervolume == nil || p.HypervolumeRatio == nil {
		t.Fatalf("front of %d designs, hypervolume %v, ratio %v", len(p.Front), p.Hypervolume, p.HypervolumeRatio)
	}
	// The front's own figures: mutually non-dominated, and its hypervolume
	// is the summary's.
	var pts []pareto.Point
	for _, m := range p.Front {
		pts = append(pts, pareto.Point{Obj: []float64{m.Objectives["f1"], m.Objectives["f2"]}})
		if m.Fitness != -(m.Objectives["f1"] + m.Objectives["f2"]) {
			t.Errorf("%s: fitness %v, objectives %v; zdt's fitness is -(f1+f2)", m.ID, m.Fitness, m.Objectives)
		}
	}
	for i := range pts {
		for j := range pts {
			if pareto.Dominates(pts[i], pts[j]) {
				t.Errorf("front member %s dominates front member %s", p.Front[i].ID, p.Front[j].ID)
			}
		}
	}
	if hv := pareto.Hypervolume(pts, []float64{1.1, 1.1}); math.Abs(hv-*p.Hypervolume) > 1e-12 {
		t.Errorf("the front's hypervolume is %v; the summary says %v", hv, *p.Hypervolume)
	}
	if want := *p.Hypervolume / pareto.TrueHypervolume("zdt1", 1.1); math.Abs(*p.HypervolumeRatio-want) > 1e-5 || want <= 0.3 {
		t.Errorf("ratio %v, want %v (and well above the random designs' 0)", *p.HypervolumeRatio, want)
	}

	// export marks the front.
	r := evoq(t, time.Minute, "export", "--dir", dir, "--run", "z1", "--format", "csv")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	_, rows := readCSVRows(t, r.stdout)
	var marked []string
	for _, row := range rows {
		if row["front"] == "true" {
			marked = append(marked, row["design_id"])
		}
		if row["front"] != "true" && row["front"] != "false" {
			t.Fatalf("row %s: front %q", row["design_id"], row["front"])
		}
	}
	var ids []string
	for _, m := range p.Front {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	slices.Sort(marked)
	if !slices.Equal(ids, marked) {
		t.Errorf("export marks %d designs as the front; the summary's front has %d:\n%v\n%v", len(marked), len(ids), marked, ids)
	}

	// replay rebuilds it.
	r = evoq(t, time.Minute, "replay", "--dir", dir, "--run", "z1", "--json")
	var rep struct {
		PoolDigest  string  `json:"pool_digest"`
		FrontDigest string  `json:"front_digest"`
		Hypervolume float64 `json:"hypervolume"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &rep); err != nil {
		t.Fatalf("replay --json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	if rep.PoolDigest != sum.PoolDigest || rep.FrontDigest != p.FrontDigest || rep.Hypervolume != *p.Hypervolume {
		t.Errorf("replay: pool %s front %s hypervolume %v; the run: %s %s %v", rep.PoolDigest, rep.FrontDigest, rep.Hypervolume,
			sum.PoolDigest, p.FrontDigest, *p.Hypervolume)
	}

	// A constraint: the front keeps to it, and the summary says it.
	con, _ := runJSON(t, 2*time.Minute, "--run", "zc", "--evaluator", "zdt1", "--constraint", "f1>=0.5", "--budget", "1000",
		"--init", "50", "--pool", "30", "--slots", "2")
	if con.Pareto == nil || !slices.Equal(con.Constraints, []string{"f1>=0.5"}) || len(con.Front) == 0 {
		t.Fatalf("constrained run: %+v", con.Pareto)
	}
	for _, m := range con.Front {
		if m.Objectives["f1"] < 0.5 {
			t.Errorf("front member %s has f1 %v, outside the constraint f1>=0.5", m.ID, m.Objectives["f1"])
		}
	}

	// An objective no result carries: every design ends in error, which
	// names the key, and the run fails fast rather than search blind.
	miss := evoq(t, 2*time.Minute, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--run", "zm", "--evaluator", "zdt1",
		"--objectives", "f1:min,params:min", "--budget", "200", "--slots", "2")
	if miss.code == 0 || !strings.Contains(miss.stderr, `no metric \"params\"`) && !strings.Contains(miss.stderr, `no metric "params"`) {
		t.Errorf("an objective no result has: exit %d; want a failed run naming the metric\n%s", miss.code, tail(miss.stderr, 3000))
	}
}

var frontDigestRE = regexp.MustCompile(`evaluations=(\d+) .*front_digest=(\w+) .*pool_digest=(\w+)`)

// A controller killed mid-run rebuilds from the results stream the same
// front it had (front and pool digests), finishes the run, and evoq
// replay reaches its final digests. The objectives and operators come
// from the run's record; others are refused.
func TestParetoRestart(t *testing.T) {
	t.Parallel()
	dir, port := t.TempDir(), freePort(t)
	sp, err := evaluators.ZDTSpace("zdt1")
	if err != nil {
		t.Fatal(err)
	}
	spaceFile := filepath.Join(t.TempDir(), "zdt1.yaml")
	if err := os.WriteFile(spaceFile, sp.Source(), 0o644); err != nil {
		t.Fatal(err)
	}
	const budget = 8000
	listen, url := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("nats://127.0.0.1:%d", port)
	ctlArgs := []string{"controller", "--dir", dir, "--listen", listen, "--run", "zr", "--progress", "100ms"}
	first := background(t, append(ctlArgs, "--config", spaceFile, "--budget", fmt.Sprint(budget), "--init", "50", "--pool", "40",
		"--objectives", "f1:min,f2:min", "--hv-ref", "1.1,1.1", "--crossover", "0.8", "--mutation-rate", "0.05")...)
	workerArgs := []string{"worker", "--nats", url, "--run", "zr", "--evaluator", "zdt1", "--slots", "4", "--gpus", "none"}
	w1 := background(t, workerArgs...)
	lines := func(log string) [][]string { return frontDigestRE.FindAllStringSubmatch(log, -1) }
	waitFor(t, 2*time.Minute, func() bool {
		p := lines(first.stderr.String())
		return len(p) > 0 && atoi(p[len(p)-1][1]) >= 1500
	})
	_ = w1.cmd.Process.Kill()
	_ = w1.wait(t, 10*time.Second)
	// Nothing is evaluated now: once three progress lines in a row agree,
	// the last digests are the controller's state.
	seen := len(lines(first.stderr.String()))
	waitFor(t, 30*time.Second, func() bool {
		p := lines(first.stderr.String())
		n := len(p)
		return n >= seen+3 && slicesEqual(p[n-1][1:], p[n-2][1:]) && slicesEqual(p[n-2][1:], p[n-3][1:])
	})
	_ = first.cmd.Process.Kill()
	_ = first.wait(t, 10*time.Second)
	p := lines(first.stderr.String())
	before := p[len(p)-1]
	if atoi(before[1]) >= budget {
		t.Fatalf("the run ended (%s evaluations) before the controller was killed", before[1])
	}

	for _, conflict := range [][]string{{"--objectives", "f1:min"}, {"--crossover", "0.5"}, {"--mutation-rate", "0"}} {
		c := evoq(t, time.Minute, append(ctlArgs, conflict...)...)
		if c.code != 2 || !strings.Contains(c.stderr, conflict[0]) || !strings.Contains(c.stderr, "the run records") {
			t.Errorf("restart with %v: exit %d, want 2 naming %s and the record\n%s", conflict, c.code, conflict[0], tail(c.stderr, 2000))
		}
	}

	var stdout bytes.Buffer
	second := newProc(&stdout, append(ctlArgs, "--json")...)
	second.start(t, nil)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(second.stderr.String(), "resumed run from its results stream") })
	log := second.stderr.String()
	resumed := lineWith(log, "resumed run from its results stream")
	if !strings.Contains(resumed, "front_digest="+before[2]) || !strings.Contains(resumed, "pool_digest="+before[3]) {
		t.Errorf("before the kill, after %s evaluations: front %s, pool %s; the restart logged:\n%s", before[1], before[2], before[3], resumed)
	}
	taken := lineWith(log, "continuing the run")
	for _, want := range []string{"objectives=f1:min,f2:min", "crossover=0.8", "mutation_rate=0.05"} {
		if !strings.Contains(taken, want) {
			t.Errorf("the restart did not take %s from the record:\n%s", want, taken)
		}
	}
	background(t, workerArgs...)
	if err := second.wait(t, 4*time.Minute); err != nil {
		t.Fatalf("restarted controller: %v\n%s", err, tail(second.stderr.String(), 3000))
	}
	s := lastJSON(t, stdout.String())
	if s.Evaluations != budget || s.Pareto == nil || s.Hypervolume == nil {
		t.Fatalf("the restarted run ended with %d evaluations, front %+v", s.Evaluations, s.Pareto)
	}
	r := evoq(t, time.Minute, "replay", "--dir", dir, "--run", "zr", "--json")
	var rep struct {
		PoolDigest  string `json:"pool_digest"`
		FrontDigest string `json:"front_digest"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &rep); err != nil {
		t.Fatalf("replay --json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	if rep.PoolDigest != s.PoolDigest || rep.FrontDigest != s.FrontDigest {
		t.Errorf("replay: pool %s, front %s; the controller: %s, %s", rep.PoolDigest, rep.FrontDigest, s.PoolDigest, s.FrontDigest)
	}
	checkDesigns(t, readResults(t, dir, "zr"), budget)
}
