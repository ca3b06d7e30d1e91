package controller

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/worker"
)

// broken fails every design at once, as a worker whose evaluator is not
// installed does.
type broken struct{}

func (broken) Name() string { return "broken" }

func (broken) Evaluate(context.Context, worker.Task) worker.Outcome {
	return worker.Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Error: notFound}
}

// A run whose evaluator fails everywhere stops after its first 10
// attempts with phase failed, and its worker follows it out; a controller
// started on it again, with a working evaluator, finishes it: every
// design counted once, and the designs spent on the broken evaluator made
// up for.
func TestControllerFailsFast(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, budget = "broken", 100
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool = budget, 10, 5
	done := bu.start(t, bu.ctx, cfg)
	w := bu.worker(t, run, "bad", 2, broken{}, 0)
	o := bu.wait(t, done)
	var fe *runstate.FailedError
	want := schema.Failure{Attempts: runstate.FailFastDefault, StreamSeq: runstate.FailFastDefault, Error: notFound, Count: runstate.FailFastDefault}
	if !errors.As(o.err, &fe) || !errors.Is(o.err, runstate.ErrFailed) || fe.Failure != want {
		t.Fatalf("Run = %v; want a FailedError with %+v", o.err, want)
	}
	rec := bu.runPhase(t, run)
	if rec.Phase != schema.PhaseFailed || rec.Failure == nil || *rec.Failure != want || rec.FailFast != runstate.FailFastDefault || rec.FailFastFrom != 0 {
		t.Fatalf("run record: phase %s, failure %+v, fail-fast %d from %d; want failed, %+v, %d from 0",
			rec.Phase, rec.Failure, rec.FailFast, rec.FailFastFrom, want, runstate.FailFastDefault)
	}
	select {
	case <-w.Done():
	case <-time.After(runLimit):
		t.Fatal("the worker did not leave the failed run")
	}
	if !errors.Is(w.Err(), worker.ErrRunFailed) {
		t.Errorf("the worker left with %v; want ErrRunFailed", w.Err())
	}

	// What a restart replays reaches the verdict the run recorded.
	first := bu.results(t, run)
	tally, check := runstate.NewTally(run, rec.Budget, runstate.RulesOf(rec)), runstate.NewFailFast(rec.FailFast, rec.FailFastFrom)
	var replayed *schema.Failure
	madeUp := 0
	for i, r := range first {
		v := tally.Judge(r, nil)
		if f := check.Observe(uint64(i+1), r, v, tally.Counted() >= rec.Budget); f != nil {
			replayed = f
		}
		if v == runstate.Counted && r.Status == schema.StatusError {
			madeUp++
		}
	}
	if !reflect.DeepEqual(replayed, rec.Failure) {
		t.Errorf("replayed verdict %+v, recorded %+v", replayed, rec.Failure)
	}

	done = bu.start(t, bu.ctx, bu.config(run))
	bu.worker(t, run, "good", 2, evaluators.Noop{}, 0)
	o = bu.wait(t, done)
	if o.err != nil {
		t.Fatalf("continued run: %v", o.err)
	}
	if s := o.s; s.OK != budget || s.Error != madeUp || s.Evaluations != budget+madeUp {
		t.Errorf("continued run: %d evaluations, %d ok, %d error; want %d: %d ok and the failed start's %d errors",
			s.Evaluations, s.OK, s.Error, budget+madeUp, budget, madeUp)
	}
	rec = bu.runPhase(t, run)
	if rec.Phase != schema.PhaseDone || rec.Budget != budget+madeUp || rec.MadeUp != madeUp ||
		rec.FailFastFrom != uint64(len(first)) || rec.Failure != nil {
		t.Errorf("run record: phase %s, budget %d, made up %d, fail-fast from %d, failure %+v; want done, %d, %d, %d, none",
			rec.Phase, rec.Budget, rec.MadeUp, rec.FailFastFrom, rec.Failure, budget+madeUp, madeUp, len(first))
	}
	checkHistory(t, bu.results(t, run), budget+madeUp)
}
