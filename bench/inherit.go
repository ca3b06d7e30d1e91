package bench

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"time"

	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// The inherit workload runs the same search twice per seed on the
// built-in mlp evaluator, once training every design from scratch and
// once with --inherit, and compares the slot-seconds each needed to find
// what the from-scratch search found. The two runs have the same seed,
// run ID, slots and design budget: their random initial designs are the
// same, and each design trains the epochs its genome says whether it
// inherited or not, so equal designs are an equal budget of training
// steps (each run's Epochs says how many it trained).
//
// A run's slot-seconds by one of its results are counted in the results
// stream's order: the time inside every evaluation stored up to and
// including that result, from its start to its stop as the worker timed
// it. That is the training the search had finished when it learnt of the
// result; a design still running in another slot then is left out, in
// both runs alike.

// InheritSettings are the inherit workload's runs.
type InheritSettings struct {
	Slots   int `json:"slots"`
	Workers int `json:"workers"`
	Budget  int `json:"budget"`
	Init    int `json:"init"`
	Pool    int `json:"pool"`
	Seeds   int `json:"seeds"`
}

// Run modes of the inherit workload.
const (
	modeScratch = "scratch"
	modeInherit = "inherit"
)

// inheritShareTarget is the target: the inheriting run reaches the
// from-scratch run's best in at most this share of the slot-seconds the
// from-scratch run needed for it.
const inheritShareTarget = 0.6

// inheritSettings are the inherit workload's runs, full or smoke. They
// are what a user of the built-in space would pick, not tuned to the
// target: evoq run's default slots (2, one per core of the benchmark
// machine, as mlp training is single-threaded and CPU-bound) in its
// default single worker process, its default --init 20 and --pool 10,
// and 300 designs, a few hundred being what a user gives a search of a
// space this size (evoq run's default budget is 200). A run took 12 to
// 58 s on 2 cores: the designs' epochs and widths vary that much.
func inheritSettings(smoke bool, seeds int) InheritSettings {
	s := InheritSettings{Slots: 2, Workers: 1, Budget: 300, Init: runstate.InitDefault,
		Pool: runstate.PoolDefault, Seeds: 5}
	if smoke {
		s.Budget, s.Init, s.Pool, s.Seeds = 30, 10, 5, 1
	}
	if seeds > 0 {
		s.Seeds = seeds
	}
	return s
}

// args are the `evoq run` flags of seed's run in mode; the two runs of a
// seed differ in --inherit alone.
func (s InheritSettings) args(seed int, mode string) []string {
	args := []string{"--run", inheritRunID(seed), "--seed", strconv.Itoa(seed), "--evaluator", "mlp",
		"--slots", strconv.Itoa(s.Slots), "--workers", strconv.Itoa(s.Workers), "--wait-slots", strconv.Itoa(s.Slots),
		"--budget", strconv.Itoa(s.Budget), "--init", strconv.Itoa(s.Init), "--pool", strconv.Itoa(s.Pool)}
	if mode == modeInherit {
		args = append(args, "--inherit")
	}
	return args
}

func inheritRunID(seed int) string { return "inherit-s" + strconv.Itoa(seed) }

// Inherit is the inherit workload's figures.
type Inherit struct {
	Settings InheritSettings `json:"settings"`
	Seeds    []*InheritSeed  `json:"seeds"`
	// Reached is the number of seeds whose inheriting run reached the
	// from-scratch run's best; Share the median of their Share, a seed
	// that never did counting as infinite, so nil when most never did.
	Reached int      `json:"reached"`
	Share   *float64 `json:"share"`
	// ScratchBest, InheritBest, BestDelta and InheritedShare are the
	// medians of the per-seed figures: BestDelta is the median of the
	// differences, not the difference of the medians.
	ScratchBest    float64 `json:"scratch_best"`
	InheritBest    float64 `json:"inherit_best"`
	BestDelta      float64 `json:"best_delta"`
	InheritedShare float64 `json:"inherited_share"`
	// CPUShareMax is the largest CPUShare of the runs.
	CPUShareMax float64 `json:"cpu_share_max"`
	// Met says whether Share is at most 0.6.
	Met bool `json:"met"`
}

// InheritSeed is one seed's two runs.
type InheritSeed struct {
	Seed    int        `json:"seed"`
	Scratch InheritRun `json:"scratch"`
	Inherit InheritRun `json:"inherit"`
	// Reached says whether the inheriting run had an ok result at least
	// as good as the from-scratch run's best; ReachedSlotS is its
	// slot-seconds by the first such result, ReachedResults the results
	// stored by then, and Share ReachedSlotS over the from-scratch run's
	// BestSlotS. Not reached: they are 0, and TotalShare is the
	// inheriting run's whole slot-seconds over that BestSlotS, what it
	// spent without getting there.
	Reached        bool    `json:"reached"`
	ReachedSlotS   float64 `json:"reached_slot_s"`
	ReachedResults int     `json:"reached_results"`
	Share          float64 `json:"share"`
	TotalShare     float64 `json:"total_share,omitempty"`
	// BestDelta is the inheriting run's best minus the from-scratch
	// run's.
	BestDelta float64 `json:"best_delta"`
}

// InheritRun is one run's own figures.
type InheritRun struct {
	Mode       string `json:"mode"` // scratch or inherit
	OK         int    `json:"ok"`
	Infeasible int    `json:"infeasible"`
	// Best is its best ok fitness; BestSlotS its slot-seconds by the
	// first result that good and BestResults the results stored by then;
	// SlotS its slot-seconds over the whole run.
	Best        float64 `json:"best"`
	BestSlotS   float64 `json:"best_slot_s"`
	BestResults int     `json:"best_results"`
	SlotS       float64 `json:"slot_s"`
	// Epochs is the epochs its counted ok designs trained.
	Epochs int `json:"epochs"`
	// Mutants is its counted mutants that trained (ok or stopped),
	// Inherited those that started from their parent's weights,
	// InheritedShare the one over the other (the controller's checkpoint
	// summary; 0 without --inherit).
	Mutants        int     `json:"mutants"`
	Inherited      int     `json:"inherited"`
	InheritedShare float64 `json:"inherited_share"`
	WallS          float64 `json:"wall_s"`
	CPUShare       float64 `json:"cpu_share"`
}

// runInherit runs the inherit workload: per seed the from-scratch run,
// then the inheriting one.
func (r *runner) runInherit(ctx context.Context, row *Row) error {
	s := inheritSettings(r.cfg.Smoke, r.cfg.Seeds)
	fig := &Inherit{Settings: s}
	row.Inherit = fig
	for seed := 1; seed <= s.Seeds; seed++ {
		fmt.Fprintf(r.cfg.Log, "evoq bench: inherit: seed %d of %d\n", seed, s.Seeds)
		scratch, _, err := r.inheritRun(ctx, s, seed, modeScratch)
		if err != nil {
			return fmt.Errorf("seed %d: %w", seed, err)
		}
		inherit, inheritSpans, err := r.inheritRun(ctx, s, seed, modeInherit)
		if err != nil {
			return fmt.Errorf("seed %d: %w", seed, err)
		}
		fig.Seeds = append(fig.Seeds, compareInherit(seed, scratch, inherit, inheritSpans))
	}
	fig.summarize()
	return nil
}

// inheritRun runs seed's run in mode and reads its results back from its
// store.
func (r *runner) inheritRun(ctx context.Context, s InheritSettings, seed int, mode string) (InheritRun, []span, error) {
	dir := filepath.Join(r.cfg.Dir, "inherit", fmt.Sprintf("s%d-%s", seed, mode))
	p, err := r.evoqRunIn(ctx, dir, s.args(seed, mode))
	if err != nil {
		return InheritRun{}, nil, err
	}
	results, verdicts, err := readResults(ctx, dir, inheritRunID(seed))
	if err != nil {
		return InheritRun{}, nil, fmt.Errorf("%s run: %w", mode, err)
	}
	run, spans := inheritFigures(mode, p, results, verdicts)
	return run, spans, nil
}

// inheritFigures are a run's figures in mode, from its process and its
// results with their verdicts, and its spans.
func inheritFigures(mode string, p *evoqProc, results []*schema.Result, verdicts []runstate.Verdict) (InheritRun, []span) {
	spans := spansOf(results, verdicts)
	run := InheritRun{Mode: mode, OK: p.sum.OK, Infeasible: p.sum.Infeasible, Epochs: epochsTrained(results, verdicts),
		WallS: sig4(p.wall.Seconds()), CPUShare: p.cpuShare()}
	run.Best, _ = bestUntil(spans, math.Inf(1))
	slotS, n, _ := reachedInStream(spans, run.Best)
	run.BestSlotS, run.BestResults = sig4(slotS), n
	run.SlotS = sig4(streamSlotSeconds(spans))
	if c := p.sum.Checkpoints; c != nil && c.Mutants > 0 {
		run.Mutants, run.Inherited = c.Mutants, c.Inherited
		run.InheritedShare = sig4(float64(c.Inherited) / float64(c.Mutants))
	}
	return run, spans
}

// compareInherit measures seed's inheriting run, whose spans are given,
// against its from-scratch run.
func compareInherit(seed int, scratch, inherit InheritRun, spans []span) *InheritSeed {
	is := &InheritSeed{Seed: seed, Scratch: scratch, Inherit: inherit, BestDelta: inherit.Best - scratch.Best}
	slotS, n, ok := reachedInStream(spans, scratch.Best)
	switch {
	case scratch.BestSlotS <= 0:
		// The from-scratch run has no best to reach, or reached it for
		// nothing: there is no share to give.
	case ok:
		is.Reached, is.ReachedSlotS, is.ReachedResults = true, sig4(slotS), n
		is.Share = sig4(slotS / scratch.BestSlotS)
	default:
		is.TotalShare = sig4(slotS / scratch.BestSlotS)
	}
	return is
}

// summarize computes the medians and the verdict.
func (f *Inherit) summarize() {
	var shares, scratchBest, inheritBest, delta, inherited []float64
	f.Reached, f.CPUShareMax = 0, 0
	for _, is := range f.Seeds {
		share := math.Inf(1)
		if is.Reached {
			share, f.Reached = is.Share, f.Reached+1
		}
		shares = append(shares, share)
		scratchBest, inheritBest = append(scratchBest, is.Scratch.Best), append(inheritBest, is.Inherit.Best)
		delta, inherited = append(delta, is.BestDelta), append(inherited, is.Inherit.InheritedShare)
		f.CPUShareMax = max(f.CPUShareMax, is.Scratch.CPUShare, is.Inherit.CPUShare)
	}
	f.Share = nil
	if s := median(shares); !math.IsInf(s, 1) && !math.IsNaN(s) {
		s = sig4(s)
		f.Share = &s
	}
	f.ScratchBest, f.InheritBest = median(scratchBest), median(inheritBest)
	f.BestDelta, f.InheritedShare = median(delta), median(inherited)
	f.Met = f.Share != nil && *f.Share <= inheritShareTarget
}

// reachedInStream is the slot-seconds of the spans, in stream order, up
// to and including the first ok one with fitness of at least target, and
// how many spans that is. Not ok: none is that good, and the figures are
// those of all the spans.
func reachedInStream(spans []span, target float64) (slotS float64, n int, ok bool) {
	for i, s := range spans {
		slotS += s.stop - s.start
		if s.ok && s.fitness >= target {
			return slotS, i + 1, true
		}
	}
	return slotS, len(spans), false
}

// streamSlotSeconds is the slot-seconds of all the spans.
func streamSlotSeconds(spans []span) float64 {
	sum := 0.0
	for _, s := range spans {
		sum += s.stop - s.start
	}
	return sum
}

// epochsTrained is the sum of the epochs metric of the counted ok
// results: the training steps the run bought.
func epochsTrained(results []*schema.Result, verdicts []runstate.Verdict) int {
	n := 0
	for i, r := range results {
		if verdicts[i] == runstate.Counted && r != nil && r.Status == schema.StatusOK {
			n += metricInt(r.Metrics["epochs"])
		}
	}
	return n
}

// metricInt is a whole-number metric as a stored result holds it: the
// codec returns the smallest integer kind that fits, or a float from JSON.
func metricInt(v any) int {
	switch x := v.(type) {
	case int64:
		return int(x)
	case int32:
		return int(x)
	case int16:
		return int(x)
	case int8:
		return int(x)
	case int:
		return x
	case uint64:
		return int(x)
	case uint32:
		return int(x)
	case uint16:
		return int(x)
	case uint8:
		return int(x)
	case float64:
		return int(x)
	}
	return 0
}

// readResults reads run's results from the store in dir, which no process
// uses any more, in stream order, with the counting rule's verdict on
// each.
func readResults(ctx context.Context, dir, run string) ([]*schema.Result, []runstate.Verdict, error) {
	rd, err := history.Open(ctx, history.Source{Dir: dir})
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	ri, err := rd.Pick(ctx, run)
	if err != nil {
		return nil, nil, err
	}
	tally := runstate.NewTally(ri.ID, ri.Budget, runstate.RulesOf(ri.Run))
	var results []*schema.Result
	var verdicts []runstate.Verdict
	err = rd.Results(ctx, run, func(_ uint64, _ time.Time, res *schema.Result, err error) error {
		results, verdicts = append(results, res), append(verdicts, tally.Judge(res, err))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the results of %s: %w", run, err)
	}
	return results, verdicts, nil
}
