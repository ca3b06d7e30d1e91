package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// Preempt is the preempt workload's figures.
type Preempt struct {
	Settings PreemptSettings `json:"settings"`
	Seeds    []*PreemptSeed  `json:"seeds"`
	// Medians are each mode's figures over the seeds, in preemptModes'
	// order.
	Medians []*PreemptRun `json:"medians"`
}

// PreemptSeed is one seed's runs, in preemptModes' order.
type PreemptSeed struct {
	Seed int           `json:"seed"`
	Runs []*PreemptRun `json:"runs"`
}

// PreemptRun is one run's figures, computed from its stored results and
// reports and the lives of its worker processes; Summary is its
// controller's progress block, beside them.
//
// A slot-second is one second of one slot inside an evaluation (see the
// fidelity workload). An interrupted attempt stored no result: its time
// is read from its reports, from its first report less one step's time
// (stepTime) to its last report plus one step or its worker process's
// exit, whichever is first. An
// attempt interrupted before its first report is not seen: it lost less
// than a step.
type PreemptRun struct {
	Mode string `json:"mode"` // progress or scratch
	// Starts is the worker processes started, the first starts and the
	// requeues; OK the ok results counted, Best the best fitness of them.
	Starts int     `json:"worker_starts"`
	OK     int     `json:"ok"`
	Best   float64 `json:"best"`
	// SlotS is the slot-seconds of every evaluation, the results' and the
	// interrupted attempts'; InterruptedS the interrupted attempts' share
	// of it, Interrupted their number.
	SlotS        float64 `json:"slot_s"`
	InterruptedS float64 `json:"interrupted_slot_s"`
	Interrupted  int     `json:"interrupted"`
	// HeldSlotS is what the worker processes held until the budget was
	// finished: their slots times their lives, idle slots too, as a batch
	// system bills them.
	HeldSlotS float64 `json:"held_slot_s"`
	// FinishS is the time from the controller's start to the storing of
	// the last counted result, a lost design's too: the time to finish
	// the budget. WallS is to the controller's exit, after its final
	// checkpoint sweep.
	FinishS float64 `json:"finish_s"`
	WallS   float64 `json:"wall_s"`
	// Resumed is the counted designs that resumed from saved progress,
	// and ResumedS the slot-seconds of training they did not repeat (their
	// results' resumed_seconds).
	Resumed  int     `json:"resumed"`
	ResumedS float64 `json:"resumed_s"`
	// Scratch is the counted designs that trained again from step 0
	// after an interrupted attempt had trained some, and ScratchS the
	// slot-seconds of the interrupted attempts they started over.
	Scratch  int     `json:"retrained"`
	ScratchS float64 `json:"retrained_slot_s"`
	// LostS is the slot-seconds of interrupted training that no later
	// attempt kept: ScratchS, each resumed attempt's predecessor's time
	// after the step it resumed from, and the training of designs that
	// never finished.
	LostS float64 `json:"lost_slot_s"`
	// Unfinished is the designs that ended lost: every delivery the run
	// allows (--max-deliver) was interrupted.
	Unfinished int                       `json:"unfinished"`
	Summary    *runstate.ProgressSummary `json:"summary_progress,omitempty"`
}

// attemptKey names one attempt of a design.
type attemptKey struct {
	design         string
	retry, attempt int
}

// attemptSeen is one attempt as its reports show it: the time of each
// step it reported, and the step it resumed from.
type attemptSeen struct {
	key         attemptKey
	worker      string
	steps       map[int64]time.Time
	first, last int64
	resumedFrom int64
}

// preemptFigures computes a run's figures from its record and its worker
// processes' lives.
// began is when the controller started.
func preemptFigures(s PreemptSettings, mode string, rec *preemptRecord, lives []workerLife, began time.Time) *PreemptRun {
	run := &PreemptRun{Mode: mode}
	final := map[string]*schema.Result{} // design -> its counted result
	var finish time.Time
	for i, r := range rec.results {
		if r != nil && rec.verdicts[i] == runstate.Counted {
			finish = runstate.MaxTime(finish, rec.stored[i])
			if r.Status == schema.StatusLost {
				run.Unfinished++
			}
		}
		if r == nil || r.Start.IsZero() || r.Stop.Before(r.Start) || rec.verdicts[i] == runstate.Malformed || rec.verdicts[i] == runstate.Foreign {
			continue
		}
		run.SlotS += r.Stop.Sub(r.Start).Seconds()
		if rec.verdicts[i] != runstate.Counted {
			continue
		}
		final[r.DesignID] = r
		if r.Status == schema.StatusOK && (run.OK == 0 || r.Fitness > run.Best) {
			run.Best = r.Fitness
		}
		if r.Status == schema.StatusOK {
			run.OK++
		}
		if r.ResumedFrom > 0 {
			run.Resumed++
			run.ResumedS += r.ResumedSeconds
		}
	}
	for design, chain := range attemptsOf(rec.reports) {
		run.interrupted(s, final[design], chain, lives)
	}
	run.held(lives, finish)
	if !finish.IsZero() {
		run.FinishS = finish.Sub(began).Seconds()
	}
	run.round()
	return run
}

// held adds the worker processes started before finish, and the
// slot-seconds they held until then.
func (run *PreemptRun) held(lives []workerLife, finish time.Time) {
	for _, l := range lives {
		if !l.start.Before(finish) {
			continue
		}
		run.Starts++
		run.HeldSlotS += float64(l.slots) * runstate.MinTime(l.stop, finish).Sub(l.start).Seconds()
	}
}

// interrupted adds the figures of one design's interrupted attempts,
// chain in attempt order, given its counted result (nil when none).
func (run *PreemptRun) interrupted(s PreemptSettings, res *schema.Result, chain []*attemptSeen, lives []workerLife) {
	retrained := false
	step := stepTime(s, res, chain)
	for i, a := range chain {
		if res != nil && a.key.retry == res.Design.Retry && a.key.attempt == res.Attempt {
			continue // the attempt that ended with the result
		}
		start, end := attemptSpan(a, step, lives)
		span := end.Sub(start).Seconds()
		run.Interrupted++
		run.InterruptedS += span
		run.SlotS += span
		next := nextResume(chain[i+1:], res)
		if t, ok := a.steps[next]; next > 0 && ok {
			run.LostS += max(end.Sub(t).Seconds(), 0)
			continue
		}
		run.LostS += span
		if i < len(chain)-1 || res != nil { // a later attempt started over
			run.ScratchS += span
			retrained = true
		}
	}
	if retrained {
		run.Scratch++
	}
}

// nextResume is the step the attempt after an interrupted one resumed
// from: the first of later that reported, else the result's.
func nextResume(later []*attemptSeen, res *schema.Result) int64 {
	if len(later) > 0 {
		return later[0].resumedFrom
	}
	if res != nil {
		return res.ResumedFrom
	}
	return 0
}

// attemptsOf groups reports by design into attempts, each design's in
// attempt order.
func attemptsOf(reports []*schema.Report) map[string][]*attemptSeen {
	byKey := map[attemptKey]*attemptSeen{}
	out := map[string][]*attemptSeen{}
	for _, r := range reports {
		k := attemptKey{r.DesignID, r.Retry, r.Attempt}
		a := byKey[k]
		if a == nil {
			a = &attemptSeen{key: k, worker: r.Worker, steps: map[int64]time.Time{}, first: r.Step, last: r.Step, resumedFrom: r.ResumedFrom}
			byKey[k] = a
			out[r.DesignID] = append(out[r.DesignID], a)
		}
		if _, seen := a.steps[r.Step]; !seen {
			a.steps[r.Step] = r.Time
		}
		a.first, a.last = min(a.first, r.Step), max(a.last, r.Step)
	}
	for _, chain := range out {
		slices.SortFunc(chain, func(a, b *attemptSeen) int {
			if a.key.retry != b.key.retry {
				return a.key.retry - b.key.retry
			}
			return a.key.attempt - b.key.attempt
		})
	}
	return out
}

// attemptSpan is an interrupted attempt's time, from its first report
// less one step to its last report plus one step, cut at its worker
// process's exit.
func attemptSpan(a *attemptSeen, step time.Duration, lives []workerLife) (start, end time.Time) {
	start = a.steps[a.first].Add(-step)
	end = a.steps[a.last].Add(step)
	for _, l := range lives {
		if l.id == a.worker && !a.steps[a.last].Before(l.start) && !a.steps[a.last].After(l.stop) && l.stop.Before(end) {
			end = l.stop
		}
	}
	return start, end
}

// stepTime is the time of one step of a design: every attempt of it
// trains as long (--sim-fixed-time), in equal steps. It is read from its
// result, the evaluation's time over the steps it trained; else from the
// shortest gap between two consecutive reports of an attempt; else, for a
// design that reported once and never finished, it is the mean's share.
func stepTime(s PreemptSettings, res *schema.Result, chain []*attemptSeen) time.Duration {
	if res != nil && !res.Start.IsZero() && int64(s.Steps) > res.ResumedFrom {
		return res.Stop.Sub(res.Start) / time.Duration(int64(s.Steps)-res.ResumedFrom)
	}
	var best time.Duration
	for _, a := range chain {
		for st, t := range a.steps {
			if next, ok := a.steps[st+1]; ok && (best == 0 || next.Sub(t) < best) {
				best = next.Sub(t)
			}
		}
	}
	if best > 0 {
		return best
	}
	return time.Duration(s.SimMeanS * float64(time.Second) / float64(s.Steps))
}

// round rounds the figures to 4 significant digits.
func (run *PreemptRun) round() {
	for _, f := range []*float64{&run.SlotS, &run.InterruptedS, &run.HeldSlotS, &run.FinishS, &run.WallS, &run.ResumedS, &run.ScratchS, &run.LostS} {
		*f = sig4(*f)
	}
}

// summarize computes each mode's medians over the seeds.
func (p *Preempt) summarize() {
	p.Medians = nil
	for i, mode := range preemptModes {
		var runs []*PreemptRun
		for _, ps := range p.Seeds {
			runs = append(runs, ps.Runs[i])
		}
		med := func(f func(*PreemptRun) float64) float64 {
			xs := make([]float64, len(runs))
			for j, r := range runs {
				xs[j] = f(r)
			}
			return sig4(median(xs))
		}
		p.Medians = append(p.Medians, &PreemptRun{Mode: mode,
			Starts:       int(math.Round(med(func(r *PreemptRun) float64 { return float64(r.Starts) }))),
			OK:           int(math.Round(med(func(r *PreemptRun) float64 { return float64(r.OK) }))),
			Best:         med(func(r *PreemptRun) float64 { return r.Best }),
			SlotS:        med(func(r *PreemptRun) float64 { return r.SlotS }),
			InterruptedS: med(func(r *PreemptRun) float64 { return r.InterruptedS }),
			Interrupted:  int(math.Round(med(func(r *PreemptRun) float64 { return float64(r.Interrupted) }))),
			HeldSlotS:    med(func(r *PreemptRun) float64 { return r.HeldSlotS }),
			FinishS:      med(func(r *PreemptRun) float64 { return r.FinishS }),
			WallS:        med(func(r *PreemptRun) float64 { return r.WallS }),
			Resumed:      int(math.Round(med(func(r *PreemptRun) float64 { return float64(r.Resumed) }))),
			ResumedS:     med(func(r *PreemptRun) float64 { return r.ResumedS }),
			Scratch:      int(math.Round(med(func(r *PreemptRun) float64 { return float64(r.Scratch) }))),
			ScratchS:     med(func(r *PreemptRun) float64 { return r.ScratchS }),
			LostS:        med(func(r *PreemptRun) float64 { return r.LostS }),
			Unfinished:   int(math.Round(med(func(r *PreemptRun) float64 { return float64(r.Unfinished) })))})
	}
}

// Print prints the preempt workload's runs, one row per run and the
// medians.
func (p *Preempt) Print(out io.Writer, smoke bool) {
	s := p.Settings
	fmt.Fprintf(out, "  evoq controller --evaluator sim --sim-curve --sim-steps %d --sim-fixed-time --sim-mean %g --budget %d --max-deliver %d [--sim-progress]; "+
		"%d workers of %d slots, each --walltime %gs --walltime-margin %gs --min-eval-time %gs, started again each time it exits; seeds 1..%d\n",
		s.Steps, s.SimMeanS, s.Budget, s.MaxDeliver, s.Workers, s.Slots/s.Workers, s.WalltimeS, s.MarginS, s.MinEvalS, s.Seeds)
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  seed\trun\tworker starts\tok\tbest\tslot-s\tinterrupted (slot-s)\theld slot-s\twall s\tresumed (slot-s not repeated)\tretrained from scratch (slot-s)\tlost slot-s\n")
	row := func(seed string, r *PreemptRun) {
		fmt.Fprintf(w, "  %s\t%s\t%d\t%d\t%.4f\t%g\t%d (%g)\t%g\t%g\t%g\t%d (%g)\t%d (%g)\t%g\t%d\n", seed, r.Mode, r.Starts, r.OK, r.Best,
			r.SlotS, r.Interrupted, r.InterruptedS, r.HeldSlotS, r.FinishS, r.WallS, r.Resumed, r.ResumedS, r.Scratch, r.ScratchS, r.LostS, r.Unfinished)
	}
	for _, ps := range p.Seeds {
		for _, r := range ps.Runs {
			row(fmt.Sprint(ps.Seed), r)
		}
	}
	for _, r := range p.Medians {
		row("median", r)
	}
	_ = w.Flush()
	if smoke {
		fmt.Fprintln(out, "  (smoke run: figures mean nothing)")
	}
}
