package controller

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// replay folds the run's existing results, then sets the next design
// sequence after every design already published. The queue is read first:
// a design that leaves it afterwards had its result stored before its ack,
// so the fold, read to its end later, has it.
//
// Designs are stored on the queue in seq order, so every design up to the
// highest seq queued was published (retries of earlier designs follow
// them: see readQueue). Above it, a seq with a counted result is
// done: its design was published and evaluated, or a result stored before
// it was published took it (see Tally), and either way it is not
// published again. The first seq above without a counted result is the
// next to publish, and not the highest counted seq plus one: a result
// stored ahead of the designs published would otherwise leave the seqs
// between it and them unpublished, and the run short of its budget for
// ever. (A design stored out of order, its publish retried after later
// ones were stored, can lie above the last one queued with no result yet;
// publishing it again is dropped by its Nats-Msg-Id within the stream's
// duplicate window, and after it the design is evaluated twice and counts
// once.) A seq above with a retried failure and no counted result was
// published too; its retry is restored with the others (restoreRetries).
func (c *Controller) replay(ctx context.Context) error {
	var q queueState
	err := startRetry(ctx, c.log, "read the work queue", func() (err error) {
		q, err = c.readQueue(ctx)
		return err
	})
	if err != nil {
		return err
	}
	c.pendQueued(q)
	began := time.Now()
	// Replay allocates a short-lived result per stored one: fewer, larger
	// collections while it lasts cost a little memory for a lot of CPU.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	if err := c.foldExisting(ctx); err != nil {
		return err
	}
	c.published = q.last
	c.ahead = c.fold.Terminal() - c.fold.Tally().CountedUpTo(q.last)
	c.skipCounted()
	c.restoreRetries(q)
	if err := startRetry(ctx, c.log, "check the checkpoint store", func() error { return c.ckpt.rebuild(ctx, c.inFlightDesigns) }); err != nil {
		return err
	}
	c.noteQuarantined()
	c.replayed = c.fold.Terminal()
	c.live = true
	if c.published > 0 || c.replayed > 0 {
		// Designs already out bring results before this controller
		// publishes anything, and may be all the budget it has left: its
		// clock starts now, or its summary would have no wall time and no
		// rate.
		c.liveSince = c.cfg.Now()
		took := time.Since(began).Seconds()
		c.resumed = &runstate.Replay{Results: c.fold.Terminal(), Published: c.published, Seconds: runstate.Round(took, 3),
			ResultsPerS: math.Round(float64(c.fold.Terminal()) / max(took, 1e-9))}
		f := logrus.Fields{"results": c.resumed.Results, "published": c.published,
			"pool_digest": c.fold.Pool().Digest(), "replay_s": c.resumed.Seconds,
			"results_per_s": c.resumed.ResultsPerS}
		if c.fold.Pool().Ranked() {
			f["front_digest"] = c.fold.Pool().FrontDigest()
		}
		c.log.WithFields(f).Info("resumed run from its results stream")
	}
	return nil
}

// foldExisting applies results until the consumer reports none pending.
func (c *Controller) foldExisting(ctx context.Context) error {
	var si *jetstream.StreamInfo
	err := startRetry(ctx, c.log, "read stream "+schema.ResultStream, func() error {
		st, err := c.js.Stream(ctx, schema.ResultStream)
		if err == nil {
			si, err = st.Info(ctx, jetstream.WithSubjectFilter(schema.ResultSubject(c.cfg.Run)))
		}
		return err
	})
	if err != nil {
		return err
	}
	if si.State.Subjects[schema.ResultSubject(c.cfg.Run)] == 0 {
		return nil
	}
	for {
		select {
		case m := <-c.results:
			c.apply(m)
			if m.pending == 0 {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *Controller) apply(m resultMsg) {
	if !c.current(m) {
		return
	}
	if c.cfg.OnResult != nil {
		c.cfg.OnResult(m.seq, m.res, m.err, c.fold.Tally().Budget())
	}
	v := c.fold.Apply(m.res, m.err)
	c.judge(m, v)
	if v != runstate.Malformed {
		c.ckpt.result(m.res, v, c.fold, c.live)
	}
	if v == runstate.Malformed {
		f := logrus.Fields{"stream_seq": m.seq}
		if m.res != nil {
			f["design"] = m.res.DesignID
		}
		c.log.WithFields(f).WithError(m.err).Error("ignoring a malformed result")
		return
	}
	c.lastResult = c.cfg.Now()
	c.noteResult(m.res)
	if v == runstate.Counted {
		c.noteWork(m.res)
		c.noteScratch(m.res)
	}
	c.checkInert()
	c.onSlotEvents(c.fold.Tally().SlotEvents())
	switch v {
	case runstate.Retried:
		c.noteRetried(m.res)
	case runstate.Foreign:
		c.log.WithFields(logrus.Fields{"design": m.res.DesignID, "stream_seq": m.seq}).
			Warn("ignoring a result for a design that is not this run's or lies beyond its budget")
	case runstate.Counted:
		delete(c.retries, m.res.Design.Seq)
		c.unpend(c.fold.LastKey())
		if m.res.Design.Seq > c.published {
			c.ahead++
			if c.live {
				c.log.WithFields(logrus.Fields{"design": m.res.DesignID, "worker": m.res.Worker}).
					Warn("a result came for a design not yet published; it counts, and that design will not be published")
			}
		}
		c.logResult(m.res)
		if c.cfg.Metrics != nil {
			c.cfg.Metrics.Counted(m.res)
		}
	}
}

func (c *Controller) logResult(r *schema.Result) {
	if !c.debug {
		return
	}
	c.log.WithFields(logrus.Fields{"design": r.DesignID, "status": r.Status, "fitness": r.Fitness,
		"worker": r.Worker, "slot": r.Slot, "attempt": r.Attempt, "duration": r.Duration().Round(time.Microsecond),
		"origin": r.Design.Origin}).Debug("result")
}

// loop runs until the budget is spent, the stop rule or the time budget
// ends the run and the designs in flight are done (see ending), or the
// run fails (see FailFast).
func (c *Controller) loop(ctx context.Context) error {
	tick := time.NewTicker(min(time.Second, c.cfg.Progress))
	defer tick.Stop()
	// Starts the no-slot clock with the ticker (unless the wait for slots
	// started it), so that the alarm's ticks fall on its period.
	c.warnNoSlot(ctx, c.cfg.Now())
	for c.failure == nil {
		if r := c.ending(); r == schema.StopBudget || (r != "" && c.InFlight() == 0) {
			c.stopReason = r
			break
		}
		if err := c.topUp(ctx); err != nil {
			return err
		}
		if err := c.step(ctx, tick.C); err != nil {
			return err
		}
	}
	c.progress(true)
	return nil
}

// step waits for one event and handles it, and every result already
// waiting, so that one top-up follows a burst of results.
func (c *Controller) step(ctx context.Context, tick <-chan time.Time) error {
	select {
	case m := <-c.results:
		c.apply(m)
		c.drainResults()
	case ev := <-c.presence:
		c.onPresence(ctx, ev)
	case r := <-c.extends:
		c.onExtend(ctx, r)
	case seq := <-c.lost:
		if err := c.recordLost(ctx, seq); err != nil {
			c.log.WithError(err).Error("recording a lost design failed")
		}
	case err := <-c.leaseLost:
		return err
	case a := <-c.alerts:
		return fmt.Errorf("%w: a worker reports that its result was refused (%s)", ErrStoreFull, a)
	case <-tick:
		c.lease.setFigures(c.fold.Figures().Snapshot(c.fold.Tally(), c.cfg.Now()))
		c.decideFailure(false)
		c.checkInert()
		c.recordWarnings(ctx)
		if c.cfg.Now().Sub(c.lastCkptSweep) >= CkptSweepEvery {
			c.sweepCheckpoints(ctx)
		}
		c.checkResults(ctx)
		c.checkLimits(ctx, c.liveSlots())
		c.progress(false)
		c.sweepIfQuiet(ctx)
		c.idleAlarm(ctx, c.cfg.Now())
		c.warnNoSlot(ctx, c.cfg.Now())
		c.observe(ctx)
		if c.stopper != nil {
			c.stopper.prune(time.Now())
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// sweepIfQuiet looks for designs stuck on the work queue when designs are
// in flight but no result came for a while.
func (c *Controller) sweepIfQuiet(ctx context.Context) {
	if c.InFlight() == 0 || c.cfg.Now().Sub(c.lastResult) < QuietSweep {
		return
	}
	c.lastResult = c.cfg.Now() // at most one sweep per quiet period
	if err := c.sweepStuck(ctx); err != nil {
		c.log.WithError(err).Warn("sweeping the work queue for undeliverable designs failed")
	}
}

// QuietSweep is how long the controller waits without a result, with
// designs in flight, before it checks the work queue for designs that
// reached their redelivery limit unnoticed.
const QuietSweep = 3 * time.Second

func (c *Controller) drainResults() {
	for {
		select {
		case m := <-c.results:
			c.apply(m)
		default:
			return
		}
	}
}

// InFlight is the number of published designs without a terminal result.
func (c *Controller) InFlight() int { return int(c.published) - (c.fold.Terminal() - c.ahead) }

// skipCounted moves published past the seqs just above it that already
// have a counted result, or a retried failure: their designs are done, or
// out and awaiting a retry, without being published again.
func (c *Controller) skipCounted() {
	for int(c.published) < c.cfg.Budget {
		switch next := c.published + 1; {
		case c.fold.Has(next):
			c.published++
			c.ahead--
		case c.fold.Tally().Failing(next) != nil:
			c.published++
		default:
			return
		}
	}
}

// target is the number of designs to keep in flight: the live slots plus
// a margin derived from them.
func (c *Controller) target() int {
	live := c.liveSlots()
	margin := c.cfg.Margin
	if margin <= 0 { // MarginAuto
		margin = runstate.MarginFor(live)
	}
	return live + margin
}

// topUp publishes designs until target designs are in flight or the whole
// budget is published, skipping the seqs that already have a counted
// result.
func (c *Controller) topUp(ctx context.Context) error {
	// A retry is a design already in flight: it goes out first, whatever
	// the target.
	if err := c.publishRetries(ctx); err != nil {
		return err
	}
	c.skipCounted()
	if r := c.ending(); r != "" {
		if c.phase != schema.PhaseDraining {
			c.log.WithFields(logrus.Fields{"in_flight": c.InFlight(), "stop_reason": r}).Info("the run ends: no new designs; draining")
			return c.setPhase(ctx, schema.PhaseDraining)
		}
		return nil
	}
	// The seqs above published still to publish are those without a
	// counted result; a retried failure above published (a result stored
	// ahead of its design) is skipped too, so the batch also stops at the
	// budget.
	if n := min(c.target()-c.InFlight(), c.cfg.Budget-int(c.published)-c.ahead); n > 0 {
		// published moves on as the batch is made; a batch that cannot be
		// published ends the run.
		batch := make([]*schema.Design, 0, n)
		for len(batch) < n && int(c.published) < c.cfg.Budget {
			c.published++
			batch = append(batch, c.newDesign(c.published))
			c.skipCounted()
		}
		if err := c.publish(ctx, batch); err != nil {
			return err
		}
		if c.liveSince.IsZero() {
			c.liveSince = c.cfg.Now()
		}
	}
	if int(c.published) == c.cfg.Budget && c.phase != schema.PhaseDraining {
		c.log.WithField("in_flight", c.InFlight()).Info("whole budget published; draining")
		return c.setPhase(ctx, schema.PhaseDraining)
	}
	return nil
}

// newDesign makes design seq: random until Init designs have a result,
// then a mutant of a tournament winner. Its randomness comes from the seed
// and seq alone, so the same fold state (and, in a novel run, the same
// designs in flight) gives the same design.
func (c *Controller) newDesign(seq uint64) *schema.Design {
	r := rand.New(rand.NewPCG(*c.cfg.Seed, seq))
	d := &schema.Design{V: schema.Version, Run: c.cfg.Run, ID: schema.DesignID(c.cfg.Run, seq),
		Seq: seq, Created: c.cfg.Now(), Origin: schema.OriginRandom}
	if seq <= uint64(len(c.cfg.Seeds)) {
		d.Genome, d.Origin = c.cfg.Seeds[seq-1], schema.OriginSeed
		return d
	}
	if c.fold.Random() {
		d.Genome = c.cfg.Space.Random(r)
		c.pend(c.key(d.Genome))
		return d
	}
	g, parents, err := c.vary(r)
	// A child the run has evaluated lately, or has in flight, is drawn
	// again from the same stream: first from other parents, then, since a
	// pool whose every near child is measured is stuck on its optimum, by
	// mutating the child further, one parameter a draw, until it leaves
	// what the run has measured. Each genome is hashed once.
	k := c.key(g)
	for try := 1; err == nil && c.novel() && try < NovelTries && c.repeats(k); try++ {
		if try < NovelTries/2 {
			g, parents, err = c.vary(r)
		} else {
			g, err = c.cfg.Space.Mutate(g, r)
		}
		k = c.key(g)
	}
	if err == nil && c.novel() && c.repeats(k) {
		c.warnOnce(fmt.Sprintf("novel children: design %d repeats a measured design after %d draws: the pool and its neighbourhood are measured, "+
			"so the search has converged and spends evaluations on designs it knows; end the run (--plateau), or search wider (--pool, --mutation-rate)", seq, NovelTries),
			logrus.Fields{"design": d.ID})
	}
	if err != nil {
		c.log.WithError(err).WithField("parents", parents).Warn("parent does not fit the search space; sampling a random design instead")
		d.Genome = c.cfg.Space.Random(r)
		return d
	}
	d.Genome, d.Origin, d.Parents = g, schema.OriginMutant, parents
	c.ckpt.published(d)
	c.pend(k)
	return d
}

func (c *Controller) novel() bool { return c.cfg.Novel != nil && *c.cfg.Novel }

// key is genome g's runstate.GenomeKey in a novel run, 0 in another,
// which reads none.
func (c *Controller) key(g map[string]any) uint64 {
	if !c.novel() {
		return 0
	}
	return runstate.GenomeKey(g)
}

// repeats reports whether the genome of key k is one the run has counted
// lately or has in flight.
func (c *Controller) repeats(k uint64) bool { return c.fold.Seen(k) || c.pending[k] > 0 }

// pend and unpend keep pending, in a novel run.
func (c *Controller) pend(k uint64) {
	if !c.novel() {
		return
	}
	if c.pending == nil {
		c.pending = map[uint64]int{}
	}
	c.pending[k]++
}

func (c *Controller) unpend(k uint64) {
	if !c.novel() || len(c.pending) == 0 {
		return
	}
	if c.pending[k]--; c.pending[k] <= 0 {
		delete(c.pending, k)
	}
}

// vary makes a child of the pool by the run's operators: with probability
// Crossover, the crossover of two tournament winners (the first is the
// parent whose checkpoint a child inherits), else a copy of one; then
// mutated, each parameter with probability MutationRate, or exactly one
// when it is 0. An operator at 0 draws nothing from r, so a run recorded
// before operators were kept makes the designs it made.
func (c *Controller) vary(r *rand.Rand) (map[string]any, []string, error) {
	v := c.cfg.variation()
	if !(v.MutationRate >= 0 && v.MutationRate <= 1) {
		return nil, nil, fmt.Errorf("mutation rate %v: want 0 to 1", v.MutationRate)
	}
	pool := c.fold.Pool()
	a := pool.Tournament(r, c.cfg.Tournament)
	parents := []string{a.Design.ID}
	g, err := c.parents.canonical(c.cfg.Space, pool, a)
	if err != nil {
		return nil, parents, err
	}
	if v.Crossover > 0 && r.Float64() < v.Crossover {
		b := pool.Tournament(r, c.cfg.Tournament)
		if b.Design.ID != a.Design.ID {
			parents = append(parents, b.Design.ID)
		}
		gb, err := c.parents.canonical(c.cfg.Space, pool, b)
		if err != nil {
			return nil, parents, err
		}
		g = c.cfg.Space.CrossoverValid(g, gb, r)
	}
	if v.MutationRate > 0 {
		return c.cfg.Space.MutateEachValid(g, v.MutationRate, r), parents, nil
	}
	return c.cfg.Space.MutateValid(g, r), parents, nil
}

// parentCache holds the canonical genomes (space.Space.Validate) of the
// pool members that were chosen as parents, by design ID, so that each
// is checked against the space once rather than once per child: at
// thousands of children a second the checks were the largest part of
// making a design. It holds at most about twice the pool's members: past
// that, whatever left the pool is dropped.
type parentCache map[string]map[string]any

func (pc *parentCache) canonical(sp *space.Space, pool *runstate.Pool, m runstate.Member) (map[string]any, error) {
	if g, ok := (*pc)[m.Design.ID]; ok {
		return g, nil
	}
	g, err := sp.Validate(m.Design.Genome)
	if err != nil {
		return nil, err
	}
	if *pc == nil || len(*pc) >= 2*pool.Len()+64 {
		kept := make(parentCache, 2*pool.Len()+64)
		for _, p := range pool.Members() {
			if pg, ok := (*pc)[p.Design.ID]; ok {
				kept[p.Design.ID] = pg
			}
		}
		*pc = kept
	}
	(*pc)[m.Design.ID] = g
	return g, nil
}

// publish stores every design of batch on the work queue and waits for
// the broker's confirmations, PublishWindow designs at a time, publishing
// again those that fail or stay unconfirmed.
func (c *Controller) publish(ctx context.Context, batch []*schema.Design) error {
	out := make([]outDesign, len(batch))
	for i, d := range batch {
		b, err := schema.EncodeDesign(d)
		if err != nil {
			return fmt.Errorf("design %s: %w", d.ID, err)
		}
		out[i] = outDesign{id: schema.DesignMsgID(d), data: b}
	}
	for len(out) > 0 {
		n := min(len(out), PublishWindow)
		if err := c.publishWindow(ctx, out[:n]); err != nil {
			return err
		}
		out = out[n:]
	}
	return nil
}

// PublishWindow is the most designs published before the controller waits
// for their confirmations. It stays below nats.go's 4,000 unconfirmed
// asynchronous publishes, past which a publish stalls for 200 ms and then
// fails: 100,000 slots freed at once ask for that many designs, and each
// publish that failed so was once retried alone, a round trip each, while
// the slots waited.
const PublishWindow = 1000

// outDesign is one encoded design on its way to the work queue.
type outDesign struct {
	id   string // its Nats-Msg-Id
	data []byte
}

// publishWindow publishes out asynchronously and waits for every
// confirmation; what fails or stays unconfirmed for ConfirmWait is
// published again, all of it at once, with the same Nats-Msg-Ids (so
// never stored twice), until every design is stored.
func (c *Controller) publishWindow(ctx context.Context, out []outDesign) error {
	// Most windows are confirmed at the first try: no retry to set up,
	// no log entry made for a warning that is not given.
	left, err := c.publishRound(ctx, out, true)
	if err == nil && len(left) == 0 {
		return nil
	}
	total := len(out)
	log := c.log.WithField("designs", total)
	if err == nil {
		err = fmt.Errorf("%d of %d designs unconfirmed (first %s)", len(left), total, left[0].id)
		out = left
	}
	log.WithError(err).Warn("publish designs failed; retrying")
	return retry(ctx, log, "publish designs", func() error {
		left, err := c.publishRound(ctx, out, false)
		if err != nil || len(left) == 0 {
			return err
		}
		e := fmt.Errorf("%d of %d designs unconfirmed (first %s)", len(left), total, left[0].id)
		out = left
		return e
	})
}

// ConfirmWait bounds the wait for the broker's confirmations of a window
// of designs. A confirmation can be lost with no error (the stream's
// leader died after taking the design, or the connection went dead
// without a word): what is unconfirmed then is republished.
const ConfirmWait = 5 * time.Second

// publishRound publishes out once and returns the designs that failed or
// were not confirmed within ConfirmWait. A full store ends the run; a
// design already on the queue is an error worth a line only in the first
// round: a later round publishes again what the broker may have stored
// without a word.
func (c *Controller) publishRound(ctx context.Context, out []outDesign, first bool) ([]outDesign, error) {
	subject := schema.DesignSubject(c.cfg.Run)
	futures := make([]jetstream.PubAckFuture, len(out))
	for i, d := range out {
		futures[i], _ = c.js.PublishAsync(subject, d.data, jetstream.WithMsgID(d.id))
	}
	wait, cancel := context.WithTimeout(ctx, ConfirmWait)
	defer cancel()
	var left []outDesign
	for i, f := range futures {
		if f == nil {
			left = append(left, out[i])
			continue
		}
		var ack *jetstream.PubAck
		select {
		case ack = <-f.Ok():
		case err := <-f.Err():
			if broker.StoreFull(err) {
				return nil, fmt.Errorf("design %s: %w", out[i].id, err) // retry ends the run with ErrStoreFull
			}
		case <-wait.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			select {
			case ack = <-f.Ok():
			default:
			}
		}
		switch {
		case ack == nil:
			left = append(left, out[i])
		case ack.Duplicate && first:
			c.log.WithField("design", out[i].id).Error("design was already on the queue: the controller's count of published designs was behind")
		}
	}
	return left, nil
}

// onPresence tracks a worker's heartbeat and keeps the consumer's limits
// above the live slot count.
func (c *Controller) onPresence(ctx context.Context, ev presenceEvent) {
	before := c.liveSlots()
	if ev.p == nil {
		c.slots.remove(ev.worker)
	} else {
		if c.slots.putAt(ev.p, ev.stored(c.cfg.Now()), c.cfg.Now()) {
			c.log.WithFields(logrus.Fields{"worker": ev.worker, "host": ev.p.Host, "slots": ev.p.Slots}).Info("worker joined")
		}
		c.checkControl(ev.worker, ev.p)
		c.workerWarnings(ev.worker, ev.p)
	}
	if live := c.liveSlots(); live > before {
		c.checkLimits(ctx, live)
	}
}

// checkLimits keeps the consumer's limits above live slots. It asks the
// broker only when live exceeds the count it last checked for; when the
// broker cannot answer (a cluster electing a new leader) the next tick
// tries again.
func (c *Controller) checkLimits(ctx context.Context, live int) {
	if live <= c.limitsFor {
		return
	}
	if err := broker.RaiseAckPending(ctx, c.js, c.cons, live+runstate.MarginFor(live)); err != nil {
		c.log.WithError(err).Warn("could not raise the consumer's MaxAckPending yet; retrying")
		return
	}
	info, err := c.cons.Info(ctx)
	if err != nil {
		c.log.WithError(err).Warn("could not read the consumer's limits yet; retrying")
		return
	}
	c.limitsFor = live
	if err := broker.CheckLimits(info, live); err != nil {
		c.log.WithError(err).Error("slots will idle")
	}
}

func (c *Controller) liveSlots() int { return c.slots.live(c.cfg.Now()).slots }

// observe updates the metrics, reading the queue depth from the consumer.
func (c *Controller) observe(ctx context.Context) {
	if c.cfg.Metrics == nil {
		return
	}
	l := c.slots.live(c.cfg.Now())
	snap := Snapshot{InFlight: c.InFlight(), SlotsLive: l.slots, SlotsBusy: l.busy, Budget: c.cfg.Budget,
		SlotsQuarantined: l.quarantined, Retries: c.fold.Tally().Retries()}
	if c.ckpt != nil {
		snap.Checkpoints = len(c.ckpt.stored)
	}
	if info, err := c.cons.Info(ctx); err == nil {
		snap.Queued = int(info.NumPending)
	}
	if b := c.fold.Best(); b != nil {
		snap.Best = &b.Fitness
	}
	if c.fold.Pool().Ranked() {
		snap.Front = len(c.fold.Pool().Front())
		if hv, _, ok := c.fold.Hypervolume(); ok {
			snap.Hypervolume = &hv
		}
	}
	c.cfg.Metrics.Observe(snap)
}

// progress logs a progress line every Progress, or now when force, and
// hands the same figures to OnProgress on every tick.
func (c *Controller) progress(force bool) {
	now := c.cfg.Now()
	c.slots.prune(now)
	p := c.Progress()
	if c.cfg.OnProgress != nil {
		c.cfg.OnProgress(p)
	}
	if !force && now.Sub(c.lastLog) < c.cfg.Progress {
		return
	}
	c.lastLog = now
	f := logrus.Fields{"evaluations": p.Evaluations, "budget": p.Budget, "in_flight": p.InFlight,
		"workers": p.Workers, "slots": p.Slots, "busy": p.Busy, "pool": c.fold.Pool().Len(),
		"pool_digest": c.fold.Pool().Digest(), "rate": fmt.Sprintf("%.1f/s", p.Rate)}
	if p.Best != nil {
		f["best"] = *p.Best
	}
	if p.Quarantined > 0 {
		f["quarantined_slots"] = p.Quarantined
	}
	if c.stopper != nil {
		f["stopped"], f["rungs_digest"] = c.fold.Count(schema.StatusStopped), c.stopper.digest()
	}
	if c.ckpt != nil && (len(c.ckpt.stored) > 0 || c.ckpt.Deleted() > 0) {
		f["checkpoints"] = len(c.ckpt.stored)
	}
	if c.fold.Pool().Ranked() {
		f["front"], f["front_digest"] = len(c.fold.Pool().Front()), c.fold.Pool().FrontDigest()
		if hv, _, ok := c.fold.Hypervolume(); ok {
			f["hypervolume"] = runstate.Round(hv, 6)
		}
	}
	if p.ETA > 0 {
		f["eta"] = p.ETA.Round(time.Second)
	}
	c.log.WithFields(f).Info("progress")
}

// Progress is the run at one moment, for a progress line.
type Progress struct {
	Evaluations, Budget, InFlight int
	Workers, Slots, Busy          int
	Quarantined                   int // live workers' slots that take no designs
	// Stopped is the designs the early-stopping rule stopped, when the
	// run has one (EarlyStop).
	Stopped   int
	EarlyStop bool
	Best      *float64
	Rate      float64       // evaluations this controller counted, per second since a slot was first live (see workTime)
	ETA       time.Duration // at that rate; 0 when unknown
}

// Progress describes the run now. Call it from the controller's goroutine
// (OnProgress does).
func (c *Controller) Progress() Progress {
	now := c.cfg.Now()
	l := c.slots.live(now)
	p := Progress{Evaluations: c.fold.Terminal(), Budget: c.cfg.Budget, InFlight: c.InFlight(),
		Workers: l.workers, Slots: l.slots, Busy: l.busy, Quarantined: l.quarantined,
		Stopped: c.fold.Count(schema.StatusStopped), EarlyStop: c.stopper != nil}
	if b := c.fold.Best(); b != nil {
		p.Best = &b.Fitness
	}
	if wall, wait, ok := c.workTime(now); ok && wall > wait {
		p.Rate = float64(p.Evaluations-c.replayed) / (wall - wait).Seconds()
	}
	if p.Rate > 0 {
		p.ETA = time.Duration(float64(p.Budget-p.Evaluations) / p.Rate * float64(time.Second))
	}
	return p
}
