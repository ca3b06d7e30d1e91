package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/evoq/evoq/worker"
)

// bundle is what a controller test needs: a real embedded broker, a
// context that ends with the test, the search space and a test logger.
type bundle struct {
	b     *testutil.Broker
	js    jetstream.JetStream
	ctx   context.Context
	space *space.Space
	log   *logrus.Logger
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := testutil.StartBroker(t)
	return &bundle{b: b, js: b.JS, ctx: testutil.Context(t, 45*time.Second), space: mlpSpace(t), log: testutil.Logger(t)}
}

func (bu *bundle) config(run string) Config {
	return Config{Run: run, Space: bu.space, Logger: bu.log}
}

// outcome is what Controller.Run returned.
type outcome struct {
	s   *runstate.Summary
	err error
}

// start runs a controller in the background until ctx ends.
func (bu *bundle) start(t *testing.T, ctx context.Context, cfg Config) <-chan outcome {
	t.Helper()
	c, err := New(bu.js, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	done := make(chan outcome, 1)
	go func() {
		s, err := c.Run(ctx)
		done <- outcome{s, err}
	}()
	return done
}

// runLimit bounds one controller run in these tests.
const runLimit = 20 * time.Second

// wait waits for a controller's outcome.
func (bu *bundle) wait(t *testing.T, done <-chan outcome) outcome {
	t.Helper()
	limit := time.NewTimer(runLimit)
	defer limit.Stop()
	select {
	case o := <-done:
		return o
	case <-limit.C:
		t.Fatalf("the controller did not finish within %s", runLimit)
	case <-bu.ctx.Done():
		t.Fatal("the controller did not finish before the test's deadline")
	}
	return outcome{}
}

// gate is an evaluator that waits while it is closed, then evaluates
// with next.
type gate struct {
	next worker.Evaluator
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newGate(next worker.Evaluator) *gate {
	g := &gate{next: next, open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) Name() string { return "gate" }

func (g *gate) Evaluate(ctx context.Context, t worker.Task) worker.Outcome {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return g.next.Evaluate(ctx, t)
	case <-ctx.Done():
		return worker.Failed(ctx, ctx.Err())
	}
}

// hold makes evaluations that have not started wait.
func (g *gate) hold() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

// release lets them run.
func (g *gate) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

// worker starts a worker of run; it is stopped when the test ends.
func (bu *bundle) worker(t *testing.T, run, id string, slots int, eval worker.Evaluator, heartbeat time.Duration) *worker.Worker {
	t.Helper()
	return bu.startConfigured(t, worker.Config{Run: run, ID: id, Slots: slots, Evaluator: eval,
		Heartbeat: heartbeat, FetchWait: time.Second, Logger: bu.log})
}

// startConfigured starts a worker configured by cfg; it is stopped when
// the test ends.
func (bu *bundle) startConfigured(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	w, err := worker.New(bu.js, cfg)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	if err := w.Start(bu.ctx); err != nil {
		t.Fatalf("worker %s: Start: %v", cfg.ID, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// results reads every result of run from the results stream, in stream
// order.
func (bu *bundle) results(t *testing.T, run string) []*schema.Result {
	t.Helper()
	subject := schema.ResultSubject(run)
	n := bu.subjectCount(t, schema.ResultStream, subject)
	cons, err := bu.js.OrderedConsumer(bu.ctx, schema.ResultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	out := make([]*schema.Result, 0, n)
	for len(out) < n {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("read result %d of %d: %v", len(out)+1, n, err)
		}
		r, err := schema.DecodeResult(msg.Data())
		if err != nil {
			t.Fatalf("result %d does not decode: %v", len(out)+1, err)
		}
		out = append(out, r)
	}
	return out
}

// subjectCount is the number of messages on subject in stream.
func (bu *bundle) subjectCount(t *testing.T, stream, subject string) int {
	t.Helper()
	s, err := bu.js.Stream(bu.ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(bu.ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatalf("stream info %s: %v", stream, err)
	}
	return int(info.State.Subjects[subject])
}

// consumer waits for the run's work-queue consumer to exist.
func (bu *bundle) consumer(t *testing.T, run string) jetstream.Consumer {
	t.Helper()
	for {
		c, err := bu.js.Consumer(bu.ctx, schema.DesignStream, schema.ConsumerName(run))
		if err == nil {
			return c
		}
		select {
		case <-bu.ctx.Done():
			t.Fatalf("consumer of %s never appeared: %v", run, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitFor polls cond until it holds, for at most runLimit.
func (bu *bundle) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.NewTimer(runLimit)
	defer limit.Stop()
	for !cond() {
		select {
		case <-limit.C:
			t.Fatalf("no %s within %s", what, runLimit)
		case <-bu.ctx.Done():
			t.Fatalf("no %s before the test's deadline", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// replay folds results as a restarted controller would.
func replay(results []*schema.Result, cfg Config) *runstate.Fold {
	cfg = cfg.withDefaults()
	f := runstate.NewFold(runstate.NewTally(cfg.Run, cfg.Budget, cfg.Rules()), cfg.Init, cfg.Pool, cfg.Replace)
	for _, r := range results {
		f.Apply(r, nil)
	}
	return f
}

// checkHistory checks the run's invariants on its results stream: every
// design 1..budget has a terminal result, no seq beyond, and a design has
// one genome however many results it has. It returns the first result of
// each seq.
func checkHistory(t *testing.T, results []*schema.Result, budget int) map[uint64]*schema.Result {
	t.Helper()
	first := map[uint64]*schema.Result{}
	for _, r := range results {
		seq := r.Design.Seq
		if seq < 1 || seq > uint64(budget) {
			t.Errorf("result for design seq %d, outside 1..%d", seq, budget)
			continue
		}
		if f, ok := first[seq]; ok {
			if !sameDesign(f.Design, r.Design) {
				t.Errorf("design seq %d was published twice: %+v and %+v", seq, f.Design, r.Design)
			}
			continue
		}
		first[seq] = r
	}
	if len(first) != budget {
		t.Errorf("%d distinct designs have a result, want %d", len(first), budget)
	}
	return first
}

// sameDesign reports whether a and b are one published design.
func sameDesign(a, b schema.Design) bool {
	return a.ID == b.ID && a.Origin == b.Origin && reflect.DeepEqual(a.Parents, b.Parents) &&
		reflect.DeepEqual(a.Genome, b.Genome) && a.Created.Equal(b.Created)
}

// checkSearch checks that the first init designs are random and that
// every mutant's parent is an earlier design.
func checkSearch(t *testing.T, first map[uint64]*schema.Result, init int) {
	t.Helper()
	mutants := 0
	for seq, r := range first {
		d := r.Design
		switch {
		case seq <= uint64(init) && d.Origin != schema.OriginRandom:
			t.Errorf("design %d is %s; the first %d must be random", seq, d.Origin, init)
		case d.Origin == schema.OriginMutant:
			mutants++
			// One parent, or two for a crossover (two distinct ones).
			if n := len(d.Parents); n < 1 || n > 2 || n == 2 && d.Parents[0] == d.Parents[1] {
				t.Errorf("mutant %s has parents %v", d.ID, d.Parents)
				continue
			}
			for _, parent := range d.Parents {
				var p uint64
				if !strings.HasPrefix(parent, d.Run+"-") {
					t.Errorf("mutant %s has parent %s, not of its run", d.ID, parent)
				} else if _, err := fmt.Sscanf(strings.TrimPrefix(parent, d.Run+"-"), "%d", &p); err != nil || p >= seq {
					t.Errorf("mutant %s has parent %s, not an earlier design", d.ID, parent)
				}
			}
		}
	}
	if mutants == 0 {
		t.Error("no mutants: the search never left its random designs")
	}
}

// queued is the number of designs of run on the work queue, waiting or
// being evaluated.
func (bu *bundle) queued(t *testing.T, run string) int {
	t.Helper()
	info, err := bu.consumer(t, run).Info(bu.ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return int(info.NumPending) + info.NumAckPending
}

// published is the number of designs ever stored on the work queue of
// this test's broker.
func (bu *bundle) published(t *testing.T) int {
	t.Helper()
	st, err := bu.js.Stream(bu.ctx, schema.DesignStream)
	if err != nil {
		t.Fatalf("stream %s: %v", schema.DesignStream, err)
	}
	info, err := st.Info(bu.ctx)
	if err != nil {
		t.Fatalf("stream info %s: %v", schema.DesignStream, err)
	}
	return int(info.State.LastSeq)
}

// runRevision is the revision of run's state in the run bucket.
func (bu *bundle) runRevision(t *testing.T, run string) uint64 {
	t.Helper()
	kv, err := bu.js.KeyValue(bu.ctx, schema.RunBucket)
	if err != nil {
		t.Fatalf("run bucket: %v", err)
	}
	e, err := kv.Get(bu.ctx, run)
	if err != nil {
		t.Fatalf("run %s state: %v", run, err)
	}
	return e.Revision()
}

func (bu *bundle) runPhase(t *testing.T, run string) *schema.Run {
	t.Helper()
	kv, err := bu.js.KeyValue(bu.ctx, schema.RunBucket)
	if err != nil {
		t.Fatalf("run bucket: %v", err)
	}
	e, err := kv.Get(bu.ctx, run)
	if err != nil {
		t.Fatalf("run %s state: %v", run, err)
	}
	r, err := schema.DecodeRun(e.Value())
	if err != nil {
		t.Fatalf("run %s state: %v", run, err)
	}
	return r
}

// TestControllerRun runs whole searches with real workers and checks the
// summary against the results stream.
func TestControllerRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		replace runstate.Replace
	}{
		{"replace worst", runstate.ReplaceWorst},
		{"replace oldest", runstate.ReplaceOldest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bu := setup(t)
			const run, budget, init = "full", 300, 5
			cfg := bu.config(run)
			cfg.Budget, cfg.Init, cfg.Pool, cfg.Replace = budget, init, 5, tt.replace
			cfg.ExpectSlots, cfg.WaitSlots = 8, 8
			done := bu.start(t, bu.ctx, cfg)
			bu.worker(t, run, "w1", 4, evaluators.Noop{}, 0)
			bu.worker(t, run, "w2", 4, evaluators.Noop{}, 0)
			o := bu.wait(t, done)
			if o.err != nil {
				t.Fatalf("Run: %v", o.err)
			}
			s := o.s
			if s.Evaluations != budget || s.OK != budget || s.Infeasible+s.Error+s.Timeout+s.Lost != 0 {
				t.Errorf("evaluations %d: ok %d, infeasible %d, error %d, timeout %d, lost %d; want %d ok",
					s.Evaluations, s.OK, s.Infeasible, s.Error, s.Timeout, s.Lost, budget)
			}
			if s.SlotsUsed != 8 || s.Slots != 8 {
				t.Errorf("slots %d, slots used %d; want 8 and 8", s.Slots, s.SlotsUsed)
			}
			if s.PoolSize != 5 || s.Run != run {
				t.Errorf("pool size %d, run %q; want 5, %q", s.PoolSize, s.Run, run)
			}
			if s.Replay != nil {
				t.Errorf("a fresh run's summary has a replay: %+v", s.Replay)
			}
			if s.BestFitness == nil || *s.BestFitness != 0 || s.BestRandomFitness == nil || s.Best == nil {
				t.Errorf("best %v, best random %v, genome %v; want fitness 0 (noop) and a genome", s.BestFitness, s.BestRandomFitness, s.Best)
			}

			results := bu.results(t, run)
			first := checkHistory(t, results, budget)
			checkSearch(t, first, init)
			if len(results) != budget || bu.published(t) != budget {
				t.Errorf("%d results, %d designs published; want %d each", len(results), bu.published(t), budget)
			}
			f := replay(results, cfg)
			if got := f.Pool().Digest(); got != s.PoolDigest {
				t.Errorf("replayed pool digest %s, summary %s", got, s.PoolDigest)
			}
			if f.Terminal() != budget || f.Pool().Len() != s.PoolSize {
				t.Errorf("replay: %d terminal, pool %d; want %d, %d", f.Terminal(), f.Pool().Len(), budget, s.PoolSize)
			}
			if r := bu.runPhase(t, run); r.Phase != schema.PhaseDone || r.Budget != budget || r.Space != "mlp-spirals" {
				t.Errorf("run state %+v, want phase done, budget %d", r, budget)
			}
		})
	}
}

// TestControllerInFlight checks that the designs queued or running follow
// the live slots plus the margin: never more, and enough to use every
// slot whatever the initial population (here 5 designs for 8 slots).
func TestControllerInFlight(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget, slots = "inflight", 300, 8
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool = budget, 5, 5
	cfg.ExpectSlots, cfg.WaitSlots = slots, slots
	done := bu.start(t, bu.ctx, cfg)
	cons := bu.consumer(t, run)

	var (
		mu      sync.Mutex
		peak    int
		samples int
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			info, err := cons.Info(bu.ctx)
			if err != nil {
				continue
			}
			mu.Lock()
			peak = max(peak, int(info.NumPending)+info.NumAckPending)
			samples++
			mu.Unlock()
		}
	}()
	sim := evaluators.Sim{Mean: 20 * time.Millisecond}
	bu.worker(t, run, "w1", slots/2, sim, 0)
	bu.worker(t, run, "w2", slots/2, sim, 0)
	o := bu.wait(t, done)
	close(stop)
	<-sampled
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	mu.Lock()
	defer mu.Unlock()
	// A design's result can be folded, and its slot's next design
	// published, before the worker's ack of it reaches the broker: the
	// queue may briefly hold up to one design per slot more than the
	// controller counts in flight, and no more, since a slot pulls its
	// next design only after that ack. How many of the slots are caught
	// so at once is the machine's timing (on a loaded one, most): the
	// bound allows all of them.
	const slack = slots
	if limit := slots + runstate.MarginFor(slots) + slack; peak > limit {
		t.Errorf("up to %d designs queued or running, want at most %d (slots %d + margin %d + %d)",
			peak, limit, slots, runstate.MarginFor(slots), slack)
	}
	if peak < slots {
		t.Errorf("at most %d designs queued or running in %d samples: %d slots were never all fed", peak, samples, slots)
	}
	t.Logf("peak %d designs queued or running in %d samples", peak, samples)
	if o.s.Evaluations != budget || o.s.SlotsUsed != slots {
		t.Errorf("evaluations %d, slots used %d; want %d, %d", o.s.Evaluations, o.s.SlotsUsed, budget, slots)
	}
}

// TestControllerRestart stops a controller mid-run and starts another on
// the same run: it resumes from the results stream and the run ends with
// every design evaluated once and no design published twice.
func TestControllerRestart(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget = "restart", 200
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool, cfg.Seed = budget, 10, 5, new(uint64(7))
	cfg.ExpectSlots, cfg.WaitSlots = 8, 8

	ctx1, cancel1 := context.WithCancel(bu.ctx)
	defer cancel1()
	done1 := bu.start(t, ctx1, cfg)
	g := newGate(evaluators.Sim{Mean: 20 * time.Millisecond, Fail: 0.2})
	bu.worker(t, run, "w1", 4, g, 0)
	bu.worker(t, run, "w2", 4, g, 0)
	subject := schema.ResultSubject(run)
	bu.waitFor(t, "80th result", func() bool { return bu.subjectCount(t, schema.ResultStream, subject) >= 80 })
	// Hold the workers so that designs stay queued across the restart.
	g.hold()
	cancel1()
	o1 := bu.wait(t, done1)
	if !errors.Is(o1.err, context.Canceled) {
		t.Fatalf("first controller returned %v, %+v; want context.Canceled mid-run", o1.err, o1.s)
	}
	atStop := bu.subjectCount(t, schema.ResultStream, subject)
	if atStop >= budget {
		t.Fatalf("%d results when the first controller stopped: the restart is not exercised", atStop)
	}
	queued := bu.queued(t, run)
	if queued == 0 {
		t.Fatal("no design queued at the restart: the restart is not exercised")
	}

	// The second controller replays, then marks the run starting and
	// running; the workers go on once it has.
	rev := bu.runRevision(t, run)
	done2 := bu.start(t, bu.ctx, cfg)
	bu.waitFor(t, "resumed second controller", func() bool { return bu.runRevision(t, run) >= rev+2 })
	g.release()
	o2 := bu.wait(t, done2)
	if o2.err != nil {
		t.Fatalf("second controller: %v", o2.err)
	}
	s := o2.s
	if s.Evaluations != budget || s.OK+s.Infeasible+s.Error+s.Timeout+s.Lost != budget {
		t.Errorf("evaluations %d (ok %d, infeasible %d, error %d, timeout %d, lost %d), want %d",
			s.Evaluations, s.OK, s.Infeasible, s.Error, s.Timeout, s.Lost, budget)
	}
	if s.Infeasible == 0 || s.OK == 0 {
		t.Errorf("ok %d, infeasible %d: the simulated failures are missing", s.OK, s.Infeasible)
	}
	results := bu.results(t, run)
	first := checkHistory(t, results, budget)
	checkSearch(t, first, cfg.Init)
	// Nothing was redelivered here, so every design was published and
	// evaluated exactly once.
	if len(results) != budget {
		t.Errorf("%d results in the stream, want %d: some design was evaluated twice", len(results), budget)
	}
	if n := bu.published(t); n != budget {
		t.Errorf("%d designs were stored on the work queue, want %d", n, budget)
	}
	if got := replay(results, cfg).Pool().Digest(); got != s.PoolDigest {
		t.Errorf("replayed pool digest %s, summary %s", got, s.PoolDigest)
	}
	if r := s.Replay; r == nil || r.Results < atStop || r.Results >= budget || r.Published < uint64(r.Results) {
		t.Errorf("summary's replay %+v, want between %d and %d results", r, atStop, budget-1)
	}
	t.Logf("restarted after %d of %d results with %d designs queued; %d results in the stream", atStop, budget, queued, len(results))
	// Every design was acked: nothing is left on the work queue.
	bu.waitFor(t, "empty work queue", func() bool {
		return bu.subjectCount(t, schema.DesignStream, schema.DesignSubject(run)) == 0
	})
}

// TestControllerLost makes one design reach its redelivery limit without a
// result and checks that it is recorded as lost, removed from the work
// queue, and that the run still spends its budget.
func TestControllerLost(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget = "lost", 20
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool = budget, 5, 5
	cfg.AckWait, cfg.MaxDeliver = broker.MinAckWait, 2
	cfg.Margin = 1 // with no worker yet, exactly one design is queued
	done := bu.start(t, bu.ctx, cfg)

	// A client that takes the only design and hands it back twice, as a
	// worker that dies on it would, without ever storing a result.
	cons := bu.consumer(t, run)
	var lost *schema.Design
	for attempt := uint64(1); attempt <= 2; attempt++ {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		for tries := 0; errors.Is(err, nats.ErrNoResponders) && tries < 50; tries++ {
			// A broker loaded enough to be slow to place the consumer's
			// pull requests answers no responders for a moment.
			time.Sleep(100 * time.Millisecond)
			msg, err = cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		}
		if err != nil {
			t.Fatalf("delivery %d: %v", attempt, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		d, err := schema.DecodeDesign(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if lost == nil {
			lost = d
		}
		if d.Seq != lost.Seq || meta.NumDelivered != attempt {
			t.Fatalf("delivery %d is design %d (delivered %d times), want design %d", attempt, d.Seq, meta.NumDelivered, lost.Seq)
		}
		if err := msg.Nak(); err != nil {
			t.Fatal(err)
		}
	}

	bu.worker(t, run, "w1", 2, evaluators.Noop{}, 300*time.Millisecond)
	o := bu.wait(t, done)
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	if o.s.Lost != 1 || o.s.OK != budget-1 || o.s.Evaluations != budget {
		t.Errorf("lost %d, ok %d, evaluations %d; want 1, %d, %d", o.s.Lost, o.s.OK, o.s.Evaluations, budget-1, budget)
	}
	results := bu.results(t, run)
	first := checkHistory(t, results, budget)
	if len(results) != budget || bu.published(t) != budget {
		t.Errorf("%d results, %d designs published; want %d each", len(results), bu.published(t), budget)
	}
	for _, r := range results {
		if r.Design.Seq == lost.Seq && r.Status != schema.StatusLost {
			t.Errorf("design %d has a %s result from %s; it was never evaluated", lost.Seq, r.Status, r.Worker)
		}
	}
	r := first[lost.Seq]
	if r == nil || r.Status != schema.StatusLost || r.Attempt != 2 || r.Worker != "" ||
		r.Fitness != schema.InfeasibleFitness || !strings.Contains(r.Error, "redelivery limit 2") {
		t.Errorf("lost design's result = %+v, want status lost, attempt 2, no worker, infeasible fitness", r)
	}
	if !reflect.DeepEqual(r.Design.Genome, lost.Genome) {
		t.Errorf("lost result carries genome %v, the design had %v", r.Design.Genome, lost.Genome)
	}
	bu.waitFor(t, "empty work queue", func() bool {
		return bu.subjectCount(t, schema.DesignStream, schema.DesignSubject(run)) == 0
	})
}

// TestNewRejectsConfig checks that New refuses a field that is wrong on
// its own; fields that depend on each other may come from the run's
// record, so they are checked when the run starts.
func TestNewRejectsConfig(t *testing.T) {
	t.Parallel()
	c, err := New(nil, Config{Run: "r", Space: mlpSpace(t), Pool: -3})
	if !errors.Is(err, ErrConfig) || c != nil || !strings.Contains(err.Error(), "Pool -3") {
		t.Fatalf("New = %v, %v; want ErrConfig naming Pool", c, err)
	}
	if _, err := New(nil, Config{Run: "r", Space: mlpSpace(t), Init: 3}); err != nil {
		t.Fatalf("New with a pool left to the record or the default: %v", err)
	}
}

// offline is a controller that is never run: for the parts that need no
// broker.
func offline(t *testing.T, cfg Config) *Controller {
	t.Helper()
	if cfg.Run == "" {
		cfg.Run = "t"
	}
	if cfg.Space == nil {
		cfg.Space = mlpSpace(t)
	}
	c, err := New(nil, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	resolveNew(t, c)
	return c
}

// resolveNew resolves c's settings as Run does for a new run, for tests
// that drive its parts without Run.
func resolveNew(t *testing.T, c *Controller) {
	t.Helper()
	cfg, _, err := resolve(nil, c.cfg, time.Now)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	c.cfg = cfg
	c.initState()
}

// TestNewDesign checks that a design's content follows from the seed, its
// seq and the fold alone.
func TestNewDesign(t *testing.T) {
	t.Parallel()
	now := func() time.Time { return epoch }
	cfg := Config{Budget: 50, Init: 3, Pool: 3, Seed: new(uint64(1)), Now: now}
	a, b := offline(t, cfg), offline(t, cfg)
	cfg.Seed = new(uint64(2))
	other := offline(t, cfg)

	for seq := uint64(1); seq <= 3; seq++ {
		da, db := a.newDesign(seq), b.newDesign(seq)
		if da.Origin != schema.OriginRandom || da.Parents != nil {
			t.Errorf("design %d is %s with parents %v before init results, want random", seq, da.Origin, da.Parents)
		}
		if !reflect.DeepEqual(da, db) {
			t.Errorf("design %d differs between equal controllers:\n%+v\n%+v", seq, da, db)
		}
		if _, err := a.cfg.Space.Validate(da.Genome); err != nil {
			t.Errorf("design %d does not fit the space: %v", seq, err)
		}
		if da.ID != schema.DesignID("t", seq) || !da.Created.Equal(epoch) || da.Validate() != nil {
			t.Errorf("design %d = %+v, invalid", seq, da)
		}
	}
	if reflect.DeepEqual(a.newDesign(1).Genome, other.newDesign(1).Genome) {
		t.Error("seeds 1 and 2 made the same first design")
	}
	if reflect.DeepEqual(a.newDesign(1).Genome, a.newDesign(2).Genome) {
		t.Error("designs 1 and 2 have the same genome")
	}

	// After init results, mutants of pool members.
	for seq := uint64(1); seq <= 3; seq++ {
		d := a.newDesign(seq)
		a.fold.Apply(&schema.Result{Run: "t", DesignID: d.ID, Design: *d, Status: schema.StatusOK,
			Fitness: float64(seq), Worker: "w", Attempt: 1, Start: epoch, Stop: epoch}, nil)
	}
	m := a.newDesign(4)
	if m.Origin != schema.OriginMutant || len(m.Parents) != 1 || m.Validate() != nil {
		t.Fatalf("design 4 = %+v, want a valid mutant", m)
	}
	if pool := ids(a.fold.Pool().Members()); !contains(pool, m.Parents[0]) {
		t.Errorf("mutant parent %v is not a pool member %v", m.Parents, pool)
	}
	if _, err := a.cfg.Space.Validate(m.Genome); err != nil {
		t.Errorf("mutant does not fit the space: %v", err)
	}
	a.pending = nil // as after a restart: the same fold state, nothing in flight
	if m2 := a.newDesign(4); !reflect.DeepEqual(m, m2) {
		t.Errorf("design 4 made twice differs:\n%+v\n%+v", m, m2)
	}
}

// TestNewDesignParentOutsideSpace checks the fallback when a pool member
// does not fit the space: a random design, not a failure.
func TestNewDesignParentOutsideSpace(t *testing.T) {
	t.Parallel()
	c := offline(t, Config{Budget: 10, Init: 1, Pool: 1, Logger: testutil.Logger(t)})
	d := schema.Design{V: 1, Run: "t", ID: "t-1", Seq: 1, Genome: map[string]any{"colour": "blue"},
		Origin: schema.OriginSeed, Created: epoch}
	c.fold.Apply(&schema.Result{Run: "t", DesignID: d.ID, Design: d, Status: schema.StatusOK, Fitness: 1,
		Worker: "w", Attempt: 1, Start: epoch, Stop: epoch}, nil)
	got := c.newDesign(2)
	if got.Origin != schema.OriginRandom || got.Parents != nil {
		t.Errorf("design 2 = %s with parents %v, want a random design", got.Origin, got.Parents)
	}
	if _, err := c.cfg.Space.Validate(got.Genome); err != nil {
		t.Errorf("fallback design does not fit the space: %v", err)
	}
}

func presence(id string, slots, busy int, interval time.Duration, leaving bool) *schema.Presence {
	return &schema.Presence{V: 1, Run: "t", Worker: id, Slots: slots, Busy: busy,
		Heartbeat: epoch, Interval: interval, Leaving: leaving}
}

func TestSlotTracker(t *testing.T) {
	t.Parallel()
	type put struct {
		p  *schema.Presence
		at time.Duration // after epoch
	}
	tests := []struct {
		name    string
		puts    []put
		remove  []string
		now     time.Duration
		want    liveCount
		maxLive int
	}{
		{"two workers", []put{{presence("a", 4, 1, time.Second, false), 0}, {presence("b", 6, 6, time.Second, false), 0}},
			nil, time.Second, liveCount{workers: 2, slots: 10, busy: 7}, 10},
		{"a heartbeat updates the worker", []put{{presence("a", 4, 1, time.Second, false), 0}, {presence("a", 4, 3, time.Second, false), time.Second}},
			nil, time.Second, liveCount{workers: 1, slots: 4, busy: 3}, 4},
		// a is live until 3 s by its last heartbeat, but its last
		// heartbeat came at 0: it is not counted beside b, whose first
		// came at 2 s.
		{"stale after three intervals", []put{{presence("a", 4, 0, time.Second, false), 0}, {presence("b", 2, 0, time.Second, false), 2 * time.Second}},
			nil, 3 * time.Second, liveCount{workers: 1, slots: 2}, 4},
		{"a killed worker and its replacement", []put{
			{presence("a", 4, 4, time.Second, false), 0}, {presence("a", 4, 4, time.Second, false), time.Second},
			{presence("b", 4, 0, time.Second, false), 1500 * time.Millisecond}, {presence("b", 4, 4, time.Second, false), 2500 * time.Millisecond}},
			nil, 2500 * time.Millisecond, liveCount{workers: 2, slots: 8, busy: 8}, 4},
		{"heartbeats overlapping", []put{
			{presence("a", 4, 0, time.Second, false), 0}, {presence("b", 2, 0, time.Second, false), 500 * time.Millisecond},
			{presence("a", 4, 0, time.Second, false), time.Second}},
			nil, time.Second, liveCount{workers: 2, slots: 6}, 6},
		{"a leaving worker is not live", []put{{presence("a", 4, 0, time.Second, false), 0}, {presence("a", 4, 0, time.Second, true), time.Second}},
			nil, time.Second, liveCount{}, 4},
		{"removed", []put{{presence("a", 4, 0, time.Second, false), 0}, {presence("b", 2, 0, time.Second, false), 0}},
			[]string{"a"}, 0, liveCount{workers: 1, slots: 2}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newSlotTracker()
			for _, p := range tt.puts {
				tr.put(p.p, epoch.Add(p.at))
			}
			for _, w := range tt.remove {
				tr.remove(w)
			}
			if got := tr.live(epoch.Add(tt.now)); got != tt.want {
				t.Errorf("live = %+v, want %+v", got, tt.want)
			}
			if tr.MaxLive() != tt.maxLive {
				t.Errorf("MaxLive = %d, want %d", tr.MaxLive(), tt.maxLive)
			}
		})
	}
}

func TestSlotTrackerJoinAndPrune(t *testing.T) {
	t.Parallel()
	tr := newSlotTracker()
	if !tr.put(presence("a", 1, 0, time.Second, false), epoch) {
		t.Error("first heartbeat of a is not a join")
	}
	if tr.put(presence("a", 1, 0, time.Second, false), epoch.Add(time.Second)) {
		t.Error("second heartbeat of a is a join")
	}
	tr.put(presence("slow", 1, 0, 10*time.Second, false), epoch)
	tr.prune(epoch.Add(62 * time.Second))
	if _, ok := tr.workers["a"]; ok {
		t.Error("a, silent for a minute, was not forgotten")
	}
	if _, ok := tr.workers["slow"]; !ok {
		t.Error("slow, silent for 6 of its intervals, was forgotten")
	}
	tr.prune(epoch.Add(101 * time.Second))
	if len(tr.workers) != 0 {
		t.Errorf("workers left after 10 intervals: %v", tr.workers)
	}
}

// TestTarget checks the designs kept in flight: live slots plus the
// margin, derived or set.
func TestTarget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		margin int
		slots  []int
		want   int
	}{
		{"no workers yet", 0, nil, 2},
		{"8 slots", 0, []int{4, 4}, 10},
		{"552 slots", 0, []int{6, 546}, 552 + 28},
		{"set margin", 5, []int{4}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := offline(t, Config{Margin: tt.margin, Now: func() time.Time { return epoch }})
			for i, n := range tt.slots {
				c.slots.put(presence(fmt.Sprint("w", i), n, 0, time.Second, false), epoch)
			}
			if got := c.target(); got != tt.want {
				t.Errorf("target = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	now := epoch.Add(20 * time.Second)
	c := offline(t, Config{Budget: 10, Init: 2, Pool: 2, Now: func() time.Time { return now }})
	c.liveSince = epoch
	c.slots.put(presence("w", 2, 0, time.Hour, false), epoch)
	evals := []struct {
		status  schema.Status
		fitness float64
		origin  schema.Origin
		gap     time.Duration
	}{
		{schema.StatusOK, 0.25, schema.OriginRandom, -1},
		{schema.StatusOK, 0.5, schema.OriginRandom, -1},
		{schema.StatusInfeasible, schema.InfeasibleFitness, schema.OriginRandom, 3 * time.Millisecond},
		{schema.StatusOK, 0.75, schema.OriginMutant, 3 * time.Millisecond},
		{schema.StatusLost, schema.InfeasibleFitness, schema.OriginMutant, 0},
	}
	for i, e := range evals {
		seq := uint64(i + 1)
		d := schema.Design{V: 1, Run: "t", ID: schema.DesignID("t", seq), Seq: seq, Genome: map[string]any{"i": int64(i)},
			Origin: e.origin, Created: epoch}
		if e.origin == schema.OriginMutant {
			d.Parents = []string{"t-1"}
		}
		r := &schema.Result{Run: "t", DesignID: d.ID, Design: d, Status: e.status, Fitness: e.fitness,
			Worker: "w", Slot: i % 2, Attempt: 1, Start: epoch.Add(time.Duration(i) * time.Second),
			Stop: epoch.Add(time.Duration(i+1) * time.Second), Gap: e.gap}
		if e.status == schema.StatusLost {
			r.Worker, r.Start, r.Stop = "", time.Time{}, time.Time{}
		}
		c.fold.Apply(r, nil)
	}
	s := c.Summary()
	want := runstate.Summary{Run: "t", Evaluations: 5, OK: 3, Infeasible: 1, Lost: 1, BestID: "t-4",
		WallS: 20, EvalsPerS: 0.3, Slots: 2, SlotsUsed: 2, UtilSteady: 0.5, IdleBeforeFirst: 0.1667, PoolSize: 2,
		PoolDigest: c.fold.Pool().Digest(), Warnings: []string{}}
	got := *s
	if got.BestFitness == nil || *got.BestFitness != 0.75 || got.BestRandomFitness == nil || *got.BestRandomFitness != 0.5 {
		t.Errorf("best %v, best random %v; want 0.75, 0.5", got.BestFitness, got.BestRandomFitness)
	}
	if !reflect.DeepEqual(got.Best, map[string]any{"i": int64(3)}) {
		t.Errorf("best genome %v, want design 4's", got.Best)
	}
	if got.GapP50Ms < 3 || got.GapP50Ms > 3.06 || got.GapP99Ms != got.GapP50Ms {
		t.Errorf("gap p50 %v ms, p99 %v ms; want 3 ms within 2%%", got.GapP50Ms, got.GapP99Ms)
	}
	got.BestFitness, got.BestRandomFitness, got.Best, got.GapP50Ms, got.GapP99Ms = nil, nil, nil, 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summary\n got %+v\nwant %+v", got, want)
	}
	f := s.Fields()
	if f["best_fitness"] != 0.75 || f["evaluations"] != 5 || f["pool_digest"] != want.PoolDigest {
		t.Errorf("Fields = %v", f)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestControllerLostWhileDown makes a design reach its redelivery limit
// while no controller runs: the next controller must still give it a
// terminal result, or the run can never spend its budget.
func TestControllerLostWhileDown(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget = "lostdown", 10
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool = budget, 5, 5
	cfg.AckWait, cfg.MaxDeliver = broker.MinAckWait, 2
	cfg.Margin = 1 // with no worker yet, exactly one design is queued
	ctx1, cancel1 := context.WithCancel(bu.ctx)
	defer cancel1()
	done1 := bu.start(t, ctx1, cfg)
	cons := bu.consumer(t, run)
	for attempt := 1; attempt <= 2; attempt++ {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("delivery %d: %v", attempt, err)
		}
		if err := msg.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	cancel1()
	if o := bu.wait(t, done1); !errors.Is(o.err, context.Canceled) {
		t.Fatalf("first controller returned %v", o.err)
	}
	// A worker's pull request makes the broker give the design up.
	bu.worker(t, run, "w1", 2, evaluators.Noop{}, 300*time.Millisecond)
	bu.waitFor(t, "design given up", func() bool {
		info, err := cons.Info(bu.ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	if n := bu.subjectCount(t, schema.DesignStream, schema.DesignSubject(run)); n != 1 {
		t.Fatalf("%d designs on the work queue, want the one given up", n)
	}
	o := bu.wait(t, bu.start(t, bu.ctx, cfg))
	if o.err != nil {
		t.Fatalf("second controller: %v", o.err)
	}
	if o.s.Lost != 1 || o.s.Evaluations != budget {
		t.Errorf("lost %d, evaluations %d; want 1, %d", o.s.Lost, o.s.Evaluations, budget)
	}
}
