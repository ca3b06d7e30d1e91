package controller

import (
	"fmt"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
)

// Summary describes the run as folded so far.
func (c *Controller) Summary() *runstate.Summary {
	if c.fold == nil { // stopped before its settings were resolved
		return &runstate.Summary{Run: c.cfg.Run}
	}
	f, st := c.fold, c.fold.Stats()
	s := &runstate.Summary{
		Run: c.cfg.Run, Evaluations: f.Terminal(), StopReason: c.stopReason,
		OK: f.Count(schema.StatusOK), Infeasible: f.Count(schema.StatusInfeasible),
		Error: f.Count(schema.StatusError), Timeout: f.Count(schema.StatusTimeout), Lost: f.Count(schema.StatusLost),
		Stopped:  f.Count(schema.StatusStopped),
		Slots:    max(c.slots.MaxLive(), st.MaxSlots()),
		GapP50Ms: runstate.Ms(st.GapQuantile(0.5)), GapP99Ms: runstate.Ms(st.GapQuantile(0.99)),
		PoolSize: f.Pool().Len(), PoolDigest: f.Pool().Digest(),
		Warnings: append([]string{}, c.warnings...),
	}
	s.SlotsUsed, s.UtilSteady, s.IdleBeforeFirst = runstate.SteadyFigures(st)
	s.Progress = runstate.ProgressOf(f.Figures())
	if w := runstate.ScratchWarning(s.Progress); w != "" {
		s.Warnings = append(s.Warnings, w)
	}
	s.Retried = f.Tally().Retries()
	for _, q := range f.Tally().Quarantined() {
		s.Quarantined = append(s.Quarantined, fmt.Sprintf("%s/%d", q.Worker, q.Slot))
	}
	if b := f.Best(); b != nil {
		s.BestFitness, s.Best, s.BestID = &b.Fitness, b.Design.Genome, b.Design.ID
	}
	if b := f.BestRandom(); b != nil {
		s.BestRandomFitness = &b.Fitness
	}
	if c.resumed != nil {
		r := *c.resumed
		s.Replay = &r
	}
	if c.ckpt != nil {
		s.Checkpoints = c.ckpt.summary()
	}
	s.Pareto = runstate.ParetoOf(f, c.cfg.Space.Name())
	if c.stopper != nil {
		s.EarlyStop = c.stopper.summary()
	}
	if c.liveSince.IsZero() {
		return s
	}
	if wall, wait, ok := c.workTime(c.cfg.Now()); ok {
		s.WallS, s.WaitFirstSlotS = runstate.Round(wall.Seconds(), 3), runstate.Round(wait.Seconds(), 3)
		if work := wall - wait; work > 0 {
			s.EvalsPerS = runstate.Round(float64(s.Evaluations-c.replayed)/work.Seconds(), 1)
		}
	}
	return s
}

// noteWork keeps the start of the first evaluation this controller
// counted live (see workTime).
func (c *Controller) noteWork(r *schema.Result) {
	if c.live && r != nil && !r.Start.IsZero() && (c.firstWork.IsZero() || r.Start.Before(c.firstWork)) {
		c.firstWork = r.Start
	}
}

// workTime is this controller's wall time at now (from liveSince) and the
// part of it before a slot was first live: all of it while none has been.
// Rates are taken over the rest, the time slots could work: workers that
// join a minute after the controller would otherwise make the first
// minute's rate near nothing and every ETA far too long.
func (c *Controller) workTime(now time.Time) (wall, wait time.Duration, ok bool) {
	if c.liveSince.IsZero() {
		return 0, 0, false
	}
	wall = max(now.Sub(c.liveSince), 0)
	wait = wall
	// A slot was live from its heartbeat, or from the start of the first
	// evaluation this controller counted, whichever it heard of first: on
	// a loaded broker a heartbeat can arrive after the results.
	first := c.slots.FirstLive()
	if w := c.firstWork; !w.IsZero() && (first.IsZero() || w.Before(first)) {
		first = w
	}
	if !first.IsZero() {
		wait = min(max(first.Sub(c.liveSince), 0), wall)
	}
	return wall, wait, true
}
