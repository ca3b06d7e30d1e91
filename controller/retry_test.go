package controller

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// brokenGPU fails every design at once, as an evaluator on a node with a
// broken GPU does.
type brokenGPU struct{}

func (brokenGPU) Name() string { return "broken" }

func (brokenGPU) Evaluate(context.Context, worker.Task) worker.Outcome {
	return worker.Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
		Error: "evaluator exit status 1; stderr tail: RuntimeError: CUDA error: uncorrectable ECC error encountered"}
}

// steady evaluates every design ok after a short while.
type steady struct{ d time.Duration }

func (steady) Name() string { return "steady" }

func (s steady) Evaluate(ctx context.Context, t worker.Task) worker.Outcome {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return worker.Failed(ctx, ctx.Err())
	}
	return worker.Outcome{Status: schema.StatusOK, Fitness: float64(t.Design.Seq%17) / 17}
}

// startWorker starts a worker of run on host.
func (bu *bundle) startWorker(t *testing.T, run, id, host string, slots int, eval worker.Evaluator) *worker.Worker {
	t.Helper()
	return bu.startConfigured(t, worker.Config{Run: run, ID: id, Host: host, Slots: slots, Evaluator: eval,
		FetchWait: time.Second, Logger: bu.log})
}

// TestControllerRetriesElsewhere runs a search on a healthy worker and a
// worker whose one slot fails every design at once. The broken slot's
// failures are retried on the healthy worker's host, the slot is
// quarantined and its worker leaves with ErrQuarantined; no design ends
// as an error, every design counts once, and a replay of the stream
// reaches the controller's pool.
func TestControllerRetriesElsewhere(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	cfg := bu.config("retry")
	cfg.Budget, cfg.Init, cfg.Pool, cfg.WaitSlots = 40, 10, 5, 3
	done := bu.start(t, bu.ctx, cfg)
	bu.startWorker(t, "retry", "good", "node-good", 2, steady{20 * time.Millisecond})
	bad := bu.startWorker(t, "retry", "bad", "node-bad", 1, brokenGPU{})
	o := bu.wait(t, done)
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	s := o.s
	if s.Evaluations != 40 || s.OK != 40 || s.Error != 0 {
		t.Errorf("%d evaluations, %d ok, %d error; want all 40 ok", s.Evaluations, s.OK, s.Error)
	}
	if s.Retried == 0 || !slices.Equal(s.Quarantined, []string{"bad/0"}) {
		t.Errorf("%d retried, quarantined %v; want the broken slot's failures retried and the slot quarantined", s.Retried, s.Quarantined)
	}
	select {
	case <-bad.Done():
	case <-bu.ctx.Done():
		t.Fatal("the worker whose every slot is quarantined did not leave")
	}
	if err := bad.Err(); !errors.Is(err, worker.ErrQuarantined) {
		t.Errorf("the broken worker left with %v, want ErrQuarantined", err)
	}
	results := bu.results(t, "retry")
	failed := map[uint64]bool{}
	for _, r := range results {
		switch {
		case r.Worker == "bad":
			failed[r.Design.Seq] = true
		case failed[r.Design.Seq] && r.Design.Retry > 0:
			if !slices.Equal(r.Design.AvoidHosts, []string{"node-bad"}) || r.Worker != "good" {
				t.Errorf("retry of design %d avoided hosts %v and ran on %s; want node-bad avoided", r.Design.Seq, r.Design.AvoidHosts, r.Worker)
			}
		}
	}
	if len(failed) == 0 {
		t.Fatal("the broken worker stored no result")
	}
	if f := replay(results, cfg); f.Terminal() != 40 || f.Pool().Digest() != s.PoolDigest || f.Tally().Retries() != s.Retried {
		t.Errorf("replay: %d terminal, digest %s, %d retried; the controller: digest %s, %d retried",
			f.Terminal(), f.Pool().Digest(), f.Tally().Retries(), s.PoolDigest, s.Retried)
	}
}

// TestControllerRestoresRetries stores a failed attempt while no
// controller runs: a restarted controller finds the design's retry
// outstanding and not on the queue, and publishes it. Stopped again with
// the retry on the queue, the next controller publishes nothing twice:
// the queue holds one retry, which a worker then evaluates.
func TestControllerRestoresRetries(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	cfg := bu.config("restore")
	cfg.Budget, cfg.Init, cfg.Pool = 6, 3, 2
	// A controller that publishes the first designs (no slot is live:
	// its margin) and is stopped.
	ctx, cancel := context.WithCancel(bu.ctx)
	done := bu.start(t, ctx, cfg)
	queued := func() []*schema.Design { return bu.queuedDesigns(t, "restore") }
	bu.waitFor(t, "the designs published", func() bool { return len(queued()) >= 2 })
	cancel()
	<-done
	// A worker took design 1, failed it, and acked it: its result is the
	// only trace, and no controller listened.
	d := queued()[0]
	failedAt := time.Now()
	r := &schema.Result{Run: "restore", DesignID: d.ID, Design: *d, Status: schema.StatusError, Fitness: schema.InfeasibleFitness,
		Worker: "w1", Host: "h1", Slot: 0, Attempt: 1, Start: failedAt, Stop: failedAt, Gap: -1, Error: "CUDA error"}
	bu.storeAttempt(t, r)
	bu.deleteDesign(t, "restore", 1, 0)

	hook := logtest.NewLocal(bu.log)
	for _, round := range []string{"restarted", "restarted again"} {
		ctx, cancel := context.WithCancel(bu.ctx)
		looped := make(chan struct{})
		var once sync.Once
		rcfg := cfg
		rcfg.OnProgress = func(Progress) { once.Do(func() { close(looped) }) } // after its first top-up
		done := bu.start(t, ctx, rcfg)
		select {
		case <-looped:
		case <-bu.ctx.Done():
			t.Fatalf("%s: the controller did not start its loop", round)
		}
		cancel()
		<-done
		for _, e := range hook.AllEntries() {
			if strings.Contains(e.Message, "already on the queue") {
				t.Errorf("%s: %s (design %v): a retry on the queue was published again", round, e.Message, e.Data["design"])
			}
		}
		n := 0
		for _, q := range queued() {
			if q.Seq == 1 {
				n++
				if q.Retry != 1 || q.Genome == nil || !equalGenome(q.Genome, d.Genome) {
					t.Errorf("%s: design 1 on the queue as retry %d, genome %v; want retry 1 of the same design", round, q.Retry, q.Genome)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s: design 1 is %d times on the queue, want its retry once", round, n)
		}
	}
	done = bu.start(t, bu.ctx, cfg)
	bu.startWorker(t, "restore", "w2", "h2", 2, steady{time.Millisecond})
	o := bu.wait(t, done)
	if o.err != nil || o.s.Evaluations != 6 || o.s.OK != 6 || o.s.Retried != 1 {
		t.Fatalf("run: %+v %v; want 6 ok with one retried failure", o.s, o.err)
	}
	if f := replay(bu.results(t, "restore"), cfg); f.Pool().Digest() != o.s.PoolDigest {
		t.Errorf("replay digest %s, controller %s", f.Pool().Digest(), o.s.PoolDigest)
	}
}

func equalGenome(a, b map[string]any) bool {
	x, _ := schema.Marshal(a)
	y, _ := schema.Marshal(b)
	return string(x) == string(y)
}

// queuedDesigns reads the run's designs on the work queue, in stream order.
func (bu *bundle) queuedDesigns(t *testing.T, run string) []*schema.Design {
	t.Helper()
	st, err := bu.js.Stream(bu.ctx, schema.DesignStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []*schema.Design
	for seq := uint64(1); ; {
		raw, err := st.GetMsg(bu.ctx, seq, jetstream.WithGetMsgSubject(schema.DesignSubject(run)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		d, err := schema.DecodeDesign(raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
		seq = raw.Sequence + 1
	}
}

// deleteDesign deletes the queued design seq of run published for retry.
func (bu *bundle) deleteDesign(t *testing.T, run string, seq uint64, retry int) {
	t.Helper()
	st, err := bu.js.Stream(bu.ctx, schema.DesignStream)
	if err != nil {
		t.Fatal(err)
	}
	for s := uint64(1); ; {
		raw, err := st.GetMsg(bu.ctx, s, jetstream.WithGetMsgSubject(schema.DesignSubject(run)))
		if err != nil {
			t.Fatalf("design %d retry %d not on the queue: %v", seq, retry, err)
		}
		if d, _ := schema.DecodeDesign(raw.Data); d != nil && d.Seq == seq && d.Retry == retry {
			if err := st.DeleteMsg(bu.ctx, raw.Sequence); err != nil {
				t.Fatal(err)
			}
			return
		}
		s = raw.Sequence + 1
	}
}

// storeAttempt stores r as a worker does.
func (bu *bundle) storeAttempt(t *testing.T, r *schema.Result) {
	t.Helper()
	data, err := schema.EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bu.js.Publish(bu.ctx, schema.ResultSubject(r.Run), data, jetstream.WithMsgID(r.MsgID())); err != nil {
		t.Fatal(err)
	}
}

// TestControllerRetryAhead stores a failed attempt of a design the
// controller has not published: the controller publishes that design's
// retry, never its first publication, publishes every other design
// once, and no design beyond the budget, although its first batch (the
// 3 slots it waits for and a margin of 2) would cover the whole budget
// with the design taken ahead.
func TestControllerRetryAhead(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget, ahead = "ahead", 5, 3
	d := schema.Design{Run: run, ID: schema.DesignID(run, ahead), Seq: ahead, Created: time.Now(),
		Genome: bu.space.Random(rand.New(rand.NewPCG(1, 2))), Origin: schema.OriginRandom}
	bu.storeAttempt(t, &schema.Result{Run: run, DesignID: d.ID, Design: d, Status: schema.StatusError,
		Fitness: schema.InfeasibleFitness, Worker: "intruder", Host: "h0", Attempt: 1, Start: time.Now(), Stop: time.Now(),
		Error: "CUDA error"})
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool, cfg.WaitSlots = budget, 4, 2, 3
	done := bu.start(t, bu.ctx, cfg)
	bu.startWorker(t, run, "w1", "h1", 3, steady{time.Millisecond})
	o := bu.wait(t, done)
	if o.err != nil || o.s.Evaluations != budget || o.s.OK != budget || o.s.Retried != 1 {
		t.Fatalf("run: %+v %v; want %d ok, one retried", o.s, o.err, budget)
	}
	if n := bu.published(t); n != budget {
		t.Errorf("%d designs published, want %d: %d first publications and the retry of design %d", n, budget, budget-1, ahead)
	}
	for _, r := range bu.results(t, run) {
		if r.Design.Seq > budget || (r.Design.Seq == ahead && r.Worker == "w1" && r.Design.Retry != 1) {
			t.Errorf("result of design %d retry %d: want designs within the budget, design %d only as its retry", r.Design.Seq, r.Design.Retry, ahead)
		}
	}
}
