package worker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// A slot's pull request goes out while the walltime still leaves room for
// a typical evaluation; the clock then moves on before the design arrives.
// A design that can no longer finish before the walltime less its margin
// is handed back unevaluated, at once (the ack wait is far longer than the
// test), and another worker evaluates it; one that can still finish is
// evaluated. The worker's clock is moved and its periodic walltime check
// is held off, so the design always arrives to a slot that asked in time.
func TestWalltimeRecheckOnArrival(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Hours of room either side, so that no delay in delivering the design
	// changes which side of the line it lands on.
	const margin, minEval, room = time.Minute, time.Hour, 10 * time.Hour
	for _, tc := range []struct {
		name  string
		run   string
		slots int
		left  time.Duration // before the walltime less margin, when the design arrives
		late  bool
	}{
		{"arrives in time", "wt-in-time", 1, 2 * minEval, false},
		{"arrives too late", "wt-late", 1, minEval / 2, true},
		// The other slot waits for a design too when the design is handed
		// back, and a request of the worker's is still out: the design
		// must not be lost on it.
		{"arrives too late, two slots", "wt-late-2", 2, minEval / 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b.declare(t, tc.run, broker.ConsumerConfig{Slots: tc.slots, AckWait: 5 * time.Minute})
			log := testutil.Logger(t)
			hook := logtest.NewLocal(log)
			var evaluated atomic.Int32
			ev := evalFunc(func(context.Context, Task) Outcome {
				evaluated.Add(1)
				return Outcome{Status: schema.StatusOK, Fitness: 1}
			})
			deadline := time.Now().Add(room + margin)
			var skew atomic.Int64
			w, err := New(b.JS, Config{Run: tc.run, ID: "w-wall", Slots: tc.slots, Evaluator: ev, Deadline: deadline,
				WalltimeMargin: margin, MinEvalTime: minEval, Heartbeat: 100 * time.Millisecond,
				FetchWait: 10 * time.Minute, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			w.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			w.walltimeEvery = time.Hour
			if err := w.Start(b.ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = w.Stop(ctx)
			})
			testutil.WaitFor(t, 10*time.Second, "the slots' pull requests", func() bool {
				covered, waiting := w.feed.asked()
				return covered == tc.slots && waiting == tc.slots && b.consumer(t, tc.run).NumWaiting >= 1
			})
			skew.Store(int64(room - tc.left))
			b.publish(t, tc.run, 1, 1)

			if !tc.late {
				r := b.results(t, tc.run, 1)[0]
				if r.Worker != "w-wall" || r.Attempt != 1 || evaluated.Load() != 1 {
					t.Errorf("result by %s attempt %d, evaluated %d times; want w-wall attempt 1, once", r.Worker, r.Attempt, evaluated.Load())
				}
				if n := len(walltimeEntries(hook)); n != 0 {
					t.Errorf("%d walltime log entries for a design that fits", n)
				}
				select {
				case <-w.Done():
					t.Error("the worker left with time for more designs")
				default:
				}
				return
			}

			waitDone(t, w, 10*time.Second)
			if n := evaluated.Load(); n != 0 {
				t.Errorf("the late design was evaluated %d times", n)
			}
			if n := b.count(t, schema.ResultStream, schema.ResultSubject(tc.run)); n != 0 {
				t.Errorf("%d results stored by the worker that handed the design back", n)
			}
			checkLateLog(t, walltimeEntries(hook), tc.run, tc.left, minEval)

			b.start(t, Config{Run: tc.run, ID: "w-other", Slots: 1, Evaluator: noop})
			r := b.results(t, tc.run, 1)[0]
			if r.Worker != "w-other" || r.Attempt != 2 || r.Status != schema.StatusOK || r.Design.Seq != 1 {
				t.Errorf("result by %s attempt %d %s seq %d, want w-other attempt 2 ok seq 1", r.Worker, r.Attempt, r.Status, r.Design.Seq)
			}
			testutil.WaitFor(t, 5*time.Second, "the design acked", func() bool {
				return b.count(t, schema.DesignStream, schema.DesignSubject(tc.run)) == 0
			})
			if info := b.consumer(t, tc.run); info.Delivered.Consumer != 2 || info.NumRedelivered != 0 || info.NumAckPending != 0 {
				t.Errorf("delivered %d, redelivered %d, out %d; want 2, 0, 0", info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending)
			}
		})
	}
}

// walltimeEntries are the worker's walltime log entries.
func walltimeEntries(hook *logtest.Hook) []*logrus.Entry {
	var out []*logrus.Entry
	for _, e := range hook.AllEntries() {
		if strings.HasPrefix(e.Message, "walltime:") {
			out = append(out, e)
		}
	}
	return out
}

// checkLateLog: one line says the worker takes no more designs, one that
// the late design was handed back, with the time that was left and the
// evaluation it had to cover.
func checkLateLog(t *testing.T, entries []*logrus.Entry, run string, left, typical time.Duration) {
	t.Helper()
	var msgs []string
	for _, e := range entries {
		msgs = append(msgs, e.Message)
	}
	if len(entries) != 2 ||
		entries[0].Message != "walltime: too little time left for another evaluation; taking no new designs" ||
		entries[1].Message != "walltime: a design arrived too late to finish in time; handed it back unevaluated" {
		t.Fatalf("walltime log %q, want the stop and the hand-back, once each", msgs)
	}
	e := entries[1]
	got, _ := e.Data["left"].(time.Duration)
	if e.Level != logrus.WarnLevel || e.Data["design"] != schema.DesignID(run, 1) || e.Data["attempt"] != 1 ||
		e.Data["typical_eval"] != typical || got > left || got <= 0 {
		t.Errorf("hand-back logged as %s %v; want a warning with the design, attempt 1, left under %s, typical_eval %s",
			e.Level, e.Data, left, typical)
	}
}
