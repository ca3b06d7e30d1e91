package runstate

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/evoq/evoq/schema"
)

// on is r as the result of worker's slot, on host.
func on(r *schema.Result, worker, host string, slot int) *schema.Result {
	c := *r
	c.Worker, c.Host, c.Slot = worker, host, slot
	return &c
}

// retryOf is r's design published for its retry n, evaluated ending in
// status on another worker.
func retryOf(r *schema.Result, n int, status schema.Status, fitness float64) *schema.Result {
	c := *r
	c.Design.Retry, c.Design.AvoidWorkers = n, []string{r.Worker}
	c.Worker, c.Slot, c.Attempt, c.Status, c.Fitness = "good", 0, 1, status, fitness
	if status != schema.StatusOK {
		c.Fitness = schema.InfeasibleFitness
	}
	return &c
}

// TestTallyRetries feeds each case's results, in order, to a tally of run
// "t" with budget 5 and checks the verdict on each, and what design 1
// ends with.
func TestTallyRetries(t *testing.T) {
	t.Parallel()
	failed := on(result(1, schema.StatusError, 0), "bad", "h1", 0)
	timedOut := on(result(1, schema.StatusTimeout, 0), "bad", "h1", 0)
	broken := on(result(1, schema.StatusError, 0), "bad", "h1", 0)
	broken.Design.Genome = nil // a design the worker rejected: only its identity is valid
	tests := []struct {
		name    string
		retries int
		results []*schema.Result
		want    []Verdict
		status  schema.Status // what design 1 counts as
	}{
		{"retried then ok counts once, as ok", 1,
			[]*schema.Result{failed, retryOf(failed, 1, schema.StatusOK, 0.9), retryOf(failed, 1, schema.StatusOK, 0.8)},
			[]Verdict{Retried, Counted, Duplicate}, schema.StatusOK},
		{"two failures with one retry count as error", 1,
			[]*schema.Result{failed, retryOf(failed, 1, schema.StatusError, 0)},
			[]Verdict{Retried, Counted}, schema.StatusError},
		{"a timeout is retried too", 1,
			[]*schema.Result{timedOut, retryOf(timedOut, 1, schema.StatusOK, 0.9)},
			[]Verdict{Retried, Counted}, schema.StatusOK},
		{"infeasible is the evaluator's verdict: never retried", 1,
			[]*schema.Result{on(result(1, schema.StatusInfeasible, 0), "bad", "h1", 0)},
			[]Verdict{Counted}, schema.StatusInfeasible},
		{"lost is never retried", 1,
			[]*schema.Result{result(1, schema.StatusLost, 0)},
			[]Verdict{Counted}, schema.StatusLost},
		{"no retries: the first failure counts", 0,
			[]*schema.Result{failed, retryOf(failed, 1, schema.StatusOK, 0.9)},
			[]Verdict{Counted, Duplicate}, schema.StatusError},
		{"two retries, all failing", 2,
			[]*schema.Result{failed, retryOf(failed, 1, schema.StatusError, 0), retryOf(failed, 2, schema.StatusError, 0)},
			[]Verdict{Retried, Retried, Counted}, schema.StatusError},
		{"two retries, the second succeeds", 2,
			[]*schema.Result{failed, retryOf(failed, 1, schema.StatusTimeout, 0), retryOf(failed, 2, schema.StatusOK, 0.7)},
			[]Verdict{Retried, Retried, Counted}, schema.StatusOK},
		{"a failure of a design that does not validate would fail anywhere", 1,
			[]*schema.Result{broken}, []Verdict{Counted}, schema.StatusError},
		{"a failure after the design counted is a duplicate", 1,
			[]*schema.Result{on(result(1, schema.StatusOK, 0.5), "good", "h2", 0), failed},
			[]Verdict{Counted, Duplicate}, schema.StatusOK},
		{"the original evaluated again after its retry was published counts as a failure", 1,
			[]*schema.Result{failed, again(failed, schema.StatusError, 0), retryOf(failed, 1, schema.StatusOK, 0.9)},
			[]Verdict{Retried, Counted, Duplicate}, schema.StatusError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := NewFold(NewTally("t", 5, Rules{ErrorRetries: tt.retries}), 1, 2, ReplaceWorst)
			for i, r := range tt.results {
				if got := f.Apply(r, nil); got != tt.want[i] {
					t.Errorf("result %d (%s on %s): %s, want %s", i+1, r.Status, r.Worker, got, tt.want[i])
				}
			}
			if f.Terminal() != 1 || f.Count(tt.status) != 1 {
				t.Errorf("%d terminal, %d %s; want design 1 counted once as %s", f.Terminal(), f.Count(tt.status), tt.status, tt.status)
			}
			if fl := f.Tally().Failing(1); fl != nil || len(f.Tally().Outstanding()) != 0 {
				t.Errorf("failures %+v kept after design 1 counted", fl)
			}
			retried := 0
			for _, v := range tt.want {
				if v == Retried {
					retried++
				}
			}
			if f.Tally().Retries() != retried {
				t.Errorf("Retries() = %d, want %d", f.Tally().Retries(), retried)
			}
		})
	}
}

// TestTallyFailures checks what the tally keeps of a design awaiting a
// retry: the number of failures and where they ran, each named once.
func TestTallyFailures(t *testing.T) {
	t.Parallel()
	tally := NewTally("t", 5, Rules{ErrorRetries: 3})
	first := on(result(2, schema.StatusError, 0), "w1", "h1", 0)
	second := on(retryOf(first, 1, schema.StatusTimeout, 0), "w2", "h1", 1)
	third := on(retryOf(first, 2, schema.StatusError, 0), "w1", "h1", 0)
	for _, r := range []*schema.Result{first, second, third} {
		if v := tally.Judge(r, nil); v != Retried {
			t.Fatalf("%s on %s: %s, want retried", r.Status, r.Worker, v)
		}
	}
	want := &Failures{N: 3, Workers: []string{"w1", "w2"}, Hosts: []string{"h1"}}
	if got := tally.Failing(2); !reflect.DeepEqual(got, want) {
		t.Errorf("Failing(2) = %+v, want %+v", got, want)
	}
	if got := tally.Outstanding(); !reflect.DeepEqual(got, []uint64{2}) {
		t.Errorf("Outstanding() = %v, want [2]", got)
	}
	if tally.Has(2) || tally.Counted() != 0 {
		t.Error("a retried failure counted")
	}
}

// slotResult is result seq as the result of worker's slot.
func slotResult(seq uint64, status schema.Status, worker string, slot int) *schema.Result {
	r := on(result(seq, status, 0.5), worker, "host-"+worker, slot)
	if status == schema.StatusError || status == schema.StatusTimeout {
		r.Error = fmt.Sprintf("RuntimeError: CUDA error on %s/%d", worker, slot)
	}
	return r
}

// TestQuarantine feeds each case's results to a tally (quarantine after 3,
// no retries) and checks the slot events and which slots end quarantined.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	const ok, bad, inf, tmo = schema.StatusOK, schema.StatusError, schema.StatusInfeasible, schema.StatusTimeout
	type step struct {
		status schema.Status
		worker string
		slot   int
	}
	tests := []struct {
		name   string
		after  int
		steps  []step
		events string // "kind:worker/slot" per event, in order
		want   []SlotKey
	}{
		{"after 3 failures with another slot ok", 3,
			[]step{{ok, "g", 0}, {bad, "b", 0}, {bad, "b", 0}, {bad, "b", 0}},
			"quarantined:b/0", []SlotKey{{"b", 0}}},
		{"not without another slot ok: suspect, then quarantined by the first ok elsewhere", 3,
			[]step{{bad, "b", 0}, {bad, "b", 0}, {bad, "b", 0}, {bad, "b", 0}, {ok, "g", 0}},
			"suspect:b/0 quarantined:b/0", []SlotKey{{"b", 0}}},
		{"every slot failing is the run's fault: nobody quarantined", 3,
			[]step{{bad, "a", 0}, {bad, "b", 0}, {bad, "a", 0}, {bad, "b", 0}, {bad, "a", 0}, {bad, "b", 0}},
			"suspect:a/0 suspect:b/0", nil},
		{"an ok of the slot itself is not elsewhere", 3,
			[]step{{ok, "b", 0}, {bad, "b", 0}, {bad, "b", 0}, {bad, "b", 0}},
			"suspect:b/0", nil},
		{"another slot of the same worker is elsewhere", 3,
			[]step{{ok, "w", 1}, {bad, "w", 0}, {tmo, "w", 0}, {bad, "w", 0}},
			"quarantined:w/0", []SlotKey{{"w", 0}}},
		{"an ok resets the count", 3,
			[]step{{ok, "g", 0}, {bad, "b", 0}, {bad, "b", 0}, {ok, "b", 0}, {bad, "b", 0}, {bad, "b", 0}},
			"", nil},
		{"an infeasible result resets the count", 3,
			[]step{{inf, "g", 0}, {bad, "b", 0}, {bad, "b", 0}, {inf, "b", 0}, {bad, "b", 0}, {tmo, "b", 0}},
			"", nil},
		{"off", 0,
			[]step{{ok, "g", 0}, {bad, "b", 0}, {bad, "b", 0}, {bad, "b", 0}, {bad, "b", 0}},
			"", nil},
		{"a quarantined slot that fails again, then succeeds", 2,
			[]step{{ok, "g", 0}, {bad, "b", 0}, {bad, "b", 0}, {bad, "b", 0}, {ok, "b", 0}},
			"quarantined:b/0 still-failing:b/0 recovered:b/0", nil},
		{"two suspects convicted in order by one ok", 2,
			[]step{{bad, "z", 1}, {bad, "a", 0}, {bad, "z", 1}, {bad, "a", 0}, {ok, "g", 0}},
			"suspect:z/1 suspect:a/0 quarantined:a/0 quarantined:z/1", []SlotKey{{"a", 0}, {"z", 1}}},
	}
	kinds := map[SlotEventKind]string{SlotSuspect: "suspect", SlotQuarantined: "quarantined",
		SlotStillFailing: "still-failing", SlotRecovered: "recovered"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tally := NewTally("t", 100, Rules{QuarantineAfter: tt.after})
			events := ""
			for i, s := range tt.steps {
				tally.Judge(slotResult(uint64(i+1), s.status, s.worker, s.slot), nil)
				for _, ev := range tally.SlotEvents() {
					if events != "" {
						events += " "
					}
					events += fmt.Sprintf("%s:%s/%d", kinds[ev.Kind], ev.Slot.Worker, ev.Slot.Slot)
				}
			}
			if events != tt.events {
				t.Errorf("events %q, want %q", events, tt.events)
			}
			var got []SlotKey
			for _, s := range tally.Quarantined() {
				got = append(got, s.SlotKey)
				if !s.Quarantined || s.Failures < tt.after || s.Host != "host-"+s.Worker || s.LastError == "" {
					t.Errorf("quarantined slot %+v: want its failures, host and last error", s)
				}
				if q := tally.QuarantinedSlots(s.Worker); len(q) == 0 {
					t.Errorf("QuarantinedSlots(%s) empty", s.Worker)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("quarantined %v, want %v", got, tt.want)
			}
		})
	}
}

// TestQuarantineIgnoresOthersResults checks that results which are not
// the run's own neither fail nor clear a slot.
func TestQuarantineIgnoresOthersResults(t *testing.T) {
	t.Parallel()
	tally := NewTally("t", 5, Rules{QuarantineAfter: 1})
	other := foreignRun("u", 1)
	other.Worker = "g"
	tally.Judge(other, nil)                                     // another run's ok: no evidence about this run
	tally.Judge(slotResult(9, schema.StatusOK, "g", 0), nil)    // beyond the budget
	tally.Judge(slotResult(1, schema.StatusError, "b", 0), nil) // the first failure
	if evs := tally.SlotEvents(); len(evs) != 1 || evs[0].Kind != SlotSuspect {
		t.Errorf("events %+v; want the slot suspect only, since no other slot of the run succeeded", evs)
	}
}

// TestTallyReplayReachesSameState folds one stream of results with
// retries, a broken slot and duplicates twice, the second time from
// scratch as a restarted controller and `evoq replay` do, and checks that
// both reach the same state: verdicts, counts, pool, outstanding retries,
// quarantined slots and slot events.
func TestTallyReplayReachesSameState(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	var stream []*schema.Result
	failures := map[uint64]int{}
	for i := range 400 {
		seq := uint64(rng.IntN(120) + 1)
		worker, slot := fmt.Sprintf("w%d", rng.IntN(4)), rng.IntN(2)
		status := []schema.Status{schema.StatusOK, schema.StatusOK, schema.StatusInfeasible, schema.StatusError, schema.StatusTimeout}[rng.IntN(5)]
		if worker == "w3" && slot == 1 {
			status = schema.StatusError // a broken slot
		}
		r := slotResult(seq, status, worker, slot)
		r.Fitness = float64(i) / 400
		if status != schema.StatusOK {
			r.Fitness = schema.InfeasibleFitness
		}
		r.Design.Retry = failures[seq]
		if status == schema.StatusError || status == schema.StatusTimeout {
			failures[seq]++
		}
		stream = append(stream, r)
	}
	type state struct {
		verdicts, events  []string
		terminal, retries int
		counts            map[schema.Status]int
		digest            string
		outstanding       []uint64
		quarantined       []SlotHealth
	}
	run := func(stop int) (*Fold, state) {
		f := NewFold(NewTally("t", 100, Rules{ErrorRetries: 1, QuarantineAfter: 3}), 10, 5, ReplaceWorst)
		s := state{counts: map[schema.Status]int{}}
		for _, r := range stream[:stop] {
			s.verdicts = append(s.verdicts, f.Apply(r, nil).String())
			for _, ev := range f.Tally().SlotEvents() {
				s.events = append(s.events, fmt.Sprintf("%d:%s/%d", ev.Kind, ev.Slot.Worker, ev.Slot.Slot))
			}
		}
		s.terminal, s.retries, s.digest = f.Terminal(), f.Tally().Retries(), f.Pool().Digest()
		for _, st := range schema.Statuses {
			s.counts[st] = f.Count(st)
		}
		s.outstanding, s.quarantined = f.Tally().Outstanding(), f.Tally().Quarantined()
		return f, s
	}
	for _, stop := range []int{150, 400} {
		_, live := run(stop)
		_, replayed := run(stop)
		if !reflect.DeepEqual(live, replayed) {
			t.Errorf("after %d results a replay differs:\nlive     %+v\nreplayed %+v", stop, live, replayed)
		}
		if live.retries == 0 || len(live.quarantined) == 0 {
			t.Errorf("after %d results: %d retries, quarantined %v; the stream should exercise both", stop, live.retries, live.quarantined)
		}
	}
}
