package controller

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/evoq/evoq/runstate"
)

func TestIdleWorkers(t *testing.T) {
	t.Parallel()
	running := runstate.BudgetFigures{Budget: 100, Done: 40, Open: true}
	cases := []struct {
		name  string
		ws    []runstate.WorkerLoad
		q     runstate.QueueFigures
		b     runstate.BudgetFigures
		want  []string // IdleWorker.String of each, in order
		slots int      // their idle slots
	}{
		{name: "every slot busy", ws: []runstate.WorkerLoad{{Worker: "a", Slots: 4, Busy: 4, Live: true, Evaluations: 9}},
			q: runstate.QueueFigures{Queued: 3}, b: running},
		{name: "never got a design", ws: []runstate.WorkerLoad{{Worker: "ghost", Slots: 8, Live: true}}, b: running,
			want: []string{"worker ghost registered 8 slots but never got a design"}, slots: 8},
		{name: "never got a design, run draining", ws: []runstate.WorkerLoad{{Worker: "late", Slots: 2, Live: true}},
			b:    runstate.BudgetFigures{Budget: 100, Done: 98},
			want: []string{"worker late registered 2 slots but never got a design"}, slots: 2},
		{name: "designs wait on the queue", ws: []runstate.WorkerLoad{{Worker: "a", Slots: 4, Busy: 1, Live: true, Evaluations: 9}},
			q: runstate.QueueFigures{Queued: 7}, b: running,
			want: []string{"worker a has 3 idle slots while 7 designs wait on the queue"}, slots: 3},
		{name: "designs wait though the run drains", ws: []runstate.WorkerLoad{{Worker: "a", Slots: 4, Busy: 1, Live: true, Evaluations: 9}},
			q: runstate.QueueFigures{Queued: 2}, b: runstate.BudgetFigures{Budget: 100, Done: 90},
			want: []string{"worker a has 3 idle slots while 2 designs wait on the queue"}, slots: 3},
		{name: "the budget has designs left", ws: []runstate.WorkerLoad{{Worker: "a", Slots: 4, Busy: 2, Live: true, Evaluations: 9}},
			b: running, want: []string{"worker a has 2 idle slots while the budget has 60 designs left"}, slots: 2},
		{name: "draining: nothing left to hand out", ws: []runstate.WorkerLoad{{Worker: "a", Slots: 4, Busy: 2, Live: true, Evaluations: 9}},
			b: runstate.BudgetFigures{Budget: 100, Done: 97}},
		{name: "budget done", ws: []runstate.WorkerLoad{{Worker: "a", Slots: 4, Live: true, Evaluations: 9}},
			b: runstate.BudgetFigures{Budget: 100, Done: 100, Open: true}},
		{name: "silent or leaving workers are not counted", ws: []runstate.WorkerLoad{{Worker: "gone", Slots: 8}, {Worker: "a", Slots: 1, Live: true}},
			q: runstate.QueueFigures{Queued: 5}, b: running,
			want: []string{"worker a registered 1 slots but never got a design"}, slots: 1},
		{name: "several, in the order given", ws: []runstate.WorkerLoad{
			{Worker: "a", Slots: 2, Busy: 2, Live: true, Evaluations: 3},
			{Worker: "b", Slots: 2, Busy: 1, Live: true, Evaluations: 3},
			{Worker: "c", Slots: 3, Live: true}},
			b:    running,
			want: []string{"worker b has 1 idle slots while the budget has 60 designs left", "worker c registered 3 slots but never got a design"}, slots: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			slots := 0
			for _, w := range runstate.IdleWorkers(tc.ws, tc.q, tc.b) {
				got = append(got, w.String())
				slots += w.Idle
			}
			if !reflect.DeepEqual(got, tc.want) || slots != tc.slots {
				t.Fatalf("IdleWorkers: %q with %d idle slots\nwant %q with %d", got, slots, tc.want, tc.slots)
			}
		})
	}
}

func TestDiagnoseIdle(t *testing.T) {
	t.Parallel()
	running := runstate.BudgetFigures{Budget: 100, Done: 40, Open: true, InFlight: 10, Target: 12}
	cases := []struct {
		name              string
		q                 runstate.QueueFigures
		b                 runstate.BudgetFigures
		diagnosis, advice string // contained in what DiagnoseIdle says
	}{
		{name: "queue unreadable", q: runstate.QueueFigures{Err: errors.New("timeout"), Queued: 5}, b: running,
			diagnosis: "the work queue cannot be read: timeout", advice: "check the broker"},
		{name: "MaxAckPending reached", q: runstate.QueueFigures{Delivered: 1024, MaxAckPending: 1024, Queued: 5}, b: running,
			diagnosis: "consumer limit: 1024 designs delivered and unacked = MaxAckPending 1024", advice: "raise MaxAckPending"},
		{name: "MaxWaiting reached", q: runstate.QueueFigures{Waiting: 64, MaxWaiting: 64, Queued: 5}, b: running,
			diagnosis: "consumer limit: 64 pull requests waiting = MaxWaiting 64", advice: "--expect-slots"},
		{name: "queued but not pulled", q: runstate.QueueFigures{Queued: 10, Delivered: 3, MaxAckPending: 1024, MaxWaiting: 4096}, b: running,
			diagnosis: "10 designs queued but not pulled", advice: "check the idle workers"},
		{name: "controller behind", q: runstate.QueueFigures{Delivered: 10, MaxAckPending: 1024}, b: running,
			diagnosis: "queue empty: 10 designs in flight, below the target 12", advice: "the controller is behind"},
		{name: "every design on a slot", q: runstate.QueueFigures{Delivered: 12}, b: runstate.BudgetFigures{Budget: 100, Done: 40, Open: true, InFlight: 12, Target: 12},
			diagnosis: "queue empty: every design is on a slot (12 in flight, target 12)", advice: "wait"},
		{name: "below target but nothing left to publish", q: runstate.QueueFigures{Delivered: 3}, b: runstate.BudgetFigures{Budget: 100, Done: 97, InFlight: 3, Target: 12},
			diagnosis: "queue empty: every design is on a slot (3 in flight, target 12)", advice: "the budget's last designs are running"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			diag, advice := DiagnoseIdle(tc.q, tc.b)
			if !strings.Contains(diag, tc.diagnosis) || !strings.Contains(advice, tc.advice) {
				t.Fatalf("DiagnoseIdle: %q, %q\nwant %q, %q", diag, advice, tc.diagnosis, tc.advice)
			}
		})
	}
}
