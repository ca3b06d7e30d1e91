package runstate

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/evoq/evoq/schema"
)

// last is report marked as its attempt's last.
func last(seq uint64, attempt int, step int64, f float64) *schema.Report {
	r := report(seq, attempt, step, f)
	r.Last = true
	return r
}

// A design's last report is recorded at the rung it falls on and never
// judged there, whatever its rank; its value counts for the designs that
// come after; nothing of its attempt is folded after it.
func TestRungsLastReport(t *testing.T) {
	t.Parallel()
	asha := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3}
	median := &schema.EarlyStop{Rule: schema.RuleMedian, MinStep: 1, Eta: 3}
	tests := []struct {
		name    string
		rule    *schema.EarlyStop
		reports []*schema.Report
		want    []RungDecision // decisions at rungs, in order
		ignored int            // reports not folded
		stats   RungStats      // rung 1's
	}{
		{"a last report that would lose is not judged", asha,
			[]*schema.Report{report(1, 1, 1, 0.9), last(2, 1, 1, 0.1)},
			[]RungDecision{{Rung: 1}, {Rung: 1, End: true}}, 0, RungStats{Step: 1, Reports: 2, Median: 0.5, Best: 0.9}},
		// 0.95 recorded: 0.92 ranks 2 of 3, past the top 1/3; without it
		// 0.92 would rank 1 of 2 and go on.
		{"its value counts for later designs", asha,
			[]*schema.Report{report(1, 1, 1, 0.9), last(2, 1, 1, 0.95), report(3, 1, 1, 0.92)},
			[]RungDecision{{Rung: 1}, {Rung: 1, End: true}, {Rung: 1, Stop: true}}, 0, RungStats{Step: 1, Reports: 3, Stopped: 1, Median: 0.92, Best: 0.95}},
		{"at its end past the rungs", asha,
			[]*schema.Report{report(1, 1, 1, 0.9), report(2, 1, 1, 0.95), report(2, 1, 2, 0.96), last(2, 1, 3, 0.1)},
			[]RungDecision{{Rung: 1}, {Rung: 1}, {Rung: 3, End: true}}, 0, RungStats{Step: 1, Reports: 2, Median: 0.925, Best: 0.95}},
		{"nothing after the last report", asha,
			[]*schema.Report{last(1, 1, 1, 0.5), report(1, 1, 3, 0.1), last(1, 1, 1, 0.5)},
			[]RungDecision{{Rung: 1, End: true}}, 2, RungStats{Step: 1, Reports: 1, Median: 0.5, Best: 0.5}},
		{"another attempt reports afresh", asha,
			[]*schema.Report{report(1, 1, 1, 0.9), last(2, 1, 1, 0.1), report(2, 2, 1, 0.1)},
			[]RungDecision{{Rung: 1}, {Rung: 1, End: true}, {Rung: 1, Stop: true}}, 0, RungStats{Step: 1, Reports: 2, Stopped: 0, Median: 0.5, Best: 0.9}},
		// Three others recorded means 0.25, 0.5, 0.75: a best of 0.125
		// would stop; at its end it records its mean and goes on.
		{"median records the running mean", median,
			[]*schema.Report{report(1, 1, 1, 0.25), report(2, 1, 1, 0.5), report(3, 1, 1, 0.75), last(4, 1, 1, 0.125)},
			[]RungDecision{{Rung: 1}, {Rung: 1}, {Rung: 1}, {Rung: 1, End: true}}, 0, RungStats{Step: 1, Reports: 4, Median: 0.375, Best: 0.75}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewRungs("r", tt.rule)
			var got []RungDecision
			ignored := 0
			for _, r := range tt.reports {
				d, ok := g.Apply(r)
				if !ok {
					ignored++
				}
				if d.Rung > 0 {
					d.Reason = ""
					got = append(got, d)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("decisions %+v, want %+v", got, tt.want)
			}
			if ignored != tt.ignored {
				t.Errorf("%d reports ignored, want %d", ignored, tt.ignored)
			}
			if st := g.Stats(); len(st) == 0 || st[0] != tt.stats {
				t.Errorf("stats %+v, want rung 1 %+v", st, tt.stats)
			}
		})
	}
}

// A last report that repeats the step of its attempt's previous report
// says that report was the last: a stop taken there is withdrawn (the
// design had finished when the stop reached it), and a decision to go on
// stays as it was.
func TestRungsEndMarker(t *testing.T) {
	t.Parallel()
	rule := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3}
	g := NewRungs("r", rule)
	g.Apply(report(1, 1, 1, 0.9))
	if d, _ := g.Apply(report(2, 1, 1, 0.1)); !d.Stop {
		t.Fatalf("0.1 against 0.9: %+v, want stop", d)
	}
	d, ok := g.Apply(last(2, 1, 1, 0.1))
	if !ok || !d.End || d.Stop || d.Rung != 0 {
		t.Fatalf("the end marker: %+v (folded %v), want an end that decides nothing", d, ok)
	}
	if g.Stops() != 0 || g.Stats()[0].Stopped != 0 || g.Stats()[0].Reports != 2 {
		t.Errorf("stops %d, stats %+v; want the stop withdrawn and both values kept", g.Stops(), g.Stats())
	}
	if _, ok := g.Apply(last(2, 1, 1, 0.1)); ok {
		t.Error("a second end marker was folded")
	}
	// Design 1 went on at rung 1 and stops later at step 2: its marker
	// there withdraws nothing.
	g.Apply(report(1, 1, 2, 0.9))
	before := g.Digest()
	if d, ok := g.Apply(last(1, 1, 2, 0.9)); !ok || !d.End || g.Stops() != 0 || g.Digest() != before {
		t.Errorf("a marker after a report at no rung: %+v, %d stops, digest %s (was %s); want nothing changed", d, g.Stops(), g.Digest(), before)
	}
	if g.Reports() != 5 {
		t.Errorf("%d reports folded, want 5", g.Reports())
	}
}

// The rule decides from the streams alone: the same reports, last ones and
// markers included, fold to the same digest, stops and statistics (a
// restart, evoq replay); marking a report last changes the digest; a run
// without last reports digests as it did before there were any.
func TestRungsLastReplay(t *testing.T) {
	t.Parallel()
	rule := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3}
	r := rand.New(rand.NewPCG(7, 8))
	var plain, marked []*schema.Report
	ends := 0
	for seq := uint64(1); seq <= 300; seq++ {
		end := int64(1 + r.IntN(9)) // the design's own length, as an epochs gene
		f := r.Float64()
		for step := int64(1); step <= end; step++ {
			v := f * (1 - math.Exp(-float64(step)/3))
			plain = append(plain, report(seq, 1, step, v))
			m := report(seq, 1, step, v)
			m.Last = step == end
			marked = append(marked, m)
			if step == end && (end == 1 || end == 3 || end == 9) {
				ends++
			}
		}
	}
	fold := func(rs []*schema.Report) (*Rungs, int) {
		g := NewRungs("r", rule)
		endStops := 0
		for _, x := range rs {
			if d, _ := g.Apply(x); d.Stop && x.Last {
				endStops++
			}
		}
		return g, endStops
	}
	a, endStops := fold(marked)
	b, _ := fold(marked)
	if a.Digest() != b.Digest() || a.Stops() != b.Stops() || fmt.Sprint(a.Stats()) != fmt.Sprint(b.Stats()) {
		t.Fatalf("the same reports folded twice: digests %s %s, stops %d %d", a.Digest(), b.Digest(), a.Stops(), b.Stops())
	}
	if endStops != 0 {
		t.Errorf("%d designs stopped at their last report", endStops)
	}
	p, _ := fold(plain)
	wouldStop := 0
	{
		g := NewRungs("r", rule)
		for i, x := range plain {
			if d, _ := g.Apply(x); d.Stop && marked[i].Last {
				wouldStop++
			}
		}
	}
	if wouldStop == 0 || ends == 0 {
		t.Fatalf("unmarked, %d of the %d designs ending on a rung are stopped there: the test checks nothing", wouldStop, ends)
	}
	if p.Digest() == a.Digest() {
		t.Error("marking the last reports left the digest as it was")
	}
	if p.Digest() != oldDigest(plain, rule) {
		t.Errorf("a run without last reports digests to %s, before them to %s", p.Digest(), oldDigest(plain, rule))
	}
}

// oldDigest is the digest as Rungs computed it before last reports: per
// decision the design, the rung, the value and a stop byte.
func oldDigest(rs []*schema.Report, rule *schema.EarlyStop) string {
	g := NewRungs("r", rule)
	h := fnv.New64a()
	for _, r := range rs {
		d, _ := g.Apply(r)
		if d.Rung == 0 {
			continue
		}
		var b [32]byte
		binary.LittleEndian.PutUint64(b[0:], r.Seq)
		binary.LittleEndian.PutUint64(b[8:], uint64(d.Rung))
		binary.LittleEndian.PutUint64(b[16:], math.Float64bits(r.Fitness))
		if d.Stop {
			b[24] = 1
		}
		h.Write(b[:])
	}
	return fmt.Sprintf("%016x", h.Sum64())
}
