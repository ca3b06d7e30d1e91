package bench

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// The train20 workload is the fidelity workload's comparison on real
// training: a PyTorch MLP on a generated 20-class task with noisy labels
// (train20.py), whose learning curves cross. Per seed, evoq trains every
// design to its end, then runs under asha and under median, then again
// without a rule but with --inherit; and Optuna's TPE sampler runs the
// same training without a pruner, with its HyperbandPruner and with its
// MedianPruner (train20_baseline.py, which imports train20.py). Every run
// is measured in slot-seconds, time inside evaluations (fidelity.go), and
// compared at the full-training run's slot-seconds.
//
// Slots are equal: evoq runs 2 slots, one per core of the reference
// machine; an Optuna study runs one trial at a time, as Optuna's users
// run it, and the bench runs 2 studies at once, so that each trial
// shares the machine with another training as each of evoq's does. A
// study stops once its trials have spent the full run's slot-seconds.

//go:embed train20.py
var train20Script []byte

//go:embed train20_baseline.py
var train20Baseline []byte

// train20Space is the search space of the evoq runs; train20_baseline.py
// asks Optuna for the same ranges.
const train20Space = `name: train20-mlp
params:
  width: {type: int, min: 16, max: 256, log: true}
  depth: {type: int, min: 1, max: 3}
  lr: {type: float, min: 0.0001, max: 0.03, log: true}
  weight_decay: {type: float, min: 0.000001, max: 0.01, log: true}
  dropout: {type: float, min: 0.0, max: 0.5}
  batch: {type: choice, values: [32, 64, 128, 256]}
`

// The Optuna studies, by pruner.
var train20Pruners = []string{"none", "hyperband", "median"}

// The train20 workload's targets, judged on asha (chosen before the runs,
// as the fidelity workload's): at equal slot-seconds at least as good as
// full training and as TPE with its better pruner, and full training's
// best in at most train20ReachShare of its slot-seconds.
const train20ReachShare = 0.35

// Train20Settings are the train20 workload's runs.
type Train20Settings struct {
	Slots   int `json:"slots"`
	Workers int `json:"workers"`
	Epochs  int `json:"epochs"`
	// Budget is the full-training run's design budget; Factor a rule
	// run's over it (FidelitySettings.Factor).
	Budget  int            `json:"budget"`
	Factor  map[string]int `json:"budget_factor"`
	Init    int            `json:"init"`
	Pool    int            `json:"pool"`
	MinStep int            `json:"min_step"`
	Eta     int            `json:"eta"`
	Seeds   int            `json:"seeds"`
	// Args are flags added to every evoq run (Config.Train20Args).
	Args []string `json:"args,omitempty"`
	// RuleArgs are flags added to the rule runs (Config.Train20RuleArgs),
	// Rules the rules run, and Inherit whether the --inherit run did.
	RuleArgs []string `json:"rule_args,omitempty"`
	Rules    []string `json:"rules"`
	Inherit  bool     `json:"inherit"`
	// Baselines says whether the Optuna studies ran.
	Baselines bool `json:"baselines"`
}

// train20Settings are the workload's runs, full or smoke. 2 slots in one
// worker process; 30 epochs; 40 designs of full training with --init 8
// and --pool 6 (evoq's default --init 20 would spend half of so small a
// search on random designs), some 40 to 60 slot-seconds a seed on an idle
// 2-core machine: a seed's seven runs take 3 to 4 minutes there. Rungs at epochs 3, 9 and 27 (--min-step 3, --eta 3): at epoch 1
// the curves rank the designs by their learning rate, which the later
// epochs undo, and epoch 3 is a tenth of the training, the least a
// stopped design costs. A rule run's budget is what spends the full
// run's slot-seconds with room (each run's Coverage says). The smoke run
// is 8 designs of 6 epochs, rungs at 1 and 3.
func train20Settings(cfg Config) Train20Settings {
	s := Train20Settings{Slots: 2, Workers: 1, Epochs: train20Epochs, Budget: 40, Init: 8, Pool: 6, MinStep: 3, Eta: 3, Seeds: 3,
		Factor: map[string]int{schema.RuleMedian: 3, schema.RuleASHA: 5}, Args: cfg.Train20Args, Baselines: !cfg.Train20NoBaselines,
		RuleArgs: cfg.Train20RuleArgs, Rules: fidelityRules, Inherit: !cfg.Train20NoInherit}
	if len(cfg.Train20Rules) > 0 {
		s.Rules = cfg.Train20Rules
	}
	if cfg.Smoke {
		s.Epochs, s.Budget, s.Init, s.Pool, s.MinStep, s.Seeds = 6, 8, 4, 4, 1, 1
	}
	if cfg.Train20MinStep > 0 {
		s.MinStep = min(cfg.Train20MinStep, s.Epochs-1)
	}
	if cfg.Seeds > 0 {
		s.Seeds = cfg.Seeds
	}
	return s
}

// train20Epochs is the workload's training length, in epochs.
const train20Epochs = 30

func (s Train20Settings) budget(rule string) int {
	if f, ok := s.Factor[rule]; ok {
		return s.Budget * f
	}
	return s.Budget
}

// train20Files are the workload's files, written where its runs are.
type train20Files struct {
	evalCmd, space, baseline string
}

// args are the `evoq run` flags of seed's run under rule, with --inherit
// or not, then Args. All runs of a seed have the same run ID and seed:
// their random initial designs are the same, and a design trains with a
// torch seed drawn from its ID.
func (s Train20Settings) args(f train20Files, seed int, rule string, inherit bool) []string {
	a := []string{"--run", train20RunID(seed), "--seed", strconv.Itoa(seed), "--config", f.space,
		"--eval-cmd", f.evalCmd, "--persistent",
		"--slots", strconv.Itoa(s.Slots), "--workers", strconv.Itoa(s.Workers), "--wait-slots", strconv.Itoa(s.Slots),
		"--budget", strconv.Itoa(s.budget(rule)), "--init", strconv.Itoa(s.Init), "--pool", strconv.Itoa(s.Pool)}
	if rule != ruleNone {
		a = append(a, "--early-stop", rule, "--min-step", strconv.Itoa(s.MinStep), "--max-step", strconv.Itoa(s.Epochs),
			"--eta", strconv.Itoa(s.Eta))
	}
	if inherit {
		a = append(a, "--inherit")
	}
	a = append(a, s.Args...)
	if rule != ruleNone {
		a = append(a, s.RuleArgs...)
	}
	return a
}

func train20RunID(seed int) string { return "train20-s" + strconv.Itoa(seed) }

// Train20 is the train20 workload's figures.
type Train20 struct {
	Settings Train20Settings `json:"settings"`
	Seeds    []*Train20Seed  `json:"seeds"`
	// Medians are each compared run's figures over the seeds, in the
	// order of Train20Seed.Runs.
	Medians []*FidelityMedian `json:"medians"`
	// Inherit is --inherit against the full run, which trained from
	// scratch; its Met is the inherit workload's target.
	Inherit *Inherit `json:"inherit"`
	// BestPruner is the Optuna run with a pruner whose median best at
	// equal slot-seconds is the higher.
	BestPruner string `json:"best_pruner,omitempty"`
	// EqualMet, VsOptunaMet and ReachMet are the three targets, judged on
	// asha; Met all three.
	EqualMet    bool    `json:"equal_met"`
	VsOptunaMet bool    `json:"vs_optuna_met"`
	ReachMet    bool    `json:"reach_met"`
	Met         bool    `json:"met"`
	CPUShareMax float64 `json:"cpu_share_max"`
}

// Train20Seed is one seed's runs.
type Train20Seed struct {
	Seed          int         `json:"seed"`
	Full          FidelityRun `json:"full"`
	FullBestShare float64     `json:"full_best_share"`
	// Runs are asha's, median's and, with the baselines, the Optuna
	// studies', each beside Full.
	Runs    []*FidelityRule `json:"runs"`
	Inherit *InheritSeed    `json:"inherit"`
	// FullEpochs is the epochs the full run trained, and Epochs each of
	// Runs measured in epochs instead of slot-seconds.
	FullEpochs int            `json:"full_epochs"`
	Epochs     []*EpochFigure `json:"epochs"`
}

// EpochFigure is a run beside the full run in epochs trained, which a
// machine's load does not change as it changes slot-seconds: its results
// in the order they ended (a study's trials in order), their epochs
// summed. Not judged; the targets are in slot-seconds.
type EpochFigure struct {
	Rule   string `json:"rule"`
	Epochs int    `json:"epochs"`
	// BestAtEqual is its best ok fitness among the results that ended
	// before its epochs passed the full run's, Delta that minus the full
	// run's best; ReachedShare the share of the full run's epochs it had
	// trained by its first ok result at least as good, if Reached.
	BestAtEqual  float64 `json:"best_at_equal"`
	Delta        float64 `json:"delta"`
	Reached      bool    `json:"reached"`
	ReachedShare float64 `json:"reached_share"`
}

// atEqualEpochs measures spans against the full run's best and epochs.
func atEqualEpochs(rule string, spans []span, fullBest float64, fullEpochs int) *EpochFigure {
	e := &EpochFigure{Rule: rule}
	sorted := slices.Clone(spans)
	slices.SortStableFunc(sorted, func(a, b span) int { return cmpFloat(a.stop, b.stop) })
	for _, s := range sorted {
		e.Epochs += s.epochs
		if s.ok && e.Epochs <= fullEpochs && s.fitness > e.BestAtEqual {
			e.BestAtEqual = s.fitness
		}
		if s.ok && s.fitness >= fullBest && !e.Reached && fullEpochs > 0 {
			e.Reached, e.ReachedShare = true, sig4(float64(e.Epochs)/float64(fullEpochs))
		}
	}
	e.Delta = e.BestAtEqual - fullBest
	return e
}

// spanEpochs is the epochs of all the spans.
func spanEpochs(spans []span) int {
	n := 0
	for _, s := range spans {
		n += s.epochs
	}
	return n
}

// runTrain20 runs the train20 workload.
func (r *runner) runTrain20(ctx context.Context, row *Row) error {
	s := train20Settings(r.cfg)
	fig := &Train20{Settings: s}
	row.Train20 = fig
	files, err := r.writeTrain20(s)
	if err != nil {
		return err
	}
	for seed := 1; seed <= s.Seeds; seed++ {
		fmt.Fprintf(r.cfg.Log, "evoq bench: train20: seed %d of %d\n", seed, s.Seeds)
		ts, err := r.train20Seed(ctx, s, files, seed)
		if err != nil {
			return fmt.Errorf("seed %d: %w", seed, err)
		}
		fig.Seeds = append(fig.Seeds, ts)
		logTrain20Seed(r.cfg.Log, ts)
	}
	fig.summarize()
	return nil
}

// logTrain20Seed logs a seed's figures as it ends: a full run takes long
// enough on a busy machine that a stopped one should leave what it had.
func logTrain20Seed(log io.Writer, ts *Train20Seed) {
	fmt.Fprintf(log, "evoq bench: train20: seed %d: full best %.4f in %g slot-s", ts.Seed, ts.Full.Best, ts.Full.SlotS)
	for _, r := range ts.Runs {
		fmt.Fprintf(log, "; %s at equal %.4f, %s", r.Rule, r.BestAtEqual, reachedText(r))
	}
	if in := ts.Inherit; in != nil {
		fmt.Fprintf(log, "; inherit reached %v share %g", in.Reached, in.Share)
	}
	fmt.Fprintln(log)
}

// writeTrain20 writes the evaluator, the baseline and the space where the
// runs are.
func (r *runner) writeTrain20(s Train20Settings) (train20Files, error) {
	dir := filepath.Join(r.cfg.Dir, "train20")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return train20Files{}, err
	}
	script := filepath.Join(dir, "train20.py")
	f := train20Files{space: filepath.Join(dir, "space.yaml"), baseline: filepath.Join(dir, "train20_baseline.py"),
		evalCmd: strings.Join([]string{shellQuote(r.cfg.Python), shellQuote(script), shellQuote(r.cfg.EvalHelper),
			strconv.Itoa(s.Epochs)}, " ")}
	for path, data := range map[string][]byte{script: train20Script, f.baseline: train20Baseline, f.space: []byte(train20Space)} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return train20Files{}, fmt.Errorf("write %s: %w", filepath.Base(path), err)
		}
	}
	return f, nil
}

// train20Seed runs seed's evoq runs and Optuna studies and compares them
// with its full run.
func (r *runner) train20Seed(ctx context.Context, s Train20Settings, f train20Files, seed int) (*Train20Seed, error) {
	fullP, fullRes, err := r.train20Run(ctx, s, f, seed, ruleNone, false)
	if err != nil {
		return nil, err
	}
	fullSpans := spansOf(fullRes.results, fullRes.verdicts)
	ts := &Train20Seed{Seed: seed, Full: runFigures(ruleNone, s.budget(ruleNone), fullP, fullSpans), FullEpochs: spanEpochs(fullSpans)}
	if t, ok := firstReached(fullSpans, ts.Full.Best); ok && ts.Full.SlotS > 0 {
		ts.FullBestShare = sig4(slotSecondsAt(fullSpans, t) / ts.Full.SlotS)
	}
	for _, rule := range s.Rules {
		p, res, err := r.train20Run(ctx, s, f, seed, rule, false)
		if err != nil {
			return nil, err
		}
		spans := spansOf(res.results, res.verdicts)
		fr := compare(spans, ts.Full.Best, ts.Full.SlotS)
		fr.FidelityRun = runFigures(rule, s.budget(rule), p, spans)
		ts.Runs = append(ts.Runs, fr)
		ts.Epochs = append(ts.Epochs, atEqualEpochs(rule, spans, ts.Full.Best, ts.FullEpochs))
	}
	if s.Inherit {
		p, res, err := r.train20Run(ctx, s, f, seed, ruleNone, true)
		if err != nil {
			return nil, err
		}
		scratch, _ := inheritFigures(modeScratch, fullP, fullRes.results, fullRes.verdicts)
		inherit, spans := inheritFigures(modeInherit, p, res.results, res.verdicts)
		ts.Inherit = compareInherit(seed, scratch, inherit, spans)
		ts.Epochs = append(ts.Epochs, atEqualEpochs(modeInherit, spans, ts.Full.Best, ts.FullEpochs))
	}
	if !s.Baselines {
		return ts, nil
	}
	studies, err := r.train20Studies(ctx, s, f, seed, ts.Full.SlotS)
	if err != nil {
		return nil, err
	}
	for _, st := range studies {
		fr := compare(st.spans, ts.Full.Best, ts.Full.SlotS)
		fr.FidelityRun = st.run
		ts.Runs = append(ts.Runs, fr)
		ts.Epochs = append(ts.Epochs, atEqualEpochs(st.run.Rule, st.spans, ts.Full.Best, ts.FullEpochs))
	}
	return ts, nil
}

// runResults are a run's results in stream order, with the counting
// rule's verdicts on them.
type runResults struct {
	results  []*schema.Result
	verdicts []runstate.Verdict
}

// train20Run runs seed's evoq run under rule, with --inherit or not, and
// reads its results back from its store.
func (r *runner) train20Run(ctx context.Context, s Train20Settings, f train20Files, seed int, rule string, inherit bool) (*evoqProc, *runResults, error) {
	name := fmt.Sprintf("s%d-%s", seed, rule)
	if inherit {
		name = fmt.Sprintf("s%d-%s", seed, modeInherit)
	}
	dir := filepath.Join(r.cfg.Dir, "train20", name)
	p, err := r.evoqRunIn(ctx, dir, s.args(f, seed, rule, inherit))
	if err != nil {
		return nil, nil, err
	}
	results, verdicts, err := readResults(ctx, dir, train20RunID(seed))
	if err != nil {
		return nil, nil, fmt.Errorf("%s run: %w", name, err)
	}
	return p, &runResults{results: results, verdicts: verdicts}, nil
}

// study is one Optuna study's figures and spans.
type study struct {
	run   FidelityRun
	spans []span
}

// train20Studies runs seed's Optuna studies, s.Slots at a time, each until
// its trials have spent slotS; in train20Pruners' order.
func (r *runner) train20Studies(ctx context.Context, s Train20Settings, f train20Files, seed int, slotS float64) ([]*study, error) {
	out := make([]*study, len(train20Pruners))
	errs := make([]error, len(train20Pruners))
	sem := make(chan struct{}, s.Slots)
	var wg sync.WaitGroup
	for i, pruner := range train20Pruners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			out[i], errs[i] = r.train20Study(ctx, s, f, seed, pruner, slotS)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// train20Study runs one Optuna study and turns its trials into spans, one
// after the other from 0.
func (r *runner) train20Study(ctx context.Context, s Train20Settings, f train20Files, seed int, pruner string, slotS float64) (*study, error) {
	args := []string{f.baseline, "--pruner", pruner, "--seed", strconv.Itoa(seed),
		"--slot-seconds", strconv.FormatFloat(slotS, 'g', -1, 64), "--epochs", strconv.Itoa(s.Epochs),
		"--min-step", strconv.Itoa(s.MinStep), "--eta", strconv.Itoa(s.Eta)}
	cmd := exec.CommandContext(ctx, r.cfg.Python, args...)
	var errb strings.Builder
	cmd.Stderr = &errb
	began := time.Now()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", r.cfg.Python, strings.Join(args, " "), err, tailText(errb.String(), 2000))
	}
	wall := time.Since(began)
	var res struct {
		StartupS float64        `json:"startup_s"`
		Trials   []train20Trial `json:"trials"`
	}
	if err := json.Unmarshal([]byte(lastLine(string(out))), &res); err != nil {
		return nil, fmt.Errorf("the train20 baseline printed no JSON: %w\n%s", err, tailText(string(out), 500))
	}
	st := &study{spans: trialSpans(res.StartupS, res.Trials)}
	run := FidelityRun{Rule: "optuna tpe, pruner " + pruner, Budget: len(res.Trials), WallS: sig4(wall.Seconds())}
	for _, t := range res.Trials {
		if t.State == "pruned" {
			run.Stopped++
		} else {
			run.OK++
		}
	}
	run.Best, _ = bestUntil(st.spans, math.Inf(1))
	run.SlotS = sig4(slotSecondsAt(st.spans, math.Inf(1)))
	if cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(); wall > 0 {
		run.CPUShare = sig4(cpu.Seconds() / (wall.Seconds() * float64(runtime.NumCPU())))
	}
	st.run = run
	return st, nil
}

// train20Trial is one trial as the baseline reports it.
type train20Trial struct {
	State   string  `json:"state"` // complete or pruned
	Value   float64 `json:"value"`
	Seconds float64 `json:"seconds"`
	Epochs  int     `json:"epochs"`
}

// trialSpans lays a study's trials end to end after its process's
// start: it ran one at a time, and the time between trials, the
// sampler's, is no slot's, as the time between designs is not in evoq's
// runs. The start is a span with no result, as the start of evoq's
// evaluator process is in the span of each slot's first design. A pruned
// trial is no ok result, as a stopped design is not.
func trialSpans(startup float64, trials []train20Trial) []span {
	out := make([]span, 0, len(trials)+1)
	at := max(startup, 0)
	if at > 0 {
		out = append(out, span{start: 0, stop: at})
	}
	for _, t := range trials {
		out = append(out, span{start: at, stop: at + t.Seconds, ok: t.State == "complete", fitness: t.Value, epochs: t.Epochs})
		at += t.Seconds
	}
	return out
}

// summarize computes the medians, the inheritance figures and the
// verdicts.
func (t *Train20) summarize() {
	t.Medians, t.CPUShareMax = nil, 0
	inh := &Inherit{Settings: InheritSettings{Slots: t.Settings.Slots, Workers: t.Settings.Workers,
		Budget: t.Settings.Budget, Init: t.Settings.Init, Pool: t.Settings.Pool, Seeds: len(t.Seeds)}}
	var full []FidelityRun
	for _, ts := range t.Seeds {
		full = append(full, ts.Full)
		if ts.Inherit != nil {
			inh.Seeds = append(inh.Seeds, ts.Inherit)
		}
		t.CPUShareMax = max(t.CPUShareMax, ts.Full.CPUShare)
	}
	t.Inherit = nil
	if len(inh.Seeds) > 0 {
		inh.summarize()
		t.Inherit = inh
	}
	if len(t.Seeds) == 0 {
		return
	}
	for i, r := range t.Seeds[0].Runs {
		var runs []*FidelityRule
		for _, ts := range t.Seeds {
			runs = append(runs, ts.Runs[i])
			t.CPUShareMax = max(t.CPUShareMax, ts.Runs[i].CPUShare)
		}
		t.Medians = append(t.Medians, medianOver(r.Rule, full, runs))
	}
	t.judge()
}

// judge sets the verdicts from the medians: asha's against full
// training's, and against the better of the Optuna studies with a
// pruner.
func (t *Train20) judge() {
	var asha, pruned *FidelityMedian
	for _, m := range t.Medians {
		switch {
		case m.Rule == schema.RuleASHA:
			asha = m
		case strings.HasPrefix(m.Rule, "optuna") && !strings.HasSuffix(m.Rule, " none"):
			if pruned == nil || m.BestAtEqual > pruned.BestAtEqual {
				pruned = m
			}
		}
	}
	t.EqualMet, t.VsOptunaMet, t.ReachMet, t.BestPruner = false, false, false, ""
	if asha == nil {
		return
	}
	t.EqualMet = asha.Delta >= 0
	t.ReachMet = asha.ReachedShare != nil && *asha.ReachedShare <= train20ReachShare
	if pruned != nil {
		t.BestPruner = pruned.Rule
		t.VsOptunaMet = asha.BestAtEqual >= pruned.BestAtEqual
	}
	t.Met = t.EqualMet && t.VsOptunaMet && t.ReachMet
}

// train20Owned are the `evoq run` flags the train20 workload sets itself:
// in Train20Args one would override what the comparison holds equal (the
// budgets, the slots) or what it varies (the rule, --inherit).
var train20Owned = []string{"run", "seed", "config", "eval-cmd", "persistent", "slots", "workers", "wait-slots",
	"budget", "early-stop", "min-step", "max-step", "eta", "inherit", "dir", "listen", "json", "eval-logs"}

// validateTrain20Args refuses Train20Args that name a flag the workload
// sets itself.
func validateTrain20Args(field string, args []string) error {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && slices.Contains(train20Owned, name) {
			return &ConfigError{Field: field, Value: a, Reason: "the train20 workload sets --" + name +
				" itself, the same for every run it compares (evoq bench --train20-min-step sets the first rung); pass search or rule settings only (such as --pool, --brackets)"}
		}
	}
	return nil
}

// prepareTrain20 checks that the Python imports what the workload's
// training needs, before anything runs.
func (r *runner) prepareTrain20(ctx context.Context) error {
	imports, what := "import torch, sklearn, evoq_torch", "python3-torch and python3-sklearn"
	if !r.cfg.Train20NoBaselines {
		imports, what = imports+", optuna", what+" (and python3-optuna for the baselines, or leave them out)"
	}
	out, err := exec.CommandContext(ctx, r.cfg.Python, "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "+imports,
		r.cfg.EvalHelper).CombinedOutput()
	if err != nil {
		return &ConfigError{Field: "Python", Value: r.cfg.Python, Reason: fmt.Sprintf(
			"cannot %s for the train20 workload (%v: %s); install Debian's %s, or name another Python",
			imports, err, strings.TrimSpace(lastLine(string(out))), what)}
	}
	return nil
}

// Print prints the runs of each seed, the medians, --inherit's figures
// and the targets; a smoke run's are not judged.
func (t *Train20) Print(out io.Writer, smoke bool) {
	s := t.Settings
	extra, ruleExtra := "none", ""
	if len(s.Args) > 0 {
		extra = strings.Join(s.Args, " ")
	}
	if len(s.RuleArgs) > 0 {
		ruleExtra = " " + strings.Join(s.RuleArgs, " ")
	}
	fmt.Fprintf(out, "  evoq run: bench/train20.py, persistent, one torch thread a slot; %d slots in %d worker process(es); %d epochs; seeds 1..%d\n",
		s.Slots, s.Workers, s.Epochs, s.Seeds)
	fmt.Fprintf(out, "  budgets in designs: full %d (init %d, pool %d), asha %d, median %d; rules (%s) --min-step %d --eta %d --max-step %d%s; extra flags: %s\n",
		s.Budget, s.Init, s.Pool, s.budget(schema.RuleASHA), s.budget(schema.RuleMedian), strings.Join(s.Rules, ", "), s.MinStep, s.Eta, s.Epochs, ruleExtra, extra)
	if s.Baselines {
		fmt.Fprintf(out, "  optuna: TPESampler(seed), pruners none, HyperbandPruner(min_resource=%d, max_resource=%d, reduction_factor=%d), "+
			"MedianPruner(n_warmup_steps=%d); one trial at a time, %d studies at once, each until its trials spent the full run's slot-seconds\n",
			s.MinStep, s.Epochs, s.Eta, s.MinStep-1, s.Slots)
	}
	fmt.Fprintln(out, "  slot-seconds: time inside evaluations (trials), summed over the slots; compared at the full run's")
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  seed\trun\tok / stopped\tbest\tslot-s\twall s\tcpu\treached full's best\tbest at equal slot-s\n")
	for _, ts := range t.Seeds {
		fmt.Fprintf(w, "  %d\tevoq full\t%d / %d\t%.4f\t%g\t%g\t%g\tits best at %s\t\n", ts.Seed, ts.Full.OK, ts.Full.Stopped,
			ts.Full.Best, ts.Full.SlotS, ts.Full.WallS, ts.Full.CPUShare, pct(ts.FullBestShare))
		for _, r := range ts.Runs {
			fmt.Fprintf(w, "  %d\t%s\t%d / %d\t%.4f\t%g\t%g\t%g\t%s\t%s\n", ts.Seed, train20Name(r.Rule), r.OK, r.Stopped, r.Best,
				r.SlotS, r.WallS, r.CPUShare, reachedText(r), equalText(r))
		}
	}
	w.Flush()
	for _, m := range t.Medians {
		share := "most seeds never reached it"
		if m.ReachedShare != nil {
			share = "median " + pct(*m.ReachedShare)
		}
		fmt.Fprintf(out, "  median of %d seeds, %s: reached full's best in %d (%s); best at equal slot-s %.4f against full's %.4f, median difference %+.4f",
			len(t.Seeds), train20Name(m.Rule), m.Reached, share, m.BestAtEqual, m.FullBest, m.Delta)
		if m.Short > 0 {
			fmt.Fprintf(out, "; %d ended short", m.Short)
		}
		fmt.Fprintln(out)
	}
	t.printEpochs(out)
	t.printInherit(out)
	fmt.Fprintf(out, "  largest CPU share of a run: %g of the machine\n", t.CPUShareMax)
	if smoke {
		return
	}
	fmt.Fprintf(out, "  (a) asha at equal slot-seconds >= full training (median difference): %s\n", verdictText(t.EqualMet))
	switch {
	case !s.Baselines:
		fmt.Fprintln(out, "  (b) asha against Optuna TPE with its better pruner: not judged (the baselines did not run)")
	default:
		fmt.Fprintf(out, "  (b) asha at equal slot-seconds >= Optuna TPE with its better pruner (%s), medians: %s\n",
			train20Name(t.BestPruner), verdictText(t.VsOptunaMet))
	}
	fmt.Fprintf(out, "  (c) asha reaches full training's best in <= %g%% of its slot-seconds (median): %s\n", train20ReachShare*100, verdictText(t.ReachMet))
}

// printEpochs prints each run beside the full run in epochs trained, and
// the medians over the seeds: a check on the slot-seconds, which a busy
// machine inflates unevenly from run to run.
func (t *Train20) printEpochs(out io.Writer) {
	if len(t.Seeds) == 0 {
		return
	}
	fmt.Fprintln(out, "  in epochs trained (results in the order they ended; not judged): best at the full run's epochs, and the share of them to reach its best")
	for i, e0 := range t.Seeds[0].Epochs {
		var atEqual, delta, shares []float64
		reached := 0
		for _, ts := range t.Seeds {
			e := ts.Epochs[i]
			share := math.Inf(1)
			if e.Reached {
				share, reached = e.ReachedShare, reached+1
			}
			atEqual, delta, shares = append(atEqual, e.BestAtEqual), append(delta, e.Delta), append(shares, share)
		}
		share := "median not reached"
		if m := median(shares); !math.IsInf(m, 1) {
			share = "median " + pct(m)
		}
		fmt.Fprintf(out, "    %s: best %.4f (median difference %+.4f); reached in %d of %d seeds, %s\n",
			train20Name(e0.Rule), median(atEqual), median(delta), reached, len(t.Seeds), share)
	}
}

// printInherit prints --inherit against the full run, from scratch.
func (t *Train20) printInherit(out io.Writer) {
	in := t.Inherit
	if in == nil {
		return
	}
	for _, is := range in.Seeds {
		reached := fmt.Sprintf("not reached; %s of scratch's slot-s to its best spent", pct(is.TotalShare))
		if is.Reached {
			reached = fmt.Sprintf("reached at %g slot-s, %s of scratch's %g", is.ReachedSlotS, pct(is.Share), is.Scratch.BestSlotS)
		}
		fmt.Fprintf(out, "  seed %d, --inherit: best %.4f against scratch's %.4f; %s; %d of %d mutants inherited\n",
			is.Seed, is.Inherit.Best, is.Scratch.Best, reached, is.Inherit.Inherited, is.Inherit.Mutants)
	}
	share := "most seeds never reached it"
	if in.Share != nil {
		share = "median share " + pct(*in.Share)
	}
	fmt.Fprintf(out, "  --inherit against scratch (the full run), slot-seconds in stream order to scratch's best: reached in %d of %d seeds, %s; median best difference %+.4f (the inherit workload's bound, <= %g%%: %s)\n",
		in.Reached, len(in.Seeds), share, in.BestDelta, inheritShareTarget*100, verdictText(in.Met))
}

// train20Name is a compared run's name as the tables print it.
func train20Name(rule string) string {
	if strings.HasPrefix(rule, "optuna") {
		return rule
	}
	return "evoq " + rule
}

func reachedText(r *FidelityRule) string {
	if r.Reached {
		return fmt.Sprintf("at %s (%g slot-s)", pct(r.ReachedShare), r.ReachedSlotS)
	}
	return "not reached"
}

func equalText(r *FidelityRule) string {
	s := fmt.Sprintf("%.4f (%+.4f), %d designs", r.BestAtEqual, r.Delta, r.DesignsAtEqual)
	if r.Short {
		s += fmt.Sprintf("; ended short at %s: its final best", pct(r.Coverage))
	}
	return s
}

func pct(share float64) string { return fmt.Sprintf("%.1f%%", share*100) }
