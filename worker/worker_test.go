package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// newDesign builds the valid design seq of run.
func newDesign(t testing.TB, run string, seq uint64, genome map[string]any) *schema.Design {
	t.Helper()
	d := &schema.Design{Run: run, ID: schema.DesignID(run, seq), Seq: seq, Genome: genome,
		Origin: schema.OriginRandom, Created: time.Now()}
	if err := d.Validate(); err != nil {
		t.Fatalf("test design: %v", err)
	}
	return d
}

// evalFunc is an Evaluator made of a function.
type evalFunc func(ctx context.Context, t Task) Outcome

func (f evalFunc) Name() string                                 { return "func" }
func (f evalFunc) Evaluate(ctx context.Context, t Task) Outcome { return f(ctx, t) }

// noop returns at once with fitness 0; the built-in evaluators live in
// internal/evaluators, which imports this package.
var noop = evalFunc(func(context.Context, Task) Outcome { return Outcome{Status: schema.StatusOK} })

// gate is an evaluator that blocks every evaluation until released or
// cancelled, and reports each one it starts.
type gate struct {
	started chan Task
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan Task, 100), release: make(chan struct{})} }

func (g *gate) Name() string { return "gate" }

func (g *gate) Evaluate(ctx context.Context, t Task) Outcome {
	g.started <- t
	select {
	case <-g.release:
		return Outcome{Status: schema.StatusOK, Fitness: 1}
	case <-ctx.Done():
		return Failed(ctx, ctx.Err())
	}
}

// waitStarted waits for the gate to start an evaluation.
func (g *gate) waitStarted(t *testing.T) Task {
	t.Helper()
	select {
	case task := <-g.started:
		return task
	case <-time.After(20 * time.Second):
		t.Fatal("no evaluation started")
		return Task{}
	}
}

// bundle is a broker shared by the subtests of one test; each subtest
// serves its own run.
type bundle struct {
	*testutil.Broker
	ctx context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{Broker: testutil.StartBroker(t), ctx: testutil.Context(t, 2*time.Minute)}
}

func (b *bundle) declare(t *testing.T, run string, cc broker.ConsumerConfig) {
	t.Helper()
	if _, err := broker.DeclareConsumer(b.ctx, b.JS, run, cc); err != nil {
		t.Fatal(err)
	}
}

// publish publishes designs from..to (inclusive) of run.
func (b *bundle) publish(t *testing.T, run string, from, to uint64) []*schema.Design {
	t.Helper()
	var ds []*schema.Design
	for seq := from; seq <= to; seq++ {
		d := newDesign(t, run, seq, map[string]any{"x": float64(seq)})
		data, err := schema.EncodeDesign(d)
		if err != nil {
			t.Fatal(err)
		}
		b.publishRaw(t, run, data)
		ds = append(ds, d)
	}
	return ds
}

func (b *bundle) publishRaw(t *testing.T, run string, data []byte) {
	t.Helper()
	if _, err := b.JS.Publish(b.ctx, schema.DesignSubject(run), data); err != nil {
		t.Fatal(err)
	}
}

// start starts a worker with test-friendly defaults; it is stopped when the
// test ends.
func (b *bundle) start(t *testing.T, cfg Config) *Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testutil.Logger(t)
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 100 * time.Millisecond
	}
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 500 * time.Millisecond
	}
	w, err := New(b.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// results reads the first n results of run, waiting for them.
func (b *bundle) results(t *testing.T, run string, n int) []*schema.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	cons, err := b.JS.OrderedConsumer(ctx, schema.ResultStream,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{schema.ResultSubject(run)}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*schema.Result
	for len(out) < n {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("after %d of %d results: %v", len(out), n, err)
		}
		r, err := schema.DecodeResult(msg.Data())
		if err != nil {
			t.Fatalf("result %d: %v", len(out)+1, err)
		}
		out = append(out, r)
	}
	return out
}

// count is the number of messages on subject in stream.
func (b *bundle) count(t *testing.T, stream, subject string) uint64 {
	t.Helper()
	s, err := b.JS.Stream(b.ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(b.ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

func (b *bundle) consumer(t *testing.T, run string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := b.JS.Consumer(b.ctx, schema.DesignStream, schema.ConsumerName(run))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// presence is the worker's presence entry, or nil when there is none.
func (b *bundle) presence(t *testing.T, run, worker string) *schema.Presence {
	t.Helper()
	kv, err := b.JS.KeyValue(b.ctx, schema.PresenceBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(b.ctx, schema.PresenceKey(run, worker))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := schema.DecodePresence(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (b *bundle) putRun(t *testing.T, run string, phase schema.Phase) {
	t.Helper()
	kv, err := b.JS.KeyValue(b.ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := schema.EncodeRun(&schema.Run{Run: run, Phase: phase, Budget: 10, Created: time.Now(), Updated: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(b.ctx, run, data); err != nil {
		t.Fatal(err)
	}
}

func waitDone(t *testing.T, w *Worker, timeout time.Duration) {
	t.Helper()
	select {
	case <-w.Done():
	case <-time.After(timeout):
		t.Fatalf("worker not done after %v", timeout)
	}
}

func TestWorkerServesEveryDesign(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run, id, slots, n = "serve", "w-serve", 3, 50
	b.declare(t, run, broker.ConsumerConfig{Slots: slots})
	designs := b.publish(t, run, 1, n)
	w := b.start(t, Config{Run: run, ID: id, Host: "node-1", Slots: slots, Evaluator: noop})

	testutil.WaitFor(t, 5*time.Second, "presence", func() bool { return b.presence(t, run, id) != nil })
	p := b.presence(t, run, id)
	if p.Slots != slots || p.Worker != id || p.Run != run || p.Host != "node-1" || p.PID != os.Getpid() ||
		p.Interval != 100*time.Millisecond || p.Leaving {
		t.Errorf("presence %+v", p)
	}

	res := b.results(t, run, n)
	bySeq := map[uint64]*schema.Result{}
	slotUse := map[int]int{}
	firsts := 0
	for _, r := range res {
		if r.Status != schema.StatusOK || r.Attempt != 1 || r.Worker != id || r.Host != "node-1" || r.Error != "" {
			t.Errorf("result %s: %s attempt %d worker %s host %s error %q", r.DesignID, r.Status, r.Attempt, r.Worker, r.Host, r.Error)
		}
		if r.Stop.Before(r.Start) {
			t.Errorf("result %s stops before it starts", r.DesignID)
		}
		if r.Gap == -1 {
			firsts++
		} else if r.Gap < 0 {
			t.Errorf("result %s: gap %v", r.DesignID, r.Gap)
		}
		bySeq[r.Design.Seq] = r
		slotUse[r.Slot]++
	}
	for _, d := range designs {
		r := bySeq[d.Seq]
		if r == nil {
			t.Errorf("no result for %s", d.ID)
			continue
		}
		if r.DesignID != d.ID || r.Design.Genome["x"] != d.Genome["x"] {
			t.Errorf("result %s carries design %+v, want %+v", r.DesignID, r.Design, *d)
		}
	}
	if len(slotUse) != slots {
		t.Errorf("slots used %v, want all of 0..%d", slotUse, slots-1)
	}
	for s := range slotUse {
		if s < 0 || s >= slots {
			t.Errorf("result from slot %d of %d", s, slots)
		}
	}
	if firsts != len(slotUse) {
		t.Errorf("%d results with the first-design gap -1, want one per used slot (%d)", firsts, len(slotUse))
	}

	testutil.WaitFor(t, 5*time.Second, "every design acked", func() bool {
		return b.count(t, schema.DesignStream, schema.DesignSubject(run)) == 0 && b.consumer(t, run).NumAckPending == 0
	})
	testutil.WaitFor(t, 5*time.Second, "presence to count the evaluations", func() bool {
		p := b.presence(t, run, id)
		return p != nil && p.Done == n && p.Busy == 0
	})

	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitDone(t, w, time.Second)
	if p := b.presence(t, run, id); p != nil {
		t.Errorf("presence left behind after Stop: %+v", p)
	}
	if got := b.count(t, schema.ResultStream, schema.ResultSubject(run)); got != n {
		t.Errorf("%d results stored, want %d", got, n)
	}
	if info := b.consumer(t, run); info.NumRedelivered != 0 || info.Delivered.Consumer != n {
		t.Errorf("consumer delivered %d, redelivered %d; want %d, 0", info.Delivered.Consumer, info.NumRedelivered, n)
	}
}

func TestWorkerNoPrefetch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run, id = "noprefetch", "w-np"
	b.declare(t, run, broker.ConsumerConfig{Slots: 2})
	b.publish(t, run, 1, 5)
	g := newGate()
	w := b.start(t, Config{Run: run, ID: id, Slots: 2, Evaluator: g})
	g.waitStarted(t)
	g.waitStarted(t)

	var info *jetstream.ConsumerInfo
	testutil.WaitFor(t, 5*time.Second, "two designs out, three queued", func() bool {
		info = b.consumer(t, run)
		return info.NumAckPending == 2 && info.NumPending == 3
	})
	if info.NumWaiting != 0 {
		t.Errorf("%d pull requests waiting while both slots are busy", info.NumWaiting)
	}
	testutil.WaitFor(t, 5*time.Second, "presence busy 2", func() bool {
		p := b.presence(t, run, id)
		return p != nil && p.Busy == 2
	})
	if w.Busy() != 2 {
		t.Errorf("Busy() = %d, want 2", w.Busy())
	}
	if info := b.consumer(t, run); info.NumAckPending != 2 || info.NumPending != 3 || info.Delivered.Consumer != 2 {
		t.Errorf("consumer out %d, queued %d, delivered %d; want 2, 3, 2", info.NumAckPending, info.NumPending, info.Delivered.Consumer)
	}
	if len(g.started) != 0 {
		t.Errorf("%d more evaluations started with both slots busy", len(g.started))
	}

	close(g.release)
	for _, r := range b.results(t, run, 5) {
		if r.Status != schema.StatusOK || r.Attempt != 1 {
			t.Errorf("result %s: %s attempt %d", r.DesignID, r.Status, r.Attempt)
		}
	}
}

func TestWorkerInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run, id = "inprogress", "w-ip"
	b.declare(t, run, broker.ConsumerConfig{Slots: 2, AckWait: time.Second})
	b.publish(t, run, 1, 1)
	var calls atomic.Int32
	slow := evalFunc(func(ctx context.Context, _ Task) Outcome {
		calls.Add(1)
		select {
		case <-time.After(3 * time.Second): // three AckWaits
			return Outcome{Status: schema.StatusOK, Fitness: 0.5}
		case <-ctx.Done():
			return Failed(ctx, ctx.Err())
		}
	})
	// Two slots: the idle one would receive the design if it were redelivered.
	w := b.start(t, Config{Run: run, ID: id, Slots: 2, Evaluator: slow})
	res := b.results(t, run, 1)[0]
	if res.Status != schema.StatusOK || res.Attempt != 1 || res.Duration() < 3*time.Second {
		t.Errorf("result %s attempt %d after %v", res.Status, res.Attempt, res.Duration())
	}
	testutil.WaitFor(t, 5*time.Second, "the design acked", func() bool { return b.consumer(t, run).NumAckPending == 0 })
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("evaluated %d times, want once", n)
	}
	if n := b.count(t, schema.ResultStream, schema.ResultSubject(run)); n != 1 {
		t.Errorf("%d results, want 1", n)
	}
	if info := b.consumer(t, run); info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("delivered %d times, %d redelivered; want 1, 0", info.Delivered.Consumer, info.NumRedelivered)
	}
}

func TestWorkerOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name        string
		evalTimeout time.Duration
		first       func(ctx context.Context) Outcome // outcome of design 1; design 2 is ok
		status      schema.Status
		fitness     float64
		errHas      string
		metrics     map[string]any
	}{{
		name:   "panic",
		first:  func(context.Context) Outcome { panic("boom in the evaluator") },
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: "evaluator panicked: boom in the evaluator",
	}, {
		name:   "status lost",
		first:  func(context.Context) Outcome { return Outcome{Status: schema.StatusLost, Fitness: 1} },
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: `evaluator returned status "lost"`,
	}, {
		name:   "empty status",
		first:  func(context.Context) Outcome { return Outcome{Fitness: 1} },
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: `evaluator returned status ""`,
	}, {
		name: "eval timeout", evalTimeout: 200 * time.Millisecond,
		first: func(ctx context.Context) Outcome {
			<-ctx.Done()
			return Failed(ctx, ctx.Err())
		},
		status: schema.StatusTimeout, fitness: schema.InfeasibleFitness, errHas: "timed out",
	}, {
		name:   "infeasible",
		first:  func(context.Context) Outcome { return Infeasible("no room") },
		status: schema.StatusInfeasible, fitness: schema.InfeasibleFitness, errHas: "no room",
	}, {
		name: "oversized metrics",
		first: func(context.Context) Outcome {
			return Outcome{Status: schema.StatusOK, Fitness: 0.9, Metrics: map[string]any{"blob": strings.Repeat("x", 2<<20)}}
		},
		status: schema.StatusError, fitness: schema.InfeasibleFitness, errHas: "result not storable",
	}, {
		name: "ok with metrics",
		first: func(context.Context) Outcome {
			return Outcome{Status: schema.StatusOK, Fitness: 0.25, Metrics: map[string]any{"loss": 0.5, "arch": "relu"}}
		},
		status: schema.StatusOK, fitness: 0.25, metrics: map[string]any{"loss": 0.5, "arch": "relu"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := "outcome-" + strings.ReplaceAll(tc.name, " ", "-")
			b.declare(t, run, broker.ConsumerConfig{Slots: 1})
			b.publish(t, run, 1, 2)
			ev := evalFunc(func(ctx context.Context, task Task) Outcome {
				if task.Design.Seq == 1 {
					return tc.first(ctx)
				}
				return Outcome{Status: schema.StatusOK, Fitness: 0.7}
			})
			b.start(t, Config{Run: run, ID: "w-out", Slots: 1, Evaluator: ev, EvalTimeout: tc.evalTimeout})
			res := b.results(t, run, 2)
			first, second := res[0], res[1]
			if first.Design.Seq != 1 || second.Design.Seq != 2 {
				t.Fatalf("results for seq %d, %d; want 1, 2", first.Design.Seq, second.Design.Seq)
			}
			if first.Status != tc.status || first.Fitness != tc.fitness || !strings.Contains(first.Error, tc.errHas) || first.Attempt != 1 {
				t.Errorf("design 1: %s fitness %v attempt %d error %q; want %s %v containing %q",
					first.Status, first.Fitness, first.Attempt, clip(first.Error, 300), tc.status, tc.fitness, tc.errHas)
			}
			for k, v := range tc.metrics {
				if first.Metrics[k] != v {
					t.Errorf("metric %s = %v, want %v", k, first.Metrics[k], v)
				}
			}
			if tc.metrics == nil && first.Metrics != nil {
				t.Errorf("metrics %v, want none", first.Metrics)
			}
			if second.Status != schema.StatusOK || second.Fitness != 0.7 || second.Slot != first.Slot || second.Gap < 0 {
				t.Errorf("the slot did not go on: design 2 %s fitness %v slot %d gap %v", second.Status, second.Fitness, second.Slot, second.Gap)
			}
			testutil.WaitFor(t, 5*time.Second, "both designs acked", func() bool {
				return b.count(t, schema.DesignStream, schema.DesignSubject(run)) == 0
			})
		})
	}
}

// Every result names its node: host, GPU index and UUID, and how the
// evaluator's process ended.
func TestWorkerRecordsNode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run = "node"
	b.declare(t, run, broker.ConsumerConfig{Slots: 1})
	b.publish(t, run, 1, 3)
	ev := Command{Cmd: `case "$EVOQ_DESIGN_ID" in *-2) exit 3;; *-3) kill -KILL $$;; esac; echo '{"fitness": 1}'`}
	b.start(t, Config{Run: run, ID: "w-node", Host: "node-17", Slots: 1, Evaluator: ev,
		SlotGPUs: []string{"3"}, SlotGPUUUIDs: []string{"GPU-5e7d7c1a"}})
	exit := func(r *schema.Result) string {
		if r.Exit == nil {
			return "none"
		}
		return strconv.Itoa(*r.Exit)
	}
	want := map[uint64]string{1: "ok exit 0 signal ", 2: "error exit 3 signal ", 3: "error exit none signal SIGKILL"}
	for _, r := range b.results(t, run, 3) {
		if r.Host != "node-17" || r.GPU != "3" || r.GPUUUID != "GPU-5e7d7c1a" {
			t.Errorf("design %d: host %q gpu %q uuid %q; want node-17, 3, GPU-5e7d7c1a", r.Design.Seq, r.Host, r.GPU, r.GPUUUID)
		}
		if got := fmt.Sprintf("%s exit %s signal %s", r.Status, exit(r), r.Signal); got != want[r.Design.Seq] {
			t.Errorf("design %d: %s, want %s", r.Design.Seq, got, want[r.Design.Seq])
		}
	}
}

func TestWorkerRejectsMalformedDesigns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	badID := &schema.Design{V: schema.Version, Run: "malformed-bad-id", ID: "not-the-id", Seq: 1,
		Genome: map[string]any{}, Origin: schema.OriginRandom, Created: time.Now()}
	badIDBytes, err := schema.Marshal(badID)
	if err != nil {
		t.Fatal(err)
	}
	future, err := schema.Marshal(map[string]any{"v": 99, "run": "malformed-version"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		run    string
		data   []byte
		design string // the design ID logged, if it decoded far enough
	}{
		{"garbage", "malformed-garbage", []byte("this is not msgpack"), ""},
		{"empty", "malformed-empty", []byte{}, ""},
		{"future version", "malformed-version", future, ""},
		{"invalid field", badID.Run, badIDBytes, "not-the-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := testutil.Logger(t)
			hook := logtest.NewLocal(log)
			b.declare(t, tc.run, broker.ConsumerConfig{Slots: 1})
			b.publishRaw(t, tc.run, tc.data)
			b.publish(t, tc.run, 2, 2)
			var seen atomic.Int32
			ev := evalFunc(func(context.Context, Task) Outcome {
				seen.Add(1)
				return Outcome{Status: schema.StatusOK, Fitness: 1}
			})
			b.start(t, Config{Run: tc.run, ID: "w-mal", Slots: 1, Evaluator: ev, Logger: log})
			r := b.results(t, tc.run, 1)[0]
			if r.Design.Seq != 2 || r.Status != schema.StatusOK {
				t.Errorf("result for seq %d %s, want the valid design 2 ok", r.Design.Seq, r.Status)
			}
			testutil.WaitFor(t, 5*time.Second, "both messages gone from the work queue", func() bool {
				return b.count(t, schema.DesignStream, schema.DesignSubject(tc.run)) == 0 && b.consumer(t, tc.run).NumAckPending == 0
			})
			if n := seen.Load(); n != 1 {
				t.Errorf("evaluator called %d times, want once (the valid design)", n)
			}
			if info := b.consumer(t, tc.run); info.Delivered.Consumer != 2 || info.NumRedelivered != 0 {
				t.Errorf("delivered %d, redelivered %d; want 2, 0 (the malformed design terminated)", info.Delivered.Consumer, info.NumRedelivered)
			}
			var logged []*logrus.Entry
			for _, e := range hook.AllEntries() {
				if e.Message == "rejected a malformed design" {
					logged = append(logged, e)
				}
			}
			if len(logged) != 1 {
				t.Fatalf("%d rejection log entries, want 1", len(logged))
			}
			e := logged[0]
			if e.Level != logrus.ErrorLevel || e.Data["run"] != tc.run || e.Data["bytes"] != len(tc.data) || e.Data[logrus.ErrorKey] == nil {
				t.Errorf("rejection logged as %s %v", e.Level, e.Data)
			}
			if got, _ := e.Data["design"].(string); got != tc.design {
				t.Errorf("logged design %q, want %q", got, tc.design)
			}
		})
	}
}

func TestWorkerStopDrains(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run, id = "drain", "w-drain"
	b.declare(t, run, broker.ConsumerConfig{Slots: 1})
	b.publish(t, run, 1, 2)
	g := newGate()
	w := b.start(t, Config{Run: run, ID: id, Slots: 1, Evaluator: g})
	g.waitStarted(t)

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- w.Stop(ctx)
	}()
	testutil.WaitFor(t, 5*time.Second, "presence to say leaving", func() bool {
		p := b.presence(t, run, id)
		return p != nil && p.Leaving && p.Busy == 1
	})
	close(g.release)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitDone(t, w, time.Second)
	r := b.results(t, run, 1)[0]
	if r.Design.Seq != 1 || r.Status != schema.StatusOK || r.Attempt != 1 {
		t.Errorf("result seq %d %s attempt %d", r.Design.Seq, r.Status, r.Attempt)
	}
	if n := b.count(t, schema.ResultStream, schema.ResultSubject(run)); n != 1 {
		t.Errorf("%d results, want 1: a stopping worker took a new design", n)
	}
	info := b.consumer(t, run)
	if info.NumAckPending != 0 || info.NumPending != 1 || info.Delivered.Consumer != 1 {
		t.Errorf("consumer out %d, queued %d, delivered %d; want 0, 1, 1", info.NumAckPending, info.NumPending, info.Delivered.Consumer)
	}
	if p := b.presence(t, run, id); p != nil {
		t.Errorf("presence left behind: %+v", p)
	}
}

func TestWorkerStopHandsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run = "handback"
	// An AckWait longer than the wait for the result: only a Nak brings the
	// design back in time.
	b.declare(t, run, broker.ConsumerConfig{Slots: 1, AckWait: 5 * time.Minute})
	b.publish(t, run, 1, 1)
	g := newGate()
	first := b.start(t, Config{Run: run, ID: "w-first", Slots: 1, Evaluator: g})
	if task := g.waitStarted(t); task.Attempt != 1 || task.Worker != "w-first" || task.Slot != 0 {
		t.Errorf("task %+v", task)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := first.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the drain deadline", err)
	}
	waitDone(t, first, time.Second)
	if n := b.count(t, schema.ResultStream, schema.ResultSubject(run)); n != 0 {
		t.Fatalf("the cancelled evaluation stored %d results", n)
	}

	b.start(t, Config{Run: run, ID: "w-second", Slots: 1, Evaluator: noop})
	r := b.results(t, run, 1)[0]
	if r.Worker != "w-second" || r.Attempt != 2 || r.Status != schema.StatusOK || r.Design.Seq != 1 {
		t.Errorf("result by %s attempt %d %s, want w-second attempt 2 ok", r.Worker, r.Attempt, r.Status)
	}
	testutil.WaitFor(t, 5*time.Second, "the design acked", func() bool {
		return b.count(t, schema.DesignStream, schema.DesignSubject(run)) == 0
	})
	if info := b.consumer(t, run); info.Delivered.Consumer != 2 {
		t.Errorf("delivered %d times, want 2", info.Delivered.Consumer)
	}
}

func TestWorkerStopsWhenRunDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name    string
		run     string
		when    string // before the worker starts, while it idles, or while it evaluates
		results uint64
	}{
		{"done before start", "done-before", "before", 0},
		{"done while idle", "done-idle", "idle", 3},
		{"done while evaluating", "done-busy", "busy", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const id = "w-done"
			b.declare(t, tc.run, broker.ConsumerConfig{Slots: 2})
			if tc.when == "before" {
				b.putRun(t, tc.run, schema.PhaseDone)
			} else {
				b.putRun(t, tc.run, schema.PhaseRunning)
			}
			var ev Evaluator = noop
			g := newGate()
			if tc.when == "busy" {
				ev = g
			}
			w := b.start(t, Config{Run: tc.run, ID: id, Slots: 2, Evaluator: ev})
			switch tc.when {
			case "idle":
				b.publish(t, tc.run, 1, 3)
				b.results(t, tc.run, 3)
			case "busy":
				b.publish(t, tc.run, 1, 1)
				g.waitStarted(t)
			}
			if tc.when != "before" {
				select {
				case <-w.Done():
					t.Fatal("worker stopped while its run is running")
				default:
				}
				b.putRun(t, tc.run, schema.PhaseDraining)
				b.putRun(t, tc.run, schema.PhaseDone)
			}
			waitDone(t, w, 10*time.Second)
			if n := b.count(t, schema.ResultStream, schema.ResultSubject(tc.run)); n != tc.results {
				t.Errorf("%d results, want %d", n, tc.results)
			}
			if p := b.presence(t, tc.run, id); p != nil {
				t.Errorf("presence left behind: %+v", p)
			}
			ctx, cancel := context.WithTimeout(b.ctx, time.Second)
			defer cancel()
			if err := w.Stop(ctx); err != nil {
				t.Errorf("Stop after done: %v", err)
			}
		})
	}
}

// A worker whose run fails stops taking designs, lets the evaluation it
// runs finish and store its result, and ends with ErrRunFailed quoting the
// run's failure. A worker started for a failed run waits until a
// controller continues it.
func TestWorkerLeavesFailedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run = "failing"
	b.declare(t, run, broker.ConsumerConfig{Slots: 1})
	b.putRun(t, run, schema.PhaseRunning)
	g := newGate()
	w := b.start(t, Config{Run: run, ID: "w-failed", Slots: 1, Evaluator: g})
	b.publish(t, run, 1, 1)
	g.waitStarted(t)
	kv, err := b.JS.KeyValue(b.ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := schema.EncodeRun(&schema.Run{Run: run, Phase: schema.PhaseFailed, Budget: 10, Created: time.Now(), Updated: time.Now(),
		Failure: &schema.Failure{Attempts: 10, StreamSeq: 10, Error: "sh: 1: nonexistent-prog: not found", Count: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(b.ctx, run, data); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.fetchCtx.Done(): // it stopped taking designs
	case <-time.After(10 * time.Second):
		t.Fatal("the worker still takes designs 10 s after its run failed")
	}
	close(g.release)
	waitDone(t, w, 10*time.Second)
	if err := w.Err(); !errors.Is(err, ErrRunFailed) || !strings.Contains(err.Error(), "nonexistent-prog: not found") {
		t.Errorf("Err = %v; want ErrRunFailed quoting the run's failure", err)
	}
	if n := b.count(t, schema.ResultStream, schema.ResultSubject(run)); n != 1 {
		t.Errorf("%d results; want the running evaluation's 1", n)
	}

	late, err := New(b.JS, Config{Run: run, ID: "w-late", Evaluator: noop, Logger: testutil.Logger(t), JoinTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Start(b.ctx); !errors.Is(err, ErrNoRun) || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("Start on a failed run = %v; want ErrNoRun saying it failed", err)
	}
	b.putRun(t, run, schema.PhaseStarting) // a controller continues the run
	again := b.start(t, Config{Run: run, ID: "w-again", Slots: 1, Evaluator: noop})
	if again.Err() != nil {
		t.Errorf("a worker of the continued run: %v", again.Err())
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	ok := Config{Run: "r1", ID: "w1", Slots: 1, Evaluator: noop}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		errHas string
	}{
		{"negative slots", func(c *Config) { c.Slots = -1 }, "Slots -1: need at least 1"},
		{"empty run", func(c *Config) { c.Run = "" }, `Run "": empty`},
		{"run with a dot", func(c *Config) { c.Run = "a.b" }, `Run "a.b": "a.b" has '.'`},
		{"run with a wildcard", func(c *Config) { c.Run = "a*" }, `Run "a*"`},
		{"run too long", func(c *Config) { c.Run = strings.Repeat("r", schema.MaxTokenLen+1) }, "longer than 64"},
		{"bad worker ID", func(c *Config) { c.ID = "w 1" }, `ID "w 1"`},
		{"nil evaluator", func(c *Config) { c.Evaluator = nil }, "no evaluator"},
		{"negative eval timeout", func(c *Config) { c.EvalTimeout = -time.Second }, "EvalTimeout -1s: is negative"},
		{"fetch wait too short", func(c *Config) { c.FetchWait = 50 * time.Millisecond }, "FetchWait 50ms"},
		{"GPU UUIDs for other slots", func(c *Config) { c.SlotGPUUUIDs = []string{"GPU-a", "GPU-b"} }, "SlotGPUUUIDs: 2 GPU UUIDs for 1 slots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tc.change(&cfg)
			w, err := New(nil, cfg)
			var fe *schema.FieldError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.errHas) || w != nil {
				t.Errorf("New = %v, %v; want a FieldError matching ErrConfig, saying %q", w, err, tc.errHas)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	w, err := New(nil, Config{Run: "r1", Evaluator: noop})
	if err != nil {
		t.Fatal(err)
	}
	if w.cfg.Slots != SlotsDefault || w.cfg.Heartbeat != HeartbeatDefault || w.cfg.FetchWait != FetchWaitDefault ||
		w.cfg.Host == "" || w.cfg.Logger == nil {
		t.Errorf("defaults %+v", w.cfg)
	}
	if err := schema.ValidToken(w.ID()); err != nil || !strings.HasSuffix(w.ID(), "-"+strconv.Itoa(os.Getpid())) {
		t.Errorf("default ID %q (%v), want host-pid", w.ID(), err)
	}
	w, err = New(nil, Config{Run: "r1", Host: "gpu.node:7/a", Evaluator: noop})
	if err != nil {
		t.Fatalf("a host name with odd characters: %v", err)
	}
	if want := "gpu-node-7-a-" + strconv.Itoa(os.Getpid()); w.ID() != want {
		t.Errorf("ID %q, want %q", w.ID(), want)
	}
}

func TestStartChecksTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name     string
		declare  *broker.ConsumerConfig
		cfg      Config
		is       error
		errHas   string
		joinWait time.Duration
	}{
		{"more slots than MaxWaiting", &broker.ConsumerConfig{Slots: 1},
			Config{Slots: broker.MinWaiting + 1}, ErrConfig, "MaxWaiting 4096", 0},
		{"AckWait under three heartbeats", &broker.ConsumerConfig{Slots: 1, AckWait: time.Second},
			Config{Slots: 1, Heartbeat: time.Second}, ErrConfig, "AckWait 1s", 0},
		{"run never starts", nil, Config{Slots: 1}, ErrNoRun, "run start-run-never-starts is not on the broker", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := "start-" + strings.ReplaceAll(tc.name, " ", "-")
			if tc.declare != nil {
				b.declare(t, run, *tc.declare)
			}
			cfg := tc.cfg
			cfg.Run, cfg.ID, cfg.Evaluator, cfg.Logger, cfg.JoinTimeout = run, "w-start", noop, testutil.Logger(t), tc.joinWait
			w, err := New(b.JS, cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = w.Start(b.ctx)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Start = %v, want %v naming %q", err, tc.is, tc.errHas)
			}
		})
	}
}

// A worker pulls for all its free slots with one or two pull requests,
// whose batches cover exactly the slots waiting: the broker holds no
// request per slot, and busy slots prefetch nothing.
func TestWorkerPullsForFreeSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const run, id, slots = "feeder", "w-feed", 40
	b.declare(t, run, broker.ConsumerConfig{Slots: slots})
	g := newGate()
	w := b.start(t, Config{Run: run, ID: id, Slots: slots, Evaluator: g})
	testutil.WaitFor(t, 10*time.Second, "every slot waiting, covered by the requests out", func() bool {
		covered, waiting := w.feed.asked()
		return covered == slots && waiting == slots
	})
	if n := b.consumer(t, run).NumWaiting; n < 1 || n > feedLanes {
		t.Errorf("%d pull requests waiting for %d free slots, want 1 to %d", n, slots, feedLanes)
	}
	b.publish(t, run, 1, slots+10)
	for range slots {
		g.waitStarted(t)
	}
	var info *jetstream.ConsumerInfo
	testutil.WaitFor(t, 5*time.Second, "one design per slot, the rest queued", func() bool {
		info = b.consumer(t, run)
		return info.NumAckPending == slots && info.NumPending == 10
	})
	if covered, waiting := w.feed.asked(); covered != 0 || waiting != 0 || info.NumWaiting != 0 {
		t.Errorf("with every slot busy: requests cover %d, %d slots waiting, %d requests at the broker; want none", covered, waiting, info.NumWaiting)
	}
	close(g.release)
	res := b.results(t, run, slots+10)
	seen := map[uint64]bool{}
	for _, r := range res {
		if seen[r.Design.Seq] {
			t.Errorf("design %d evaluated twice", r.Design.Seq)
		}
		seen[r.Design.Seq] = true
	}
}
