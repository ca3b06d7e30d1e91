package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// The fidelity workload runs full training and each early-stopping rule
// on the same seeds and the same slots, on the sim evaluator's learning
// curves, and compares what each rule's run had found with what the full
// run found, per slot-second spent. A slot-second is one second of one
// slot inside an evaluation, from its start to its result, as the worker
// timed it (schema.Result Start and Stop): a stopped design costs the
// steps it ran and the wait for its stop answer, and the gaps between
// designs, which no rule changes, cost nothing.

// FidelitySettings are the fidelity workload's runs.
type FidelitySettings struct {
	Slots    int     `json:"slots"`
	Workers  int     `json:"workers"`
	SimMeanS float64 `json:"sim_mean_s"`
	Steps    int     `json:"steps"`
	// Budget is the full-training run's design budget.
	Budget int `json:"budget"`
	// Factor is a rule run's design budget over Budget. A stopped design
	// costs a share of a full one, so a rule's run needs more designs to
	// spend the full run's slot-seconds; the comparison at equal
	// slot-seconds is cut there, and what a rule run spends past it only
	// costs wall time. Each rule's Coverage says whether it was enough.
	Factor map[string]int `json:"budget_factor"`
	Seeds  int            `json:"seeds"`
	// Rules are the early-stopping rules run beside full training, in
	// order (Config.FidelityRules), and Args the flags added to their
	// runs (Config.FidelityArgs).
	Rules []string `json:"rules"`
	Args  []string `json:"args,omitempty"`
}

// fidelityRules are the rules the fidelity workload measures, in order.
var fidelityRules = []string{schema.RuleMedian, schema.RuleASHA}

// ruleNone names the full-training run.
const ruleNone = "none"

// fidelitySettings are the fidelity workload's runs, full or smoke. 16
// slots of sim training averaging 0.5 s, 300 designs of full training:
// each run takes 10 to 20 s and uses under half of two cores, most of it
// in the broker and the controller, since the evaluations sleep (each
// run's CPUShare says how much). The factors are what the runs measured
// to be enough, with room: with 10 times the full run's designs asha's
// runs spent 1.4 to 1.8 times its slot-seconds, with 3 times median's
// 1.3 to 1.7 times (each FidelityRule's Coverage).
func fidelitySettings(smoke bool, seeds int) FidelitySettings {
	s := FidelitySettings{Slots: 16, Workers: 2, SimMeanS: 0.5, Steps: 27, Budget: 300,
		Factor: map[string]int{schema.RuleMedian: 3, schema.RuleASHA: 10}, Seeds: 5, Rules: fidelityRules}
	if smoke {
		s.Slots, s.SimMeanS, s.Budget, s.Seeds = 8, 0.05, 24, 1
	}
	if seeds > 0 {
		s.Seeds = seeds
	}
	return s
}

// budget is the design budget of rule's run.
func (s FidelitySettings) budget(rule string) int {
	if f, ok := s.Factor[rule]; ok {
		return s.Budget * f
	}
	return s.Budget
}

// args are the `evoq run` flags of seed's run under rule. All three runs of
// a seed have the same run ID, so a design's sequence number draws the
// same time in each (evaluators.Sim.Draw) and the random initial designs
// are the same: the runs part where the rules do.
func (s FidelitySettings) args(seed int, rule string) []string {
	args := []string{"--run", fidelityRunID(seed), "--seed", strconv.Itoa(seed),
		"--evaluator", "sim", "--sim-curve", "--sim-steps", strconv.Itoa(s.Steps),
		"--sim-mean", strconv.FormatFloat(s.SimMeanS, 'g', -1, 64),
		"--slots", strconv.Itoa(s.Slots), "--workers", strconv.Itoa(s.Workers), "--wait-slots", strconv.Itoa(s.Slots),
		"--budget", strconv.Itoa(s.budget(rule)),
		// The workers log each rung decision with its answer time at
		// debug level; the full run logs the same, for the same cost.
		"--log-level", "debug", "--log-format", "json"}
	if rule != ruleNone {
		args = append(args, "--early-stop", rule, "--min-step", "1", "--max-step", strconv.Itoa(s.Steps), "--eta", "3")
		args = append(args, s.Args...)
	}
	return args
}

func fidelityRunID(seed int) string { return "fidelity-s" + strconv.Itoa(seed) }

// Fidelity is the fidelity workload's figures.
type Fidelity struct {
	Settings FidelitySettings `json:"settings"`
	Seeds    []*FidelitySeed  `json:"seeds"`
	// Medians are each rule's figures over the seeds, in Settings.Rules'
	// order.
	Medians []*FidelityMedian `json:"medians"`
	// Decisions is the asha runs' workers' time to get the controller's
	// answer at a rung, over every seed; Asked is the number of rung
	// decisions the controllers made, which Decisions.N should equal.
	Decisions *Quantiles `json:"decision_ms"`
	Asked     int        `json:"decisions_asked"`
	// CPUShareMax is the largest CPUShare of the runs.
	CPUShareMax float64 `json:"cpu_share_max"`
	// ReachMet and EqualMet are the two halves of the target.
	ReachMet bool `json:"reach_met"`
	EqualMet bool `json:"equal_met"`
}

// FidelitySeed is one seed's runs.
type FidelitySeed struct {
	Seed int         `json:"seed"`
	Full FidelityRun `json:"full"`
	// FullBestShare is the share of its slot-seconds the full run had
	// used when its best design ended: where a rule has to beat it.
	FullBestShare float64         `json:"full_best_share"`
	Rules         []*FidelityRule `json:"rules"`
}

// FidelityRun is one run's own figures.
type FidelityRun struct {
	Rule    string `json:"rule"` // none, median or asha
	Budget  int    `json:"budget"`
	OK      int    `json:"ok"`
	Stopped int    `json:"stopped"`
	// Best is its best ok fitness, and SlotS its slot-seconds, over the
	// whole run.
	Best     float64 `json:"best"`
	SlotS    float64 `json:"slot_s"`
	WallS    float64 `json:"wall_s"`
	CPUShare float64 `json:"cpu_share"`
}

// FidelityRule is a rule's run of one seed beside that seed's full run.
type FidelityRule struct {
	FidelityRun
	// Reached says whether the run had an ok result at least as good as
	// the full run's best; ReachedSlotS is its slot-seconds when the
	// first such result ended, and ReachedShare that over the full run's
	// slot-seconds.
	Reached      bool    `json:"reached"`
	ReachedSlotS float64 `json:"reached_slot_s"`
	ReachedShare float64 `json:"reached_share"`
	// BestAtEqual is its best ok fitness when its slot-seconds reached
	// the full run's, Delta that minus the full run's best, and
	// DesignsAtEqual the designs it had started by then. Short: the run
	// ended before spending that much, and BestAtEqual is its final best.
	BestAtEqual    float64 `json:"best_at_equal"`
	Delta          float64 `json:"delta"`
	DesignsAtEqual int     `json:"designs_at_equal"`
	Short          bool    `json:"short"`
	// Coverage is its slot-seconds over the full run's: under 1, its
	// budget was too small.
	Coverage float64 `json:"coverage"`
}

// FidelityMedian is one rule's medians over the seeds.
type FidelityMedian struct {
	Rule string `json:"rule"`
	// Reached is the number of seeds whose run reached the full run's
	// best; ReachedShare the median share, a seed that never did counting
	// as infinite, so nil when most seeds never did.
	Reached      int      `json:"reached"`
	ReachedShare *float64 `json:"reached_share"`
	// BestAtEqual, FullBest and Delta are the medians of the per-seed
	// figures: Delta is the median of the differences, not the difference
	// of the medians.
	BestAtEqual float64 `json:"best_at_equal"`
	FullBest    float64 `json:"full_best"`
	Delta       float64 `json:"delta"`
	// Short is the number of seeds whose run ended short.
	Short int `json:"short"`
}

// runFidelity runs the fidelity workload: per seed the full run, then
// each rule's.
func (r *runner) runFidelity(ctx context.Context, row *Row) error {
	s := fidelitySettings(r.cfg.Smoke, r.cfg.Seeds)
	if len(r.cfg.FidelityRules) > 0 {
		s.Rules = r.cfg.FidelityRules
	}
	s.Args = r.cfg.FidelityArgs
	fig := &Fidelity{Settings: s}
	row.Fidelity = fig
	var answers []float64
	for seed := 1; seed <= s.Seeds; seed++ {
		fmt.Fprintf(r.cfg.Log, "evoq bench: fidelity: seed %d of %d\n", seed, s.Seeds)
		fs, ans, asked, err := r.fidelitySeed(ctx, s, seed)
		if err != nil {
			return fmt.Errorf("seed %d: %w", seed, err)
		}
		fig.Seeds = append(fig.Seeds, fs)
		answers, fig.Asked = append(answers, ans...), fig.Asked+asked
	}
	fig.summarize(answers)
	return nil
}

// fidelitySeed runs seed's full run and its rule runs and compares them;
// it returns too the asha run's rung answer times, and the decisions its
// controller made.
func (r *runner) fidelitySeed(ctx context.Context, s FidelitySettings, seed int) (*FidelitySeed, []float64, int, error) {
	full, fullSpans, err := r.fidelityRun(ctx, s, seed, ruleNone)
	if err != nil {
		return nil, nil, 0, err
	}
	fs := &FidelitySeed{Seed: seed, Full: runFigures(ruleNone, s.budget(ruleNone), full, fullSpans)}
	if t, ok := firstReached(fullSpans, fs.Full.Best); ok && fs.Full.SlotS > 0 {
		fs.FullBestShare = sig4(slotSecondsAt(fullSpans, t) / fs.Full.SlotS)
	}
	var answers []float64
	asked := 0
	for _, rule := range s.Rules {
		p, spans, err := r.fidelityRun(ctx, s, seed, rule)
		if err != nil {
			return nil, nil, 0, err
		}
		fr := compare(spans, fs.Full.Best, fs.Full.SlotS)
		fr.FidelityRun = runFigures(rule, s.budget(rule), p, spans)
		fs.Rules = append(fs.Rules, fr)
		if rule == schema.RuleASHA {
			answers = rungAnswers(p.stderr)
			asked = decisionsAsked(p.sum)
		}
	}
	return fs, answers, asked, nil
}

// fidelityRun runs seed's run under rule and reads its results back from
// its store.
func (r *runner) fidelityRun(ctx context.Context, s FidelitySettings, seed int, rule string) (*evoqProc, []span, error) {
	dir := filepath.Join(r.cfg.Dir, "fidelity", fmt.Sprintf("s%d-%s", seed, rule))
	p, err := r.evoqRunIn(ctx, dir, s.args(seed, rule))
	if err != nil {
		return nil, nil, err
	}
	spans, err := readSpans(ctx, dir, fidelityRunID(seed))
	if err != nil {
		return nil, nil, fmt.Errorf("%s run: %w", rule, err)
	}
	return p, spans, nil
}

// runFigures are an evoq run's own figures, under rule with a budget of
// designs.
func runFigures(rule string, budget int, p *evoqProc, spans []span) FidelityRun {
	best, _ := bestUntil(spans, math.Inf(1))
	return FidelityRun{Rule: rule, Budget: budget, OK: p.sum.OK, Stopped: p.sum.Stopped, Best: best,
		SlotS: sig4(slotSecondsAt(spans, math.Inf(1))), WallS: sig4(p.wall.Seconds()), CPUShare: p.cpuShare()}
}

// decisionsAsked is the number of rung decisions a run's controller made.
func decisionsAsked(sum *runstate.Summary) int {
	n := 0
	if sum.EarlyStop != nil {
		for _, g := range sum.EarlyStop.Rungs {
			n += g.Reports
		}
	}
	return n
}

// readSpans reads run's results from the store in dir, which no process
// uses any more, and judges them by the counting rule.
func readSpans(ctx context.Context, dir, run string) ([]span, error) {
	results, verdicts, err := readResults(ctx, dir, run)
	if err != nil {
		return nil, err
	}
	return spansOf(results, verdicts), nil
}

// summarize computes the medians, the decision times and the verdicts.
func (f *Fidelity) summarize(answers []float64) {
	f.Medians = nil
	for i, rule := range f.Settings.Rules {
		var full []FidelityRun
		var runs []*FidelityRule
		for _, fs := range f.Seeds {
			full, runs = append(full, fs.Full), append(runs, fs.Rules[i])
			f.CPUShareMax = max(f.CPUShareMax, fs.Full.CPUShare, fs.Rules[i].CPUShare)
		}
		m := medianOver(rule, full, runs)
		f.Medians = append(f.Medians, m)
		if rule == schema.RuleASHA {
			f.ReachMet = m.ReachedShare != nil && *m.ReachedShare <= 0.35
			f.EqualMet = len(runs) > 0 && m.Delta >= 0
		}
	}
	f.Decisions = quantiles(answers)
}

// medianOver is the medians of one rule's runs, runs[i] beside the full
// run full[i] of the same seed.
func medianOver(rule string, full []FidelityRun, runs []*FidelityRule) *FidelityMedian {
	m := &FidelityMedian{Rule: rule}
	var shares, atEqual, fullBest, delta []float64
	for i, fr := range runs {
		share := math.Inf(1)
		if fr.Reached {
			share, m.Reached = fr.ReachedShare, m.Reached+1
		}
		if fr.Short {
			m.Short++
		}
		shares, atEqual = append(shares, share), append(atEqual, fr.BestAtEqual)
		fullBest, delta = append(fullBest, full[i].Best), append(delta, fr.Delta)
	}
	if s := median(shares); !math.IsInf(s, 1) && !math.IsNaN(s) {
		s = sig4(s)
		m.ReachedShare = &s
	}
	m.BestAtEqual, m.FullBest, m.Delta = median(atEqual), median(fullBest), median(delta)
	return m
}

// span is one stored result as the fidelity figures see it: its
// evaluation's time, in seconds from the run's first evaluation start,
// and whether it counts as an ok result, with its fitness.
type span struct {
	start, stop float64
	ok          bool
	fitness     float64
	// epochs is the training it bought, its epochs metric; 0 for an
	// evaluator that reports none.
	epochs int
}

// spansOf turns a run's results, in stream order with the counting rule's
// verdicts on them, into spans. Every evaluation a worker ran held its
// slot, whether its result counts or not (a duplicate, a retried
// failure), so all are in the slot-seconds; only a counted ok result has a
// fitness to compare. Malformed and foreign results are left out, and so
// are results without times: a lost design, which no worker finished.
func spansOf(results []*schema.Result, verdicts []runstate.Verdict) []span {
	var origin time.Time
	keep := func(i int) bool {
		v, r := verdicts[i], results[i]
		return v != runstate.Malformed && v != runstate.Foreign && r != nil &&
			!r.Start.IsZero() && !r.Stop.Before(r.Start)
	}
	for i, r := range results {
		if keep(i) && (origin.IsZero() || r.Start.Before(origin)) {
			origin = r.Start
		}
	}
	var out []span
	for i, r := range results {
		if !keep(i) {
			continue
		}
		out = append(out, span{start: r.Start.Sub(origin).Seconds(), stop: r.Stop.Sub(origin).Seconds(),
			ok: verdicts[i] == runstate.Counted && r.Status == schema.StatusOK, fitness: r.Fitness,
			epochs: metricInt(r.Metrics["epochs"])})
	}
	return out
}

// slotSecondsAt is the slot-seconds spent by time t: the sum over the
// spans of their overlap with [0, t].
func slotSecondsAt(spans []span, t float64) float64 {
	sum := 0.0
	for _, s := range spans {
		if s.start < t {
			sum += min(s.stop, t) - s.start
		}
	}
	return sum
}

// timeAtSlotSeconds is the first time by which want slot-seconds were
// spent. short: the spans add up to less; the time is then their end.
func timeAtSlotSeconds(spans []span, want float64) (t float64, short bool) {
	type edge struct {
		t     float64
		delta int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.stop, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmpFloat(a.t, b.t) })
	if len(edges) == 0 {
		return 0, want > 0
	}
	if want <= 0 {
		return edges[0].t, false
	}
	used, busy := 0.0, 0
	for i, e := range edges {
		if i > 0 && busy > 0 {
			// Between two edges the busy slots spend busy slot-seconds a second.
			step := float64(busy) * (e.t - edges[i-1].t)
			if used+step >= want {
				return edges[i-1].t + (want-used)/float64(busy), false
			}
			used += step
		}
		busy += e.delta
	}
	return edges[len(edges)-1].t, true
}

// firstReached is the end of the first ok span with fitness of at least
// target.
func firstReached(spans []span, target float64) (t float64, ok bool) {
	t = math.Inf(1)
	for _, s := range spans {
		if s.ok && s.fitness >= target && s.stop < t {
			t, ok = s.stop, true
		}
	}
	return t, ok
}

// bestUntil is the best fitness of the ok spans that ended by t.
func bestUntil(spans []span, t float64) (best float64, ok bool) {
	for _, s := range spans {
		if s.ok && s.stop <= t && (!ok || s.fitness > best) {
			best, ok = s.fitness, true
		}
	}
	return best, ok
}

// startedBy is the number of spans that started before t.
func startedBy(spans []span, t float64) int {
	n := 0
	for _, s := range spans {
		if s.start < t {
			n++
		}
	}
	return n
}

// compare measures a rule's spans against the full run's best and its
// slot-seconds.
func compare(spans []span, fullBest, fullSlotS float64) *FidelityRule {
	fr := &FidelityRule{}
	if fullSlotS > 0 {
		fr.Coverage = sig4(slotSecondsAt(spans, math.Inf(1)) / fullSlotS)
	}
	if t, ok := firstReached(spans, fullBest); ok && fullSlotS > 0 {
		fr.Reached, fr.ReachedSlotS = true, sig4(slotSecondsAt(spans, t))
		fr.ReachedShare = sig4(fr.ReachedSlotS / fullSlotS)
	}
	t, short := timeAtSlotSeconds(spans, fullSlotS)
	fr.BestAtEqual, _ = bestUntil(spans, t)
	fr.Delta = fr.BestAtEqual - fullBest
	fr.DesignsAtEqual, fr.Short = startedBy(spans, t), short
	return fr
}

// rungDecisionMsg is the message of the worker's debug line for each rung
// decision (worker/reports.go ask), whose answer_ms field is the time from
// its question to the controller's answer; TestRungDecisionText pins it to
// the worker's source.
const rungDecisionMsg = "rung decision"

// rungAnswers are the answer_ms of the rung decision lines in a JSON log.
// No other record has the figure: the worker stores no answer, and the
// controller's answer time leaves out the request's way to it and back.
func rungAnswers(log string) []float64 {
	var out []float64
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, rungDecisionMsg) {
			continue
		}
		var e struct {
			Msg      string   `json:"msg"`
			AnswerMs *float64 `json:"answer_ms"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == rungDecisionMsg && e.AnswerMs != nil {
			out = append(out, *e.AnswerMs)
		}
	}
	return out
}

// Quantiles describe a sample of times in milliseconds.
type Quantiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// quantiles of ms by nearest rank; nil for none.
func quantiles(ms []float64) *Quantiles {
	if len(ms) == 0 {
		return nil
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	rank := func(q float64) float64 { return sig4(s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]) }
	return &Quantiles{N: len(s), P50: rank(0.5), P99: rank(0.99), Max: sig4(s[len(s)-1])}
}

// median of xs, the mean of the middle two for an even count; NaN for
// none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
