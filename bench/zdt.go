package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// The zdt workload runs evoq on the built-in ZDT problems (30 variables,
// f1 and f2 minimized, the pool ranked by Pareto dominance) with evoq's
// default variation operators, and measures the hypervolume of the pool's
// front as a share of the true front's, partway and at the end of each
// run; beside it, the textbook generational NSGA-II (NSGA2) on the same
// problem, seeds and reference point, at the same numbers of evaluations.
//
// Both of evoq's figures come from one run: its results stream, read
// back from its store, is folded in stream order by the fold the
// controller uses (controller.NewFoldFor with the run's recorded
// settings), whose hypervolume is taken when the count of terminal
// designs reaches Early and at the end. The end value must equal the
// hypervolume of the run's own summary, and the fold's front the
// summary's: that the replay is the run is checked, not assumed.

// ZDTSettings are the zdt workload's runs.
type ZDTSettings struct {
	// Problems are the built-in problems, each a table; the target is
	// zdt1's.
	Problems []string `json:"problems"`
	Slots    int      `json:"slots"`
	Workers  int      `json:"workers"`
	Init     int      `json:"init"`
	Pool     int      `json:"pool"`
	// Budget is each run's evaluations; Early the evaluations of the
	// first figure.
	Budget int `json:"budget"`
	Early  int `json:"early"`
	Seeds  int `json:"seeds"`
	// NSGA2Pop is the textbook NSGA-II's population.
	NSGA2Pop int `json:"nsga2_pop"`
}

// The zdt workload's target, on zdt1's medians.
const (
	zdtEarlyTarget = 0.80
	zdtEndTarget   = 0.99
)

// zdtSettings are the zdt workload's runs, full or smoke: 16 slots in one
// worker process (evoq run's default; a ZDT evaluation is a few
// microseconds, so the run measures the controller and the broker, not
// the workers), a pool as large as NSGA-II's population and as many
// random initial designs, 20,000 evaluations. A run took 6.5 to 13 s on 2
// cores shared with other work.
// The smoke run is one seed of zdt1, 1,500 evaluations, the early figure
// at 1,000.
func zdtSettings(smoke bool, seeds int) ZDTSettings {
	s := ZDTSettings{Problems: []string{"zdt1", "zdt2"}, Slots: 16, Workers: 1, Init: 100, Pool: 100,
		Budget: 20000, Early: 5000, Seeds: 5, NSGA2Pop: 100}
	if smoke {
		s.Problems, s.Budget, s.Early, s.Seeds = []string{"zdt1"}, 1500, 1000, 1
	}
	if seeds > 0 {
		s.Seeds = seeds
	}
	return s
}

// args are the `evoq run` flags of seed's run on problem: no --crossover,
// --mutation-rate, --objectives or --hv-ref, so that the run has evoq's
// defaults for the problem.
func (s ZDTSettings) args(problem string, seed int) []string {
	return []string{"--run", zdtRunID(problem, seed), "--seed", strconv.Itoa(seed), "--evaluator", problem,
		"--slots", strconv.Itoa(s.Slots), "--workers", strconv.Itoa(s.Workers), "--wait-slots", strconv.Itoa(s.Slots),
		"--budget", strconv.Itoa(s.Budget), "--init", strconv.Itoa(s.Init), "--pool", strconv.Itoa(s.Pool)}
}

func zdtRunID(problem string, seed int) string { return problem + "-s" + strconv.Itoa(seed) }

// ZDT is the zdt workload's figures.
type ZDT struct {
	Settings ZDTSettings   `json:"settings"`
	Problems []*ZDTProblem `json:"problems"`
	// EarlyMet and EndMet say whether zdt1's median ratio was at least
	// 0.80 after Early evaluations and 0.99 after Budget; the VsNSGA2
	// pair whether it was at least NSGA-II's median there. Met is all
	// four.
	EarlyMet        bool `json:"early_met"`
	EndMet          bool `json:"end_met"`
	EarlyVsNSGA2Met bool `json:"early_vs_nsga2_met"`
	EndVsNSGA2Met   bool `json:"end_vs_nsga2_met"`
	Met             bool `json:"met"`
}

// ZDTProblem is one problem's runs.
type ZDTProblem struct {
	Problem string `json:"problem"`
	// HVRef is the runs' reference point (their record's), TrueHV the
	// true front's hypervolume from it, the ratios' divisor.
	HVRef  []float64 `json:"hv_ref"`
	TrueHV float64   `json:"true_hypervolume"`
	// Bound is the largest ratio a front of Pool points on the true front
	// can reach (frontBound): neither search's front has more.
	Bound  float64    `json:"bound"`
	Seeds  []*ZDTSeed `json:"seeds"`
	Median ZDTMedian  `json:"median"`
}

// ZDTSeed is one seed's evoq run and NSGA-II run.
type ZDTSeed struct {
	Seed int `json:"seed"`
	// Variation is the operators the evoq run used, from its record, and
	// Operators the same in words (controller.VariationText).
	Variation *schema.Variation `json:"variation"`
	Operators string            `json:"operators"`
	// Evaluations is the designs the replay counted, EarlyAt its count
	// when EvoqEarly was taken.
	Evaluations int `json:"evaluations"`
	EarlyAt     int `json:"early_at"`
	// EvoqEarly and EvoqEnd are the evoq run's hypervolume ratios after
	// EarlyAt and Evaluations designs; Hypervolume is its hypervolume at
	// the end (equal to its summary's) and Front the size of its front.
	EvoqEarly   float64 `json:"evoq_early"`
	EvoqEnd     float64 `json:"evoq_end"`
	Hypervolume float64 `json:"hypervolume"`
	Front       int     `json:"front"`
	// NSGA2Early and NSGA2End are NSGA-II's ratios after NSGA2EarlyAt
	// and NSGA2Evaluations evaluations.
	NSGA2Early       float64 `json:"nsga2_early"`
	NSGA2End         float64 `json:"nsga2_end"`
	NSGA2EarlyAt     int     `json:"nsga2_early_at"`
	NSGA2Evaluations int     `json:"nsga2_evaluations"`
	// EvalsPerS is the evoq run's summary's; WallS and CPUShare its
	// process's.
	EvalsPerS float64 `json:"evals_per_s"`
	WallS     float64 `json:"wall_s"`
	CPUShare  float64 `json:"cpu_share"`
}

// ZDTMedian is the medians of a problem's per-seed figures.
type ZDTMedian struct {
	EvoqEarly  float64 `json:"evoq_early"`
	EvoqEnd    float64 `json:"evoq_end"`
	NSGA2Early float64 `json:"nsga2_early"`
	NSGA2End   float64 `json:"nsga2_end"`
	EvalsPerS  float64 `json:"evals_per_s"`
}

// runZDT runs the zdt workload: per problem and seed the evoq run, its
// replay, then NSGA-II.
func (r *runner) runZDT(ctx context.Context, row *Row) error {
	s := zdtSettings(r.cfg.Smoke, r.cfg.Seeds)
	fig := &ZDT{Settings: s}
	row.ZDT = fig
	for _, problem := range s.Problems {
		zp := &ZDTProblem{Problem: problem}
		fig.Problems = append(fig.Problems, zp)
		for seed := 1; seed <= s.Seeds; seed++ {
			fmt.Fprintf(r.cfg.Log, "evoq bench: zdt: %s seed %d of %d\n", problem, seed, s.Seeds)
			zs, err := r.zdtSeed(ctx, s, zp, seed)
			if err != nil {
				return fmt.Errorf("%s seed %d: %w", problem, seed, err)
			}
			zp.Seeds = append(zp.Seeds, zs)
		}
		zp.Bound = frontBound(problem, s.Pool, zp.HVRef)
	}
	fig.summarize()
	return nil
}

// zdtSeed runs seed's evoq run on zp's problem, replays it, and runs
// NSGA-II from the same reference point. The first seed sets zp's
// reference point; every later one must have the same.
func (r *runner) zdtSeed(ctx context.Context, s ZDTSettings, zp *ZDTProblem, seed int) (*ZDTSeed, error) {
	run := zdtRunID(zp.Problem, seed)
	dir := filepath.Join(r.cfg.Dir, "zdt", run)
	p, err := r.evoqRunIn(ctx, dir, s.args(zp.Problem, seed))
	if err != nil {
		return nil, err
	}
	rp, err := replayZDT(ctx, dir, run, zp.Problem, s.Early)
	if err != nil {
		return nil, err
	}
	if err := rp.check(p.sum); err != nil {
		return nil, fmt.Errorf("the replay is not the run: %w", err)
	}
	if rp.rec.Init != s.Init || rp.rec.Pool != s.Pool || rp.rec.Budget != s.Budget {
		return nil, fmt.Errorf("run recorded --init %d --pool %d --budget %d, want %d, %d, %d",
			rp.rec.Init, rp.rec.Pool, rp.rec.Budget, s.Init, s.Pool, s.Budget)
	}
	switch {
	case zp.HVRef == nil:
		zp.HVRef, zp.TrueHV = rp.ref, rp.trueHV
	case !slices.Equal(zp.HVRef, rp.ref):
		return nil, fmt.Errorf("reference point %v, seed 1's was %v", rp.ref, zp.HVRef)
	}
	zs := &ZDTSeed{Seed: seed, Variation: rp.rec.Variation, Operators: runstate.VariationText(rp.rec.Variation),
		Evaluations: rp.evaluations, EarlyAt: rp.earlyAt, EvoqEarly: rp.earlyHV / rp.trueHV,
		EvoqEnd: rp.endHV / rp.trueHV, Hypervolume: rp.endHV, Front: rp.front,
		EvalsPerS: p.sum.EvalsPerS, WallS: sig4(p.wall.Seconds()), CPUShare: p.cpuShare()}
	curve := NSGA2(NSGA2Settings{Pop: s.NSGA2Pop, Evaluations: s.Budget, Seed: uint64(seed)},
		zdtProblems[zp.Problem], [2]float64{zp.HVRef[0], zp.HVRef[1]})
	early, end := nsga2At(curve, s.Early), curve[len(curve)-1]
	zs.NSGA2Early, zs.NSGA2EarlyAt = early.Hypervolume/zp.TrueHV, early.Evaluations
	zs.NSGA2End, zs.NSGA2Evaluations = end.Hypervolume/zp.TrueHV, end.Evaluations
	return zs, nil
}

// zdtProblems are the problems' objective functions.
var zdtProblems = map[string]func([]float64) [2]float64{"zdt1": pareto.ZDT1, "zdt2": pareto.ZDT2}

// nsga2At is the last point of curve with at most evals evaluations, the
// first if none.
func nsga2At(curve []NSGA2Point, evals int) NSGA2Point {
	at := curve[0]
	for _, p := range curve {
		if p.Evaluations <= evals {
			at = p
		}
	}
	return at
}

// zdtReplay is what the replay of one run found.
type zdtReplay struct {
	rec *schema.Run
	// ref is the fold's reference point, in the objectives' units, and
	// trueHV the true front's hypervolume from it.
	ref    []float64
	trueHV float64
	// earlyHV is the hypervolume when earlyAt designs had counted, endHV
	// when all evaluations had.
	earlyHV, endHV       float64
	earlyAt, evaluations int
	front                int
	frontDigest          string
}

// replayZDT folds run's results stream in the store in dir, which no
// process uses any more, in stream order, with the fold the controller
// builds from the run's record, and takes its hypervolume when early
// designs have counted and at the end.
func replayZDT(ctx context.Context, dir, run, problem string, early int) (*zdtReplay, error) {
	rd, err := history.Open(ctx, history.Source{Dir: dir})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	ri, err := rd.Pick(ctx, run)
	if err != nil {
		return nil, err
	}
	rec := ri.Run
	if rec == nil {
		return nil, fmt.Errorf("run %s's record: %w", run, ri.Err)
	}
	obj, err := runstate.ObjectivesOf(rec)
	if err != nil {
		return nil, fmt.Errorf("run %s's objectives: %w", run, err)
	}
	if !obj.Pareto() {
		return nil, fmt.Errorf("run %s has objectives %s: want several", run, obj)
	}
	fold := runstate.NewFoldFor(runstate.NewTally(ri.ID, ri.Budget, runstate.RulesOf(rec)),
		rec.Init, rec.Pool, runstate.Replace(rec.Replace), obj, rec.HVRef)
	rp := &zdtReplay{rec: rec}
	err = rd.Results(ctx, run, func(_ uint64, _ time.Time, res *schema.Result, err error) error {
		if fold.Apply(res, err) != runstate.Counted || fold.Terminal() != early {
			return nil
		}
		hv, _, ok := fold.Hypervolume()
		if !ok {
			return fmt.Errorf("no hypervolume after %d designs", early)
		}
		rp.earlyHV, rp.earlyAt = hv, early
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the results of %s: %w", run, err)
	}
	rp.evaluations = fold.Terminal()
	if rp.earlyAt == 0 {
		return nil, fmt.Errorf("run %s counted %d designs, not the %d of the early figure", run, rp.evaluations, early)
	}
	hv, ref, ok := fold.Hypervolume()
	if !ok {
		return nil, fmt.Errorf("run %s: no hypervolume at the end", run)
	}
	rp.endHV, rp.ref = hv, ref
	rp.trueHV = pareto.TrueHypervolumeAt(problem, obj.List(), ref)
	if math.IsNaN(rp.trueHV) || rp.trueHV <= 0 {
		return nil, fmt.Errorf("run %s: no true front of %s for objectives %s and reference point %v", run, problem, obj, ref)
	}
	rp.front, rp.frontDigest = len(fold.Pool().Front()), fold.Pool().FrontDigest()
	return rp, nil
}

// errZDTCheck is a replay that does not agree with the run's summary.
var errZDTCheck = errors.New("replay and summary disagree")

// check compares the replay's end with the run's summary: the same
// designs counted, the same front and the same hypervolume, to the bit.
func (rp *zdtReplay) check(sum *runstate.Summary) error {
	switch {
	case sum.Pareto == nil || sum.Hypervolume == nil:
		return fmt.Errorf("%w: the summary has no hypervolume", errZDTCheck)
	case sum.Evaluations != rp.evaluations:
		return fmt.Errorf("%w: %d evaluations in the summary, %d replayed", errZDTCheck, sum.Evaluations, rp.evaluations)
	case sum.FrontDigest != rp.frontDigest || len(sum.Front) != rp.front:
		return fmt.Errorf("%w: front %s of %d designs in the summary, %s of %d replayed", errZDTCheck,
			sum.FrontDigest, len(sum.Front), rp.frontDigest, rp.front)
	case *sum.Hypervolume != rp.endHV:
		return fmt.Errorf("%w: hypervolume %v in the summary, %v replayed", errZDTCheck, *sum.Hypervolume, rp.endHV)
	case !slices.Equal(sum.HVRef, rp.ref):
		return fmt.Errorf("%w: reference point %v in the summary, %v replayed", errZDTCheck, sum.HVRef, rp.ref)
	case sum.HypervolumeRatio == nil:
		return fmt.Errorf("%w: the summary has no hypervolume ratio", errZDTCheck)
	case math.Abs(*sum.HypervolumeRatio-rp.endHV/rp.trueHV) > 1e-6: // the summary's has 6 decimals
		return fmt.Errorf("%w: hypervolume ratio %v in the summary, %v replayed", errZDTCheck,
			*sum.HypervolumeRatio, rp.endHV/rp.trueHV)
	}
	return nil
}

// summarize computes the medians and, on zdt1's, the verdicts.
func (z *ZDT) summarize() {
	z.EarlyMet, z.EndMet, z.EarlyVsNSGA2Met, z.EndVsNSGA2Met, z.Met = false, false, false, false, false
	for _, zp := range z.Problems {
		var ee, ea, ne, na, rate []float64
		for _, zs := range zp.Seeds {
			ee, ea = append(ee, zs.EvoqEarly), append(ea, zs.EvoqEnd)
			ne, na = append(ne, zs.NSGA2Early), append(na, zs.NSGA2End)
			rate = append(rate, zs.EvalsPerS)
		}
		zp.Median = ZDTMedian{EvoqEarly: median(ee), EvoqEnd: median(ea), NSGA2Early: median(ne),
			NSGA2End: median(na), EvalsPerS: median(rate)}
		if zp.Problem != "zdt1" || len(zp.Seeds) == 0 {
			continue
		}
		m := zp.Median
		z.EarlyMet, z.EndMet = m.EvoqEarly >= zdtEarlyTarget, m.EvoqEnd >= zdtEndTarget
		z.EarlyVsNSGA2Met, z.EndVsNSGA2Met = m.EvoqEarly >= m.NSGA2Early, m.EvoqEnd >= m.NSGA2End
		z.Met = z.EarlyMet && z.EndMet && z.EarlyVsNSGA2Met && z.EndVsNSGA2Met
	}
}

// zdtFronts are the problems' true fronts, f2 of f1 in [0, 1].
var zdtFronts = map[string]func(float64) float64{
	"zdt1": func(x float64) float64 { return 1 - math.Sqrt(x) },
	"zdt2": func(x float64) float64 { return 1 - x*x },
}

// frontBound is the largest hypervolume ratio that n points can reach on
// problem's true front from the reference point ref (r1, r2, each at
// least 1): the hypervolume of the best n points of the front over the
// whole front's. NaN for another problem or point.
//
// n points at f1 = x1 < ... < xn dominate the sum of the rectangles
// (x(i+1) - xi) (r2 - front(xi)), with x(n+1) = r1, and are placed to
// make it largest by coordinate ascent. The optimum's first point lies
// right of 0 on ZDT1, where the front is vertical; for 100 points from
// (1.1, 1.1) it is 0.9948401314 of the whole front, where 100 points
// evenly spaced from 0 to 1 reach 0.9940031 (a shooting method on the
// optimum's equations, in Python, gave the same to 11 digits).
func frontBound(problem string, n int, ref []float64) float64 {
	front, ok := zdtFronts[problem]
	if !ok || n < 1 || len(ref) != 2 || ref[0] < 1 || ref[1] < 1 {
		return math.NaN()
	}
	r1, r2 := ref[0], ref[1]
	x := make([]float64, n)
	for i := range x {
		x[i] = (float64(i) + 0.5) / float64(n)
	}
	// gain is what point i adds with xi at v: the rectangle its left
	// neighbour dominates up to v, and its own up to the next point.
	gain := func(i int, v float64) float64 {
		next := r1
		if i+1 < n {
			next = x[i+1]
		}
		g := (next - v) * (r2 - front(v))
		if i > 0 {
			g += (v - x[i-1]) * (r2 - front(x[i-1]))
		}
		return g
	}
	hv := func() float64 {
		s := 0.0
		for i := range x {
			next := r1
			if i+1 < n {
				next = x[i+1]
			}
			s += (next - x[i]) * (r2 - front(x[i]))
		}
		return s
	}
	// Each point goes to its best place between its neighbours, over-
	// relaxed (sorOmega) since the points move together: a step of one
	// moves its neighbours' best places the same way. Every sweep's
	// points are a front, so the best of their hypervolumes is one n
	// points reach; the sweeps stop when no point moves.
	const scan, sorOmega, phi = 16, 1.9, 0.6180339887498949
	best := hv()
	for sweep := 0; sweep < 10000; sweep++ {
		moved := 0.0
		for i := range x {
			lo, hi := 0.0, 1.0
			if i > 0 {
				lo = x[i-1]
			}
			if i+1 < n {
				hi = x[i+1]
			}
			// The scan finds the best of scan+1 places; the golden
			// section refines it between that one's neighbours.
			at := x[i]
			for k := 0; k <= scan; k++ {
				if v := lo + (hi-lo)*float64(k)/scan; gain(i, v) > gain(i, at) {
					at = v
				}
			}
			a, b := max(lo, at-(hi-lo)/scan), min(hi, at+(hi-lo)/scan)
			for b-a > 1e-13 {
				if c, d := b-phi*(b-a), a+phi*(b-a); gain(i, c) >= gain(i, d) {
					b = d
				} else {
					a = c
				}
			}
			if v := (a + b) / 2; gain(i, v) > gain(i, at) {
				at = v
			}
			v := min(max(x[i]+sorOmega*(at-x[i]), lo), hi)
			moved, x[i] = max(moved, math.Abs(v-x[i])), v
		}
		best = max(best, hv())
		if moved < 1e-12 {
			break
		}
	}
	return best / pareto.TrueHypervolumeAt(problem, []pareto.Objective{{Name: "f1"}, {Name: "f2"}}, ref)
}

// Print prints the zdt workload's tables, one per problem, then zdt1's
// target, half by half; a smoke run's is not judged.
func (z *ZDT) Print(out io.Writer, smoke bool) {
	s := z.Settings
	procs := map[bool]string{true: "1 worker process", false: fmt.Sprintf("%d worker processes", s.Workers)}[s.Workers == 1]
	fmt.Fprintf(out, "  evoq run --evaluator <problem>: %d slots in %s, --init %d --pool %d, %d evaluations a run; seeds 1..%d\n",
		s.Slots, procs, s.Init, s.Pool, s.Budget, s.Seeds)
	fmt.Fprintf(out, "  nsga2: the textbook generational NSGA-II (bench.NSGA2), population %d, SBX p=%g eta %g, polynomial mutation 1/n eta %g\n",
		s.NSGA2Pop, float64(NSGA2CrossoverDefault), float64(NSGA2CrossEtaDefault), float64(NSGA2MutEtaDefault))
	fmt.Fprintf(out, "  figures: hypervolume of the front over the true front's, after %d and %d evaluations", s.Early, s.Budget)
	if smoke {
		fmt.Fprintf(out, " (smoke run: the early figure at %d evaluations, not 5000)", s.Early)
	}
	fmt.Fprintln(out)
	for _, zp := range z.Problems {
		ops := map[string]bool{}
		var list []string
		for _, zs := range zp.Seeds {
			if !ops[zs.Operators] {
				ops[zs.Operators] = true
				list = append(list, zs.Operators)
			}
		}
		fmt.Fprintf(out, "  %s: reference point %v, true front's hypervolume %.6g; evoq's operators (the runs' records): %s\n",
			zp.Problem, zp.HVRef, zp.TrueHV, strings.Join(list, "; "))
		w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintf(w, "  seed\tevoq@%d\tevoq@%d\tnsga2@%d\tnsga2@%d\tevals/s\tfront\twall s\tcpu\n", s.Early, s.Budget, s.Early, s.Budget)
		for _, zs := range zp.Seeds {
			fmt.Fprintf(w, "  %d\t%.4f\t%.4f\t%.4f\t%.4f\t%g\t%d\t%g\t%g\n", zs.Seed, zs.EvoqEarly, zs.EvoqEnd,
				zs.NSGA2Early, zs.NSGA2End, zs.EvalsPerS, zs.Front, zs.WallS, zs.CPUShare)
		}
		m := zp.Median
		fmt.Fprintf(w, "  median\t%.4f\t%.4f\t%.4f\t%.4f\t%g\t\t\t\n", m.EvoqEarly, m.EvoqEnd, m.NSGA2Early, m.NSGA2End, m.EvalsPerS)
		w.Flush()
		fmt.Fprintf(out, "  %s: the best front of %d points reaches %.4f\n", zp.Problem, s.Pool, zp.Bound)
	}
	if smoke || len(z.Problems) == 0 || z.Problems[0].Problem != "zdt1" {
		return
	}
	m := z.Problems[0].Median
	fmt.Fprintf(out, "  zdt1, median of %d seeds: >= %.2f after %d evaluations (%.4f): %s; >= %.2f after %d (%.4f): %s\n",
		s.Seeds, zdtEarlyTarget, s.Early, m.EvoqEarly, verdictText(z.EarlyMet), zdtEndTarget, s.Budget, m.EvoqEnd, verdictText(z.EndMet))
	fmt.Fprintf(out, "  zdt1, at least nsga2's: after %d (%.4f against %.4f): %s; after %d (%.4f against %.4f): %s\n",
		s.Early, m.EvoqEarly, m.NSGA2Early, verdictText(z.EarlyVsNSGA2Met), s.Budget, m.EvoqEnd, m.NSGA2End, verdictText(z.EndVsNSGA2Met))
}

func verdictText(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}
