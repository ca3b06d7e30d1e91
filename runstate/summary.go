package runstate

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// EarlyStopSummary is what the run's early-stopping rule did.
type EarlyStopSummary struct {
	Rule    string      `json:"rule"`
	Reports int         `json:"reports"`
	Stops   int         `json:"stops"`
	Digest  string      `json:"rungs_digest"`
	Rungs   []RungStats `json:"rungs"`
}

// Summarize is the rule's summary from rungs.
func Summarize(g *Rungs) *EarlyStopSummary {
	return &EarlyStopSummary{Rule: EarlyStopText(g.Rule()), Reports: g.Reports(), Stops: g.Stops(), Digest: g.Digest(), Rungs: g.Stats()}
}

// Summary is the outcome of a run; its JSON form is what `evoq run --json`
// prints last.
type Summary struct {
	Run string `json:"run"`
	// StopReason is why the run ended: budget, target, plateau, time,
	// failed or interrupted; "" while it runs.
	StopReason  schema.StopReason `json:"stop_reason"`
	Evaluations int               `json:"evaluations"` // designs with a terminal result
	OK          int               `json:"ok"`
	Infeasible  int               `json:"infeasible"`
	Error       int               `json:"error"`
	Timeout     int               `json:"timeout"`
	Lost        int               `json:"lost"`
	// Stopped is the number of designs the early-stopping rule stopped.
	Stopped int `json:"stopped"`
	// Retried is the number of failed attempts retried instead of
	// counted, and Quarantined the slots the results left quarantined,
	// as worker/slot.
	Retried     int      `json:"retried"`
	Quarantined []string `json:"quarantined,omitempty"`
	// BestFitness is null when no design evaluated ok.
	BestFitness *float64       `json:"best_fitness"`
	Best        map[string]any `json:"best"` // the best design's genome
	BestID      string         `json:"best_id,omitempty"`
	// BestRandomFitness is the best of the random (initial) designs.
	BestRandomFitness *float64 `json:"best_random_fitness"`
	// WallS is this controller's own time: from its first design
	// published, or, when it resumed a run that already had designs
	// published, from the end of its replay, to the summary (for a run
	// done, its last result). WaitFirstSlotS is the part of it before a
	// slot was first live (workers that join late). EvalsPerS is the
	// evaluations this controller counted itself over its working time,
	// WallS less WaitFirstSlotS: evaluations per second of work, not of
	// waiting for workers. Results replayed after a restart count in
	// Evaluations, not here. So after a restart these describe this
	// controller's share of the run, its throughput unmixed with the time
	// no controller ran; `evoq report` shows the run's whole span.
	WallS          float64 `json:"wall_s"`
	WaitFirstSlotS float64 `json:"wait_first_slot_s"`
	EvalsPerS      float64 `json:"evals_per_s"`
	// Slots is the largest number of slots live at once: by their
	// workers' heartbeats while this controller ran, each worker from the
	// heartbeat that made it live to its last, or by the results (each
	// slot from its worker's first design to its own last), whichever is
	// more. SlotsUsed is the slots that evaluated a counted design in the
	// run: a worker started again has a new ID, so its slots count again.
	Slots     int `json:"slots"`
	SlotsUsed int `json:"slots_used"`
	// UtilSteady is the busy slot-time over the slot-time slots were
	// live, within the steady-state window, all from the results (see
	// Stats.Utilization): `evoq replay` gives the same.
	UtilSteady float64 `json:"util_steady"`
	// IdleBeforeFirst is the share of util_steady's slot-time that slots
	// spent waiting for their first design; the rest of what util_steady
	// lacks of 1 is spent between designs.
	IdleBeforeFirst float64 `json:"idle_before_first"`
	GapP50Ms        float64 `json:"gap_p50_ms"`
	GapP99Ms        float64 `json:"gap_p99_ms"`
	PoolSize        int     `json:"pool_size"`
	PoolDigest      string  `json:"pool_digest"`
	// Replay is what this controller found in the results stream at start;
	// nil when the run started fresh.
	Replay *Replay `json:"replay,omitempty"`
	// EarlyStop is what the run's early-stopping rule did; nil for a run
	// without one.
	EarlyStop *EarlyStopSummary `json:"early_stop,omitempty"`
	// Progress is what saved progress did for interrupted designs; nil
	// when no counted design was interrupted.
	Progress *ProgressSummary `json:"progress,omitempty"`
	// Checkpoints is what the checkpoint store holds and did.
	Checkpoints *CheckpointSummary `json:"checkpoints,omitempty"`
	// Warnings are the run's standing warnings (a feature on but inert, a
	// worker whose evaluator differs from the run's), oldest first; empty
	// when there are none.
	Warnings []string `json:"warnings"`
	// Pareto is the front of a run of several objectives or constraints;
	// nil for one ranked by fitness alone.
	*Pareto
}

// Pareto is the front of a pool ranked by domination, in a summary.
type Pareto struct {
	// Objectives and Constraints are the run's, as the flags give them.
	Objectives  []string `json:"objectives"`
	Constraints []string `json:"constraints,omitempty"`
	// Front is the pool's non-dominated feasible designs, oldest first,
	// and FrontDigest their digest (Pool.FrontDigest): a replay of the
	// same results gives the same.
	Front       []FrontMember `json:"front"`
	FrontDigest string        `json:"front_digest"`
	// Hypervolume is the front's, from the reference point HVRef (in the
	// objectives' own units); null while the reference point is derived
	// from the initial designs and they are not all in.
	Hypervolume *float64  `json:"hypervolume"`
	HVRef       []float64 `json:"hv_ref"`
	// HypervolumeRatio is Hypervolume over the true front's, for a
	// built-in problem whose front is known (zdt1, zdt2).
	HypervolumeRatio *float64 `json:"hypervolume_ratio,omitempty"`
	// Unmeasured is the ok results kept out of the pool for want of an
	// objective or a constrained value.
	Unmeasured int `json:"unmeasured,omitempty"`
}

// FrontMember is one design of the front.
type FrontMember struct {
	ID         string             `json:"id"`
	Objectives map[string]float64 `json:"objectives"`
	Fitness    float64            `json:"fitness"`
	Genome     map[string]any     `json:"genome"`
}

// ParetoOf is the fold's front, or nil for a pool of one fitness. For a
// run of a built-in problem whose front is known (its search space is
// named zdt1 or zdt2, its objectives f1:min,f2:min), it has the
// hypervolume's ratio to the true front's.
func ParetoOf(f *Fold, space string) *Pareto {
	if !f.Pool().Ranked() {
		return nil
	}
	o := f.Objectives()
	p := &Pareto{FrontDigest: f.Pool().FrontDigest(), Unmeasured: f.Unmeasured(), Front: []FrontMember{}}
	p.Objectives, p.Constraints = o.Record()
	for _, m := range f.Pool().Front() {
		fm := FrontMember{ID: m.Design.ID, Fitness: m.Fitness, Genome: m.Design.Genome, Objectives: map[string]float64{}}
		for i, v := range o.Values(m.Point) {
			fm.Objectives[o.List()[i].Name] = v
		}
		p.Front = append(p.Front, fm)
	}
	if hv, ref, ok := f.Hypervolume(); ok {
		p.Hypervolume, p.HVRef = &hv, ref
		if t := pareto.TrueHypervolumeAt(space, o.List(), ref); !math.IsNaN(t) {
			p.HypervolumeRatio = new(Round(hv/t, 6))
		}
	}
	return p
}

// ProgressSummary counts the interrupted designs (redelivered after a
// worker died, handed back at the walltime or on a drain) by whether they
// resumed from their saved progress (see Figures).
type ProgressSummary struct {
	// Resumed is the designs that resumed, and ResumedSavedS the
	// slot-seconds of training they did not repeat.
	Resumed       int     `json:"resumed"`
	ResumedSavedS float64 `json:"resumed_saved_s"`
	// FromScratch is the designs evaluated again from scratch by an
	// evaluator that saves no progress (RetrainedFromScratch: not a
	// built-in evaluator, which cannot, nor one that saved progress), and
	// FromScratchCostS about the slot-seconds that cost (half an
	// evaluation per earlier attempt). Earlier attempts are deliveries,
	// and the record does not say which of them started: a design handed
	// back before it started (too late for the walltime, on a stopping
	// worker, on a host it failed on before) is counted too, so both are
	// upper bounds.
	FromScratch      int     `json:"from_scratch"`
	FromScratchCostS float64 `json:"from_scratch_cost_s"`
}

// ProgressOf is the figures' ProgressSummary, nil when no counted design
// was interrupted.
func ProgressOf(f *Figures) *ProgressSummary {
	if f.Resumed == 0 && f.Scratch == 0 {
		return nil
	}
	return &ProgressSummary{Resumed: f.Resumed, ResumedSavedS: Round(f.ResumedS, 3),
		FromScratch: f.Scratch, FromScratchCostS: Round(f.ScratchS, 3)}
}

// ScratchWarning is the run's warning for designs evaluated again from
// scratch after an interruption, "" when there were none.
func ScratchWarning(p *ProgressSummary) string {
	if p == nil || p.FromScratch == 0 {
		return ""
	}
	return fmt.Sprintf("%d interrupted designs were retrained from scratch, about %.0f slot-seconds of training repeated: "+
		"their evaluator saves no progress to resume from (evoq_eval.save_progress; see EVALUATORS.md, Saving progress)",
		p.FromScratch, p.FromScratchCostS)
}

// CheckpointSummary is the checkpoint store as the controller sees it.
type CheckpointSummary struct {
	// Stored is the checkpoints in the store, Deleted those the
	// controller deleted.
	Stored  int `json:"stored"`
	Deleted int `json:"deleted"`
	// Bytes is the stored checkpoints' size, and Listed says that Stored
	// and Bytes are what the store listed at the end of the run; false
	// while it runs, or when the store could not be listed, when Stored
	// is what the controller believes the store holds.
	Bytes  int64 `json:"bytes,omitempty"`
	Listed bool  `json:"listed"`
	// Mutants is the counted mutants of a run with inheritance that
	// trained (ok or stopped), and Inherited those whose evaluator said
	// they started from their parent's checkpoint (metrics inherited
	// true).
	Mutants   int `json:"mutants,omitempty"`
	Inherited int `json:"inherited,omitempty"`
}

// Replay describes a restarted controller's replay of the run's results
// stream. It is in the summary so that tools read the figures from the
// summary rather than from the log line that reports them too.
type Replay struct {
	// Results is the number of terminal results folded.
	Results int `json:"results"`
	// Published is the highest design sequence already published.
	Published uint64 `json:"published"`
	// Seconds is how long the fold took, and ResultsPerS its rate.
	Seconds     float64 `json:"replay_s"`
	ResultsPerS float64 `json:"results_per_s"`
}

// SteadyFigures are the figures of st that a summary and `evoq replay`
// share, rounded as both print them: the slots used, util_steady and
// idle_before_first. They come from the counted results alone, so a
// replay of the results stream gives the summary's.
func SteadyFigures(st *Stats) (slotsUsed int, util, beforeFirst float64) {
	return st.SlotsUsed(), Round(st.Utilization(), 4), Round(st.BeforeFirst(), 4)
}

func Ms(d time.Duration) float64 { return Round(float64(d)/float64(time.Millisecond), 3) }

func Round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Fields are the summary's figures for a log line.
func (s *Summary) Fields() logrus.Fields {
	f := logrus.Fields{"evaluations": s.Evaluations, "ok": s.OK, "infeasible": s.Infeasible,
		"error": s.Error, "timeout": s.Timeout, "lost": s.Lost, "retried": s.Retried, "wall_s": s.WallS,
		"wait_first_slot_s": s.WaitFirstSlotS, "evals_per_s": s.EvalsPerS, "slots": s.Slots, "slots_used": s.SlotsUsed,
		"util_steady": s.UtilSteady, "idle_before_first": s.IdleBeforeFirst, "gap_p50_ms": s.GapP50Ms, "gap_p99_ms": s.GapP99Ms,
		"pool_digest": s.PoolDigest, "stop_reason": s.StopReason}
	if s.BestFitness != nil {
		f["best_fitness"] = *s.BestFitness
	}
	if s.EarlyStop != nil {
		f["stopped"], f["rungs_digest"] = s.Stopped, s.EarlyStop.Digest
	}
	if s.Pareto != nil {
		f["front"], f["front_digest"] = len(s.Front), s.FrontDigest
		if s.Hypervolume != nil {
			f["hypervolume"] = Round(*s.Hypervolume, 6)
		}
	}
	return f
}

// WarningsText is the warnings as status prints them: one per line,
// indented.
func WarningsText(ws []string) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "  ! %s\n", w)
	}
	return b.String()
}
