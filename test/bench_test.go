package test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/bench"
)

// One short iteration of every benchmark workload (but two, below), with
// the Dask baseline where Debian's python3-distributed is installed: the
// bench code runs end to end. It times nothing: figures of a smoke run
// mean nothing.
func TestBenchSmoke(t *testing.T) {
	t.Parallel()
	args := []string{"bench", "--smoke", "--workload", "", "--json"}
	dask := exec.Command("/usr/bin/python3", "-c", "import distributed").Run() == nil
	if dask {
		args = append(args, "--vs-dask")
	} else {
		t.Log("no Dask baseline: /usr/bin/python3 cannot import distributed (apt-get install python3-distributed)")
	}
	optuna := exec.Command("/usr/bin/python3", "-c", "import optuna").Run() == nil
	if !optuna {
		args = append(args, "--nb201-baselines=false")
		t.Log("no nb201 baselines: /usr/bin/python3 cannot import optuna (apt-get install python3-optuna)")
	}
	// train20 and preempt have smoke tests of their own in the bench
	// package (TestTrain20Smoke, TestPreemptSmoke), which check more of
	// their figures: run here too, they would double the minutes the
	// suite spends on them (11 Python processes import torch in train20's).
	args[3] = strings.Join(slices.DeleteFunc(bench.Names(), func(w string) bool { return w == "train20" || w == "preempt" }), ",")
	r := evoq(t, 5*time.Minute, args...)
	if r.code != 0 {
		t.Fatalf("bench: exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	var rep struct {
		Smoke bool `json:"smoke"`
		Rows  []struct {
			Workload string `json:"workload"`
			Evoq     *struct {
				Evaluations int `json:"evaluations"`
				Slots       int `json:"slots"`
				SlotsUsed   int `json:"slots_used"`
			} `json:"evoq"`
			Dask   map[string]any `json:"dask"`
			Memory *struct {
				Evaluations int     `json:"evaluations"`
				RSSFirstMB  float64 `json:"rss_first_mb"`
				RSSEndMB    float64 `json:"rss_end_mb"`
			} `json:"memory"`
			Replay *struct {
				Results int `json:"results"`
			} `json:"replay"`
			Bound *struct {
				Evoq  []float64 `json:"evoq_evals_per_s"`
				Loop  []float64 `json:"loop_evals_per_s"`
				Share float64   `json:"share"`
			} `json:"bound"`
			Scale *struct {
				Slots       int       `json:"slots"`
				SlotsUsed   int       `json:"slots_used"`
				Budget      int       `json:"budget"`
				Evaluations int       `json:"evaluations"`
				CPU         float64   `json:"controller_cpu_s"`
				CtlRSS      float64   `json:"controller_rss_peak_mb"`
				BrokerRSS   float64   `json:"broker_rss_peak_mb"`
				StoreMB     float64   `json:"store_mb"`
				Status      []float64 `json:"status_s"`
			} `json:"scale"`
			NB201 *nb201Smoke `json:"nb201"`
		} `json:"workloads"`
	}
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, r.stdout)
	}
	got := map[string]bool{}
	memoryEvaluations := 0
	for _, row := range rep.Rows {
		if row.Memory != nil {
			memoryEvaluations = row.Memory.Evaluations
		}
	}
	for _, row := range rep.Rows {
		got[row.Workload] = true
		switch row.Workload {
		case "noop", "sim", "scale":
			if row.Evoq == nil || row.Evoq.Evaluations == 0 || row.Evoq.SlotsUsed != row.Evoq.Slots {
				t.Errorf("%s: evoq figures %+v", row.Workload, row.Evoq)
			}
			if b := row.Bound; row.Workload == "noop" && (b == nil || len(b.Loop) != 1 || b.Loop[0] <= 0 || b.Share <= 0) {
				t.Errorf("noop: plain loop %+v", b)
			}
			if dask && row.Workload != "scale" {
				if n, _ := row.Dask["evaluations"].(float64); n == 0 {
					t.Errorf("%s: Dask figures %v", row.Workload, row.Dask)
				}
			}
		case "exascale":
			if sc := row.Scale; sc == nil || sc.Evaluations < sc.Budget || sc.SlotsUsed != sc.Slots || sc.CPU <= 0 ||
				sc.CtlRSS <= 0 || sc.BrokerRSS <= 0 || sc.StoreMB <= 0 || len(sc.Status) == 0 {
				t.Errorf("exascale: %+v, want the budget evaluated on every slot, sizes and evoq status timed", sc)
			}
		case "nb201":
			checkNB201Smoke(t, row.NB201, optuna)
		case "memory":
			if row.Memory == nil || row.Memory.RSSFirstMB <= 0 || row.Memory.RSSEndMB <= 0 {
				t.Errorf("memory: %+v", row.Memory)
			}
		case "replay":
			if row.Replay == nil || memoryEvaluations == 0 || row.Replay.Results != memoryEvaluations {
				t.Errorf("replay: %+v, want every result of the memory workload", row.Replay)
			}
		}
	}
	for _, w := range []string{"noop", "sim", "scale", "exascale", "memory", "replay", "nb201"} {
		if !got[w] {
			t.Errorf("no %s workload in the report", w)
		}
	}
	if !rep.Smoke {
		t.Error("a smoke run not marked as one")
	}
}

// nb201Smoke is what the smoke test reads of the nb201 workload's figures.
type nb201Smoke struct {
	Optimum float64 `json:"optimum"`
	Tables  []struct {
		Noise    float64 `json:"noise"`
		Searches []struct {
			Name string      `json:"name"`
			Best [][]float64 `json:"best"`
		} `json:"searches"`
	} `json:"tables"`
}

// checkNB201Smoke checks the nb201 workload's smoke figures: a table
// without noise and one with, each with evoq and, where Optuna is
// installed, its two baselines, every figure an accuracy of the table
// (above 0, at most the optimum); without noise, a larger budget never
// returns a worse design.
func checkNB201Smoke(t *testing.T, n *nb201Smoke, optuna bool) {
	t.Helper()
	if n == nil {
		t.Error("nb201: no figures")
		return
	}
	want := map[bool]int{true: 3, false: 1}[optuna]
	if n.Optimum < 47.31 || n.Optimum > 47.32 || len(n.Tables) != 2 || n.Tables[0].Noise != 0 || n.Tables[1].Noise <= 0 {
		t.Errorf("nb201: optimum %v, tables %+v", n.Optimum, n.Tables)
		return
	}
	for _, tb := range n.Tables {
		if len(tb.Searches) != want {
			t.Errorf("nb201 noise %g: %d searches, want %d: %+v", tb.Noise, len(tb.Searches), want, tb.Searches)
		}
		for _, s := range tb.Searches {
			if len(s.Best) != 1 {
				t.Errorf("nb201 noise %g %s: %d seeds, want 1", tb.Noise, s.Name, len(s.Best))
				continue
			}
			row := s.Best[0]
			if len(row) != 2 || row[0] <= 0 || row[1] <= 0 || max(row[0], row[1]) > n.Optimum || (tb.Noise == 0 && row[1] < row[0]) {
				t.Errorf("nb201 noise %g %s: best %v, want two accuracies at most %v (without noise, the second no lower)", tb.Noise, s.Name, row, n.Optimum)
			}
		}
	}
}
