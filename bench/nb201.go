package bench

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/nb201"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// The nb201 workload runs evoq as a user would on a real architecture
// landscape: the built-in nb201 evaluator (the NAS-Bench-201 ImageNet16-
// 120 test accuracies of all 15,625 cells, package nb201) with evoq's
// defaults, beside Optuna's TPE sampler and random search (Optuna's
// RandomSampler, nb201_baseline.py) on the same table, seeds 1..10. Each
// search runs to the largest budget once; its figure at a budget is the
// true accuracy of the design it would return after that many
// evaluations, the one with the best observed fitness. Without noise the
// observed fitness is the table's accuracy; with noise (--nb201-noise),
// a design's observation differs from its cell's accuracy as a
// retraining would, and a search can be misled into returning a cell that
// was lucky once.
//
// evoq's figures come from its results stream, read back from its store
// and folded in stream order by the fold the controller uses; the fold's
// best at the end must equal the run's summary's.

//go:embed nb201_baseline.py
var nb201Baseline []byte

// NB201Settings are the nb201 workload's runs.
type NB201Settings struct {
	Slots   int `json:"slots"`
	Workers int `json:"workers"`
	// Budgets are the evaluations the figures are taken at; each search
	// runs to the largest.
	Budgets []int `json:"budgets"`
	Seeds   int   `json:"seeds"`
	// Noises are the standard deviations of the observation noise, each
	// a table of its own; the targets are judged on the first, 0.
	Noises []float64 `json:"noises"`
	// Args are flags added to every evoq run (Config.NB201Args): the
	// candidate settings a comparison measures. None: evoq's defaults.
	Args []string `json:"args,omitempty"`
	// Baselines says whether the Optuna baselines ran.
	Baselines bool `json:"baselines"`
}

// The nb201 workload's targets: at the last budget, every seed within
// nb201Within of the optimum and at least nb201AtOptimum of 10 at it; at
// the first, a median at least TPE's and a worst seed at least random
// search's median.
const (
	nb201Within    = 0.1
	nb201AtOptimum = 0.8
)

// nb201Settings are the nb201 workload's runs, full or smoke: 8 slots in
// one worker process (a node of 8 GPUs; the lookups return at once, so
// what the slots change is how many designs are in flight when one is
// made), 100 and 300 evaluations, 10 seeds, without noise and with noise
// of 0.5 accuracy points, about the spread of NAS-Bench-201's own three
// trainings of a good ImageNet16-120 cell. The smoke run is one seed at 20
// and 50 evaluations.
func nb201Settings(cfg Config) NB201Settings {
	s := NB201Settings{Slots: 8, Workers: 1, Budgets: []int{100, 300}, Seeds: 10, Noises: []float64{0, 0.5},
		Args: cfg.NB201Args, Baselines: !cfg.NB201NoBaselines}
	if cfg.Smoke {
		s.Budgets, s.Seeds = []int{20, 50}, 1
	}
	if cfg.Seeds > 0 {
		s.Seeds = cfg.Seeds
	}
	return s
}

func (s NB201Settings) last() int { return s.Budgets[len(s.Budgets)-1] }

// args are the `evoq run` flags of seed's run at noise: no search
// setting, so that the run has evoq's defaults, then Args.
func (s NB201Settings) args(noise float64, seed int) []string {
	a := []string{"--run", nb201RunID(noise, seed), "--seed", strconv.Itoa(seed), "--evaluator", schema.EvaluatorNB201,
		"--slots", strconv.Itoa(s.Slots), "--workers", strconv.Itoa(s.Workers), "--wait-slots", strconv.Itoa(s.Slots),
		"--budget", strconv.Itoa(s.last())}
	if noise > 0 {
		a = append(a, "--nb201-noise", strconv.FormatFloat(noise, 'g', -1, 64))
	}
	return append(a, s.Args...)
}

func nb201RunID(noise float64, seed int) string {
	return fmt.Sprintf("nb201-n%s-s%d", strings.ReplaceAll(strconv.FormatFloat(noise, 'g', -1, 64), ".", "p"), seed)
}

// NB201 is the nb201 workload's figures.
type NB201 struct {
	Settings NB201Settings `json:"settings"`
	Optimum  float64       `json:"optimum"`
	Tables   []*NB201Table `json:"tables"`
	// AllWithin and AtOptimum judge evoq's last budget without noise;
	// MedianVsTPE and WorstVsRandom its first. Met is all four; a
	// comparison without the baselines is not met.
	AllWithin     bool `json:"all_within"`
	AtOptimum     bool `json:"at_optimum"`
	MedianVsTPE   bool `json:"median_vs_tpe"`
	WorstVsRandom bool `json:"worst_vs_random"`
	Met           bool `json:"met"`
	// Operators are the evoq runs' search settings, from their records.
	Operators string `json:"operators"`
}

// NB201Table is one noise level's searches.
type NB201Table struct {
	Noise    float64        `json:"noise"`
	Searches []*NB201Search `json:"searches"`
}

// NB201Search is one search method's seeds: Best[i][j] is the true
// accuracy seed i+1 would return after Budgets[j] evaluations.
type NB201Search struct {
	Name string         `json:"name"`
	Best [][]float64    `json:"best"`
	At   []NB201Figures `json:"at"` // per budget
}

// NB201Figures are one search's figures at one budget over the seeds.
type NB201Figures struct {
	Budget    int     `json:"budget"`
	Median    float64 `json:"median"`
	Worst     float64 `json:"worst"`
	AtOptimum int     `json:"at_optimum"`
	Seeds     int     `json:"seeds"`
}

// runNB201 runs the nb201 workload: per noise level, evoq on each seed,
// then the two baselines.
func (r *runner) runNB201(ctx context.Context, row *Row) error {
	s := nb201Settings(r.cfg)
	opt, _ := nb201.Optimum()
	fig := &NB201{Settings: s, Optimum: opt}
	row.NB201 = fig
	var table, script string
	if s.Baselines {
		var err error
		if table, script, err = r.writeNB201Baseline(ctx); err != nil {
			return err
		}
	}
	ops := map[string]bool{}
	for _, noise := range s.Noises {
		t := &NB201Table{Noise: noise}
		fig.Tables = append(fig.Tables, t)
		ev := &NB201Search{Name: "evoq"}
		for seed := 1; seed <= s.Seeds; seed++ {
			fmt.Fprintf(r.cfg.Log, "evoq bench: nb201: noise %g, evoq seed %d of %d\n", noise, seed, s.Seeds)
			best, op, err := r.nb201Seed(ctx, s, noise, seed)
			if err != nil {
				return fmt.Errorf("noise %g seed %d: %w", noise, seed, err)
			}
			ev.Best = append(ev.Best, best)
			if !ops[op] {
				ops[op] = true
				fig.Operators += map[bool]string{true: "", false: "; "}[fig.Operators == ""] + op
			}
		}
		t.Searches = append(t.Searches, ev)
		if !s.Baselines {
			continue
		}
		for _, sampler := range []string{"tpe", "random"} {
			fmt.Fprintf(r.cfg.Log, "evoq bench: nb201: noise %g, optuna %s, %d seeds\n", noise, sampler, s.Seeds)
			b, err := r.nb201Baseline(ctx, script, table, sampler, s, noise)
			if err != nil {
				return err
			}
			t.Searches = append(t.Searches, b)
		}
	}
	fig.summarize()
	return nil
}

// writeNB201Baseline checks that the Python has Optuna and writes the
// table and the baseline script to files the run removes at its end.
func (r *runner) writeNB201Baseline(ctx context.Context) (table, script string, err error) {
	out, err := exec.CommandContext(ctx, r.cfg.Python, "-c", "import optuna; print(optuna.__version__)").CombinedOutput()
	if err != nil {
		return "", "", &ConfigError{Field: "Python", Value: r.cfg.Python, Reason: fmt.Sprintf(
			"cannot import optuna for the nb201 baselines (%v: %s); install Debian's python3-optuna (apt-get install python3-optuna), name another Python, or leave the baselines out",
			err, strings.TrimSpace(lastLine(string(out))))}
	}
	dir := filepath.Join(r.cfg.Dir, "nb201-baseline")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("write the nb201 baseline: %w", err)
	}
	table, script = filepath.Join(dir, "nb201-imagenet16-120.csv"), filepath.Join(dir, "nb201_baseline.py")
	if err := os.WriteFile(table, []byte(nb201.TableCSV()), 0o644); err != nil {
		return "", "", fmt.Errorf("write the nb201 table: %w", err)
	}
	if err := os.WriteFile(script, nb201Baseline, 0o644); err != nil {
		return "", "", fmt.Errorf("write the nb201 baseline: %w", err)
	}
	return table, script, nil
}

// nb201Baseline runs one Optuna sampler on every seed at noise.
func (r *runner) nb201Baseline(ctx context.Context, script, table, sampler string, s NB201Settings, noise float64) (*NB201Search, error) {
	var budgets []string
	for _, b := range s.Budgets {
		budgets = append(budgets, strconv.Itoa(b))
	}
	args := []string{script, "--json", "--table", table, "--sampler", sampler, "--budgets", strings.Join(budgets, ","),
		"--seeds", strconv.Itoa(s.Seeds), "--noise", strconv.FormatFloat(noise, 'g', -1, 64)}
	cmd := exec.CommandContext(ctx, r.cfg.Python, args...)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", r.cfg.Python, strings.Join(args, " "), err, tailText(errb.String(), 2000))
	}
	var res struct {
		Seeds []struct {
			Seed int                `json:"seed"`
			Best map[string]float64 `json:"best"`
		} `json:"seeds"`
	}
	if err := json.Unmarshal([]byte(lastLine(string(out))), &res); err != nil {
		return nil, fmt.Errorf("the nb201 baseline printed no JSON: %w\n%s", err, tailText(string(out), 500))
	}
	if len(res.Seeds) != s.Seeds {
		return nil, fmt.Errorf("the nb201 baseline (%s) reported %d seeds, want %d", sampler, len(res.Seeds), s.Seeds)
	}
	b := &NB201Search{Name: "optuna " + sampler}
	for _, sd := range res.Seeds {
		var row []float64
		for _, budget := range s.Budgets {
			v, ok := sd.Best[strconv.Itoa(budget)]
			if !ok {
				return nil, fmt.Errorf("the nb201 baseline (%s) has no figure at %d trials for seed %d", sampler, budget, sd.Seed)
			}
			row = append(row, v)
		}
		b.Best = append(b.Best, row)
	}
	return b, nil
}

// nb201Seed runs seed's evoq run at noise and replays it: the true
// accuracy of its best design at each budget, and its operators.
func (r *runner) nb201Seed(ctx context.Context, s NB201Settings, noise float64, seed int) ([]float64, string, error) {
	run := nb201RunID(noise, seed)
	dir := filepath.Join(r.cfg.Dir, "nb201", run)
	p, err := r.evoqRunIn(ctx, dir, s.args(noise, seed))
	if err != nil {
		return nil, "", err
	}
	return replayNB201(ctx, dir, run, s.Budgets, p.sum)
}

// replayNB201 folds run's results stream, in the store in dir, with the
// fold the controller builds from the run's record, and takes the true
// accuracy of the fold's best design when each budget's count of designs
// has counted. The fold's best at the end must be the summary's.
func replayNB201(ctx context.Context, dir, run string, budgets []int, sum *runstate.Summary) ([]float64, string, error) {
	rd, err := history.Open(ctx, history.Source{Dir: dir})
	if err != nil {
		return nil, "", err
	}
	defer rd.Close()
	ri, err := rd.Pick(ctx, run)
	if err != nil {
		return nil, "", err
	}
	rec := ri.Run
	if rec == nil {
		return nil, "", fmt.Errorf("run %s's record: %w", run, ri.Err)
	}
	fold := runstate.NewFold(runstate.NewTally(ri.ID, ri.Budget, runstate.RulesOf(rec)), rec.Init, rec.Pool, runstate.Replace(rec.Replace))
	best := make([]float64, len(budgets))
	taken := 0
	take := func() error {
		b := fold.Best()
		if b == nil {
			return fmt.Errorf("run %s: no design ok after %d", run, fold.Terminal())
		}
		acc, err := nb201.GenomeAccuracy(b.Design.Genome)
		if err != nil {
			return err
		}
		best[taken] = acc
		taken++
		return nil
	}
	err = rd.Results(ctx, run, func(_ uint64, _ time.Time, res *schema.Result, err error) error {
		if fold.Apply(res, err) != runstate.Counted || taken >= len(budgets) || fold.Terminal() != budgets[taken] {
			return nil
		}
		return take()
	})
	if err != nil {
		return nil, "", fmt.Errorf("read the results of %s: %w", run, err)
	}
	if taken != len(budgets) {
		return nil, "", fmt.Errorf("run %s counted %d designs, not the %d of its budgets", run, fold.Terminal(), budgets[len(budgets)-1])
	}
	if b := fold.Best(); sum.BestFitness == nil || b.Fitness != *sum.BestFitness || sum.Evaluations != fold.Terminal() {
		return nil, "", fmt.Errorf("the replay is not the run: best %v of %d designs replayed, the summary's %v of %d",
			b.Fitness, fold.Terminal(), sum.BestFitness, sum.Evaluations)
	}
	op := fmt.Sprintf("init %d, pool %d, replace %s, tournament %d, %s", rec.Init, rec.Pool, rec.Replace, rec.Tournament,
		runstate.VariationText(rec.Variation))
	return best, op, nil
}

// summarize computes each search's figures and, on the table without
// noise, the verdicts.
func (n *NB201) summarize() {
	s := n.Settings
	for _, t := range n.Tables {
		for _, sr := range t.Searches {
			sr.At = nil
			for j, budget := range s.Budgets {
				var xs []float64
				at := 0
				for _, row := range sr.Best {
					xs = append(xs, row[j])
					if row[j] >= n.Optimum {
						at++
					}
				}
				sr.At = append(sr.At, NB201Figures{Budget: budget, Median: median(xs), Worst: slices.Min(xs), AtOptimum: at, Seeds: len(xs)})
			}
		}
	}
	n.AllWithin, n.AtOptimum, n.MedianVsTPE, n.WorstVsRandom, n.Met = false, false, false, false, false
	if len(n.Tables) == 0 || n.Tables[0].Noise != 0 {
		return
	}
	find := func(name string) *NB201Search {
		for _, sr := range n.Tables[0].Searches {
			if sr.Name == name {
				return sr
			}
		}
		return nil
	}
	ev, tpe, rnd := find("evoq"), find("optuna tpe"), find("optuna random")
	if ev == nil || len(ev.At) == 0 {
		return
	}
	last, first := ev.At[len(ev.At)-1], ev.At[0]
	n.AllWithin = last.Worst >= n.Optimum-nb201Within
	n.AtOptimum = float64(last.AtOptimum) >= nb201AtOptimum*float64(last.Seeds)
	if tpe != nil && rnd != nil {
		n.MedianVsTPE = first.Median >= tpe.At[0].Median
		n.WorstVsRandom = first.Worst >= rnd.At[0].Median
	}
	n.Met = n.AllWithin && n.AtOptimum && n.MedianVsTPE && n.WorstVsRandom
}

// Print prints one table per noise level, then the targets; a smoke run's
// are not judged.
func (n *NB201) Print(out io.Writer, smoke bool) {
	s := n.Settings
	fmt.Fprintf(out, "  evoq run --evaluator nb201: %d slots in %d worker process(es), %d evaluations a run; seeds 1..%d; extra flags: %s\n",
		s.Slots, s.Workers, s.last(), s.Seeds, map[bool]string{true: "none (evoq's defaults)", false: strings.Join(s.Args, " ")}[len(s.Args) == 0])
	fmt.Fprintf(out, "  evoq's settings (the runs' records): %s\n", n.Operators)
	if s.Baselines {
		fmt.Fprintln(out, "  optuna tpe, optuna random: bench/nb201_baseline.py, the samplers' defaults, one trial at a time")
	}
	fmt.Fprintf(out, "  figure: the true test accuracy of the design each search would return (its best observed) after so many evaluations; optimum %.4f\n", n.Optimum)
	for _, t := range n.Tables {
		fmt.Fprintf(out, "  noise %g (standard deviation of each observation, accuracy points):\n", t.Noise)
		w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprint(w, "  search")
		for _, b := range s.Budgets {
			fmt.Fprintf(w, "\t@%d median\tworst\tat optimum", b)
		}
		fmt.Fprintln(w)
		for _, sr := range t.Searches {
			fmt.Fprintf(w, "  %s", sr.Name)
			for _, f := range sr.At {
				fmt.Fprintf(w, "\t%.4f\t%.4f\t%d of %d", f.Median, f.Worst, f.AtOptimum, f.Seeds)
			}
			fmt.Fprintln(w)
		}
		w.Flush()
	}
	if smoke || len(n.Tables) == 0 || n.Tables[0].Noise != 0 {
		return
	}
	ev := n.Tables[0].Searches[0]
	first, last := ev.At[0], ev.At[len(ev.At)-1]
	fmt.Fprintf(out, "  noise 0, @%d: every seed within %g of the optimum (worst %.4f): %s; >= %g%% of seeds at it (%d of %d): %s\n",
		last.Budget, nb201Within, last.Worst, verdictText(n.AllWithin), nb201AtOptimum*100, last.AtOptimum, last.Seeds, verdictText(n.AtOptimum))
	if !s.Baselines {
		fmt.Fprintf(out, "  noise 0, @%d: against the baselines: not judged (they did not run)\n", first.Budget)
		return
	}
	tpe, rnd := n.Tables[0].Searches[1].At[0], n.Tables[0].Searches[2].At[0]
	fmt.Fprintf(out, "  noise 0, @%d: median >= optuna tpe's (%.4f against %.4f): %s; worst seed >= random search's median (%.4f against %.4f): %s\n",
		first.Budget, first.Median, tpe.Median, verdictText(n.MedianVsTPE), first.Worst, rnd.Median, verdictText(n.WorstVsRandom))
}
