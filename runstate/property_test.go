package runstate

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// event is one message of a run's streams: a result (or a message that
// does not decode) or a report.
type event struct {
	res    *schema.Result
	err    error
	report *schema.Report
}

// randomStreams makes a run's two streams as faults leave them: designs
// evaluated twice, failures retried, results of another run, messages that
// do not decode, results beyond the budget, lost designs; and each
// design's reports, some stopped at a rung, some ending on their last.
func randomStreams(rng *rand.Rand, run string, budget int) (results, reports []event) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= uint64(budget+3); seq++ {
		d := schema.Design{V: schema.Version, Run: run, ID: schema.DesignID(run, seq), Seq: seq, Origin: schema.OriginRandom,
			Genome: map[string]any{"x": int64(rng.IntN(1000))}, Created: t0}
		if seq > 20 {
			d.Origin, d.Parents = schema.OriginMutant, []string{schema.DesignID(run, uint64(1+rng.IntN(int(seq-1))))}
		}
		steps := int64(1 + rng.IntN(9))
		for step := int64(1); step <= steps; step++ {
			reports = append(reports, event{report: &schema.Report{V: schema.Version, Run: run, DesignID: d.ID, Seq: seq,
				Attempt: 1, Step: step, Fitness: rng.Float64() * float64(step), Worker: "w", Time: t0, Last: step == steps}})
		}
		attempts := 1 + rng.IntN(3) // a design evaluated or retried more than once
		for a := 1; a <= attempts; a++ {
			status := []schema.Status{schema.StatusOK, schema.StatusOK, schema.StatusOK, schema.StatusInfeasible,
				schema.StatusError, schema.StatusTimeout, schema.StatusLost, schema.StatusStopped, schema.StatusStopped}[rng.IntN(9)]
			start := t0.Add(time.Duration(seq*1000+uint64(rng.IntN(900))) * time.Millisecond)
			r := &schema.Result{V: schema.Version, Run: run, DesignID: d.ID, Design: d, Status: status, Fitness: rng.Float64(),
				Worker: fmt.Sprint("w", rng.IntN(3)), Host: fmt.Sprint("h", rng.IntN(2)), Slot: rng.IntN(4), Attempt: a,
				Start: start, Stop: start.Add(time.Duration(1+rng.IntN(2000)) * time.Millisecond), Gap: -1}
			if status == schema.StatusLost {
				r.Worker, r.Host, r.Start, r.Stop = "", "", time.Time{}, time.Time{}
			}
			if status != schema.StatusOK && status != schema.StatusStopped {
				r.Fitness = schema.InfeasibleFitness
			}
			if status == schema.StatusStopped {
				r.Metrics = map[string]any{"stopped_at": int64(1 + rng.IntN(9))}
			}
			results = append(results, event{res: r})
		}
		switch rng.IntN(10) {
		case 0:
			f := &schema.Result{V: schema.Version, Run: "other", DesignID: schema.DesignID("other", seq), Status: schema.StatusOK}
			results = append(results, event{res: f})
		case 1:
			results = append(results, event{err: fmt.Errorf("%w: garbage", schema.ErrMalformed)})
		}
	}
	// Stored in an order of their own, as workers race: shuffle each
	// stream a little, keeping it a plausible stream.
	for i := range results {
		if j := i + rng.IntN(3); j < len(results) {
			results[i], results[j] = results[j], results[i]
		}
	}
	return results, reports
}

// propertyRecordFor is the record of the runs the property tests fold;
// streams i select parents three ways in turn: from designs that trained
// to their end, and from stopped designs too (schema.SelectReached,
// schema.SelectPromoted).
func propertyRecordFor(run string, budget, i int) *schema.Run {
	rec := propertyRecord(run, budget)
	rec.EarlyStop.Select = []string{schema.SelectOff, schema.SelectReached, schema.SelectPromoted}[i%3]
	return rec
}

// propertyRecord is the record of the runs the property tests fold.
func propertyRecord(run string, budget int) *schema.Run {
	return &schema.Run{V: schema.Version, Run: run, Phase: schema.PhaseRunning, Budget: budget, Init: 20, Pool: 8,
		Replace: string(ReplaceWorst), ErrorRetries: new(1), QuarantineAfter: new(3),
		EarlyStop: &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3}}
}

// fingerprint is what a state shows of itself: its digests, counts and
// figures.
type fingerprint struct {
	Digests
	Counts      map[schema.Status]int
	Terminal    int
	Best        string
	Util        float64
	Reports     int
	Stops       int
	Quarantined int
}

func fingerprintOf(s *State) fingerprint {
	f := fingerprint{Digests: s.Digests(), Counts: map[schema.Status]int{}, Terminal: s.Fold.Terminal(),
		Quarantined: len(s.Fold.Tally().Quarantined())}
	for _, st := range schema.Statuses {
		f.Counts[st] = s.Fold.Count(st)
	}
	if b := s.Fold.Best(); b != nil {
		f.Best = b.Design.ID
	}
	_, f.Util, _ = SteadyFigures(s.Fold.Stats())
	if s.Rungs != nil {
		f.Reports, f.Stops = s.Rungs.Reports(), s.Rungs.Stops()
	}
	return f
}

func newTestState(t *testing.T, rec *schema.Run) *State {
	t.Helper()
	s, err := NewState(rec, rec.Init, rec.Pool, Replace(rec.Replace))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Any interleaving of a run's two streams that keeps each stream's order
// gives the same state: the controller reads them beside each other, a
// restart and evoq replay one after the other.
func TestStateInterleavings(t *testing.T) {
	t.Parallel()
	for i := range 50 {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		rec := propertyRecordFor("p", 60, i)
		results, reports := randomStreams(rng, "p", 60)
		var want fingerprint
		for k := range 5 {
			s := newTestState(t, rec)
			ri, pi := 0, 0
			for ri < len(results) || pi < len(reports) {
				// k == 0: every result first; k == 1: every report first;
				// else at random.
				takeResult := pi == len(reports) || (ri < len(results) && (k == 0 || (k > 1 && rng.IntN(2) == 0)))
				if takeResult {
					s.ApplyResult(results[ri].res, results[ri].err)
					ri++
				} else {
					s.ApplyReport(reports[pi].report)
					pi++
				}
			}
			got := fingerprintOf(s)
			if k == 0 {
				want = got
				if want.Terminal < 30 || want.Reports == 0 || want.Counts[schema.StatusOK] == 0 {
					t.Fatalf("streams %d fold to %+v: the streams do not exercise the fold", i, want)
				}
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("streams %d, interleaving %d: %+v; the first gave %+v", i, k, got, want)
			}
		}
	}
}

// Folding a stream in two halves, with the state read between them as
// the controller reads it (its progress line, its summary), equals
// folding it at once: what a restart that replays the first half and
// goes on with the second rebuilds.
func TestStateInHalves(t *testing.T) {
	t.Parallel()
	for i := range 30 {
		rng := rand.New(rand.NewPCG(uint64(i), 11))
		rec := propertyRecordFor("h", 50, i)
		results, reports := randomStreams(rng, "h", 50)
		once := newTestState(t, rec)
		for _, e := range results {
			once.ApplyResult(e.res, e.err)
		}
		for _, e := range reports {
			once.ApplyReport(e.report)
		}
		want := fingerprintOf(once)
		for _, cut := range []int{0, 1, len(results) / 3, len(results) / 2, len(results) - 1, len(results)} {
			s := newTestState(t, rec)
			for j, e := range results {
				if j == cut {
					_ = fingerprintOf(s) // read between the halves: reading changes nothing
					_ = s.Fold.Figures().Snapshot(s.Fold.Tally(), time.Now())
				}
				s.ApplyResult(e.res, e.err)
			}
			for j, e := range reports {
				if j == cut%max(len(reports), 1) {
					_ = fingerprintOf(s)
				}
				s.ApplyReport(e.report)
			}
			if got := fingerprintOf(s); !reflect.DeepEqual(got, want) {
				t.Fatalf("streams %d, cut at %d: %+v; at once: %+v", i, cut, got, want)
			}
		}
	}
}

// The streams exercise the selection: with stopped designs selected the
// pool ends other than with the selection off, for most streams, since
// stopped designs join it.
func TestStateSelectChangesPool(t *testing.T) {
	t.Parallel()
	differ := map[int]int{}
	for i := range 20 {
		results, _ := randomStreams(rand.New(rand.NewPCG(uint64(i), 13)), "s", 60)
		digest := map[int]string{}
		for sel := range 3 {
			s := newTestState(t, propertyRecordFor("s", 60, sel))
			for _, e := range results {
				s.ApplyResult(e.res, e.err)
			}
			digest[sel] = s.Digests().Pool
			if digest[sel] != digest[0] {
				differ[sel]++
			}
		}
	}
	if differ[1] < 10 || differ[2] < 10 {
		t.Fatalf("of 20 streams, the pool differs from the selection off's in %d with reached, %d with promoted; want most", differ[1], differ[2])
	}
}
