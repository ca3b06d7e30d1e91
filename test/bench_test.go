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

// One short iteration of every benchmark workload, with the Dask baseline
// where Debian's python3-distributed is installed: the bench code runs end
// to end. It times nothing: figures of a smoke run mean nothing.
func TestBenchSmoke(t *testing.T) {
	t.Parallel()
	args := []string{"bench", "--smoke", "--workload", "all", "--json"}
	dask := exec.Command("/usr/bin/python3", "-c", "import distributed").Run() == nil
	if dask {
		args = append(args, "--vs-dask")
	} else {
		t.Log("no Dask baseline: /usr/bin/python3 cannot import distributed (apt-get install python3-distributed)")
	}
	optuna := exec.Command("/usr/bin/python3", "-c", "import optuna").Run() == nil
	if !optuna {
		args = append(args, "--nb201-baselines=false", "--train20-baselines=false")
		t.Log("no nb201 and train20 baselines: /usr/bin/python3 cannot import optuna (apt-get install python3-optuna)")
	}
	torch := exec.Command("/usr/bin/python3", "-c", "import torch, sklearn").Run() == nil
	if !torch {
		args[3] = strings.Join(slices.DeleteFunc(bench.Names(), func(w string) bool { return w == "train20" }), ",")
		t.Log("no train20 workload: /usr/bin/python3 cannot import torch and sklearn (apt-get install python3-torch python3-sklearn)")
	}
	// train20's smoke run alone took nearly 4 minutes on a loaded 2-core
	// machine: 11 Python processes import torch.
	r := evoq(t, 8*time.Minute, args...)
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
			NB201   *nb201Smoke   `json:"nb201"`
			Preempt *preemptSmoke `json:"preempt"`
			Train20 *train20Smoke `json:"train20"`
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
		case "preempt":
			checkPreemptSmoke(t, row.Preempt)
		case "train20":
			checkTrain20Smoke(t, row.Train20, optuna)
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
	for _, w := range []string{"noop", "sim", "scale", "exascale", "memory", "replay", "nb201", "preempt", "train20"} {
		if w == "train20" && !torch {
			continue
		}
		if !got[w] {
			t.Errorf("no %s workload in the report", w)
		}
	}
	if !rep.Smoke {
		t.Error("a smoke run not marked as one")
	}
}

// preemptSmoke is what the smoke test reads of the preempt workload's
// figures.
type preemptSmoke struct {
	Seeds []struct {
		Runs []struct {
			Mode       string  `json:"mode"`
			OK         int     `json:"ok"`
			Unfinished int     `json:"unfinished"`
			Starts     int     `json:"worker_starts"`
			Resumed    int     `json:"resumed"`
			Retrained  int     `json:"retrained"`
			SlotS      float64 `json:"slot_s"`
		} `json:"runs"`
	} `json:"seeds"`
	Settings struct {
		Budget  int `json:"budget"`
		Workers int `json:"workers"`
	} `json:"settings"`
}

// checkPreemptSmoke checks the preempt workload's smoke figures: both
// runs finish their budget on workers started again at their walltimes,
// and only the run with progress checkpoints resumes designs.
func checkPreemptSmoke(t *testing.T, p *preemptSmoke) {
	t.Helper()
	if p == nil || len(p.Seeds) != 1 || len(p.Seeds[0].Runs) != 2 {
		t.Fatalf("preempt: %+v, want one seed of two runs", p)
	}
	for _, r := range p.Seeds[0].Runs {
		if r.OK+r.Unfinished != p.Settings.Budget || r.Starts <= p.Settings.Workers || r.SlotS <= 0 ||
			(r.Mode == "progress") != (r.Resumed > 0) {
			t.Errorf("preempt %s run: %+v, want the budget done on requeued workers, designs resumed only with progress", r.Mode, r)
		}
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

// train20Smoke is what the smoke test reads of the train20 workload's
// figures.
type train20Smoke struct {
	Seeds []struct {
		Full struct {
			OK    int     `json:"ok"`
			Best  float64 `json:"best"`
			SlotS float64 `json:"slot_s"`
		} `json:"full"`
		Runs []struct {
			Rule  string  `json:"rule"`
			Best  float64 `json:"best"`
			SlotS float64 `json:"slot_s"`
		} `json:"runs"`
	} `json:"seeds"`
}

// checkTrain20Smoke checks the train20 workload's smoke figures: one seed
// whose full run found an accuracy above guessing (1 in 20), and the asha
// and median runs and, where Optuna is installed, its three studies, each
// with an accuracy and slot-seconds spent.
func checkTrain20Smoke(t *testing.T, tr *train20Smoke, optuna bool) {
	t.Helper()
	if tr == nil || len(tr.Seeds) != 1 {
		t.Errorf("train20: figures %+v, want one seed", tr)
		return
	}
	sd := tr.Seeds[0]
	want := map[bool]int{true: 5, false: 2}[optuna]
	if sd.Full.OK == 0 || sd.Full.Best <= 0.05 || sd.Full.Best > 1 || sd.Full.SlotS <= 0 || len(sd.Runs) != want {
		t.Errorf("train20: full run %+v, %d runs beside it (want %d)", sd.Full, len(sd.Runs), want)
	}
	for _, r := range sd.Runs {
		if r.Best <= 0 || r.Best > 1 || r.SlotS <= 0 {
			t.Errorf("train20 %s: %+v", r.Rule, r)
		}
	}
}
