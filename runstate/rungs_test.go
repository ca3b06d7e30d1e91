package runstate

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// report is a valid report of design seq of run "r" at step, fitness f.
func report(seq uint64, attempt int, step int64, f float64) *schema.Report {
	return &schema.Report{V: 1, Run: "r", DesignID: schema.DesignID("r", seq), Seq: seq, Attempt: attempt,
		Step: step, Fitness: f, Worker: "w", Time: time.Unix(1, 0)}
}

func TestRungsASHA(t *testing.T) {
	t.Parallel()
	rule := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 9, Eta: 3}
	tests := []struct {
		name    string
		reports []*schema.Report
		want    []RungDecision // decisions at rungs, in order
	}{
		{"the first at a rung goes on", []*schema.Report{report(1, 1, 1, 0.1)}, []RungDecision{{Rung: 1}}},
		{"worse than one of two stops", []*schema.Report{report(1, 1, 1, 0.5), report(2, 1, 1, 0.4)},
			[]RungDecision{{Rung: 1}, {Rung: 1, Stop: true}}},
		{"better goes on", []*schema.Report{report(1, 1, 1, 0.5), report(2, 1, 1, 0.6)},
			[]RungDecision{{Rung: 1}, {Rung: 1}}},
		{"a tie goes on", []*schema.Report{report(1, 1, 1, 0.5), report(2, 1, 1, 0.5)},
			[]RungDecision{{Rung: 1}, {Rung: 1}}},
		// n=4, ceil(4/3)=2: the second best of four goes on.
		{"top 1/eta of four", []*schema.Report{report(1, 1, 1, 0.9), report(2, 1, 1, 0.1), report(3, 1, 1, 0.2), report(4, 1, 1, 0.5)},
			[]RungDecision{{Rung: 1}, {Rung: 1, Stop: true}, {Rung: 1, Stop: true}, {Rung: 1}}},
		{"steps between rungs decide nothing", []*schema.Report{report(1, 1, 1, 0.1), report(1, 1, 2, 0.2), report(1, 1, 3, 0.3), report(1, 1, 4, 0.3)},
			[]RungDecision{{Rung: 1}, {Rung: 3}}},
		{"a skipped rung is not decided at", []*schema.Report{report(1, 1, 2, 0.1), report(1, 1, 8, 0.2)},
			[]RungDecision{{Rung: 1}, {Rung: 3}}},
		{"no rung at or past max step", []*schema.Report{report(1, 1, 9, 0.1), report(1, 1, 27, 0.2)},
			[]RungDecision{{Rung: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewRungs("r", rule)
			var got []RungDecision
			for _, r := range tt.reports {
				d, ok := g.Apply(r)
				if !ok {
					t.Fatalf("report %+v ignored", r)
				}
				if d.Rung > 0 {
					d.Reason = ""
					got = append(got, d)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("decisions %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRungsMedian(t *testing.T) {
	t.Parallel()
	rule := &schema.EarlyStop{Rule: schema.RuleMedian, MinStep: 2, Eta: 2}
	g := NewRungs("r", rule)
	// Three designs record running means 0.2, 0.4, 0.6 at rung 2.
	for i, f := range []float64{0.2, 0.4, 0.6} {
		seq := uint64(i + 1)
		g.Apply(report(seq, 1, 1, f))
		if d, _ := g.Apply(report(seq, 1, 2, f)); d.Rung != 2 || d.Stop {
			t.Fatalf("design %d with fewer than %d others: %+v, want a decision to go on", seq, MedianMinSamples, d)
		}
	}
	// The median of the running means is 0.4: a best of 0.39 stops, even
	// though its running mean is lower still; a best of 0.41 goes on
	// although its running mean (0.2) is below the median.
	g.Apply(report(4, 1, 1, 0.1))
	if d, _ := g.Apply(report(4, 1, 2, 0.39)); !d.Stop {
		t.Errorf("best 0.39 against median 0.4: %+v, want stop", d)
	}
	g.Apply(report(5, 1, 1, 0.0))
	if d, _ := g.Apply(report(5, 1, 2, 0.41)); d.Stop {
		t.Errorf("best 0.41 against the median 0.3225 of 0.2 0.245 0.4 0.6: %+v, want go on", d)
	}
	if st := g.Stats(); len(st) != 1 || st[0].Reports != 5 || st[0].Stopped != 1 {
		t.Errorf("stats %+v, want rung 2 with 5 designs, 1 stopped", st)
	}
}

// A redelivered or retried design reports its steps again: it decides at
// each rung again from the value recorded the first time, and nothing is
// recorded twice.
func TestRungsAnotherAttempt(t *testing.T) {
	t.Parallel()
	g := NewRungs("r", &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 2})
	g.Apply(report(1, 1, 1, 0.9))
	g.Apply(report(2, 1, 1, 0.1)) // stops: below the top half of two
	d, _ := g.Apply(report(2, 2, 1, 0.95))
	if !d.Stop {
		t.Errorf("second attempt with a better value: %+v, want the first value's stop again", d)
	}
	if st := g.Stats(); st[0].Reports != 2 || st[0].Stopped != 1 {
		t.Errorf("stats %+v, want 2 designs and 1 stop recorded at rung 1", st)
	}
	if _, ok := g.Apply(report(2, 2, 1, 0.95)); ok {
		t.Error("a step that does not increase on its attempt's last was folded")
	}
}

func TestRungsIgnore(t *testing.T) {
	t.Parallel()
	g := NewRungs("r", &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3})
	other := report(1, 1, 1, 0.5)
	other.Run, other.DesignID = "x", "x-1"
	bad := report(1, 1, 1, math.NaN())
	for name, r := range map[string]*schema.Report{"another run": other, "invalid": bad, "nil": nil} {
		if _, ok := g.Apply(r); ok {
			t.Errorf("%s: folded", name)
		}
	}
	if g.Reports() != 0 || len(g.Stats()) != 0 {
		t.Errorf("ignored reports changed the state: %d reports, %+v", g.Reports(), g.Stats())
	}
	if _, ok := NewRungs("r", nil).Apply(report(1, 1, 1, 0.5)); ok {
		t.Error("no rule: folded")
	}
}

// The same reports in the same order give the same digest; another order
// another one.
func TestRungsDigest(t *testing.T) {
	t.Parallel()
	rule := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 27, Eta: 3}
	r := rand.New(rand.NewPCG(1, 2))
	var reports []*schema.Report
	for seq := uint64(1); seq <= 200; seq++ {
		for step := int64(1); step <= 10; step++ {
			reports = append(reports, report(seq, 1, step, r.Float64()))
		}
	}
	fold := func(rs []*schema.Report) *Rungs {
		g := NewRungs("r", rule)
		for _, x := range rs {
			g.Apply(x)
		}
		return g
	}
	a, b := fold(reports), fold(reports)
	if a.Digest() != b.Digest() || a.Stops() != b.Stops() {
		t.Fatalf("same reports: digests %s %s, stops %d %d", a.Digest(), b.Digest(), a.Stops(), b.Stops())
	}
	if a.Stops() == 0 {
		t.Fatal("no design stopped: the test checks nothing")
	}
	swapped := slices.Clone(reports)
	swapped[0], swapped[10] = swapped[10], swapped[0] // designs 1 and 2 reach rung 1 the other way round
	if fold(swapped).Digest() == a.Digest() {
		t.Error("another order of decisions gave the same digest")
	}
}

func TestBag(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	var b bag
	var all []float64
	for i := range 5000 {
		v := math.Round(r.Float64()*1000) / 1000 // ties
		b.insert(v)
		all = append(all, v)
		if i%97 != 0 {
			continue
		}
		sorted := slices.Clone(all)
		slices.Sort(sorted)
		q := sorted[r.IntN(len(sorted))]
		want := len(sorted) - sortSearchAbove(sorted, q)
		if got := b.greater(q); got != want {
			t.Fatalf("after %d values: greater(%v) = %d, want %d", len(all), q, got, want)
		}
		n := len(sorted)
		med := sorted[n/2]
		if n%2 == 0 {
			med = (sorted[n/2-1] + sorted[n/2]) / 2
		}
		if got := b.median(); got != med {
			t.Fatalf("after %d values: median %v, want %v", n, got, med)
		}
		if b.max() != sorted[n-1] {
			t.Fatalf("max %v, want %v", b.max(), sorted[n-1])
		}
	}
	if len(b.chunks) < 2 {
		t.Errorf("%d chunks for 5000 values: splitting is not tested", len(b.chunks))
	}
}

func sortSearchAbove(sorted []float64, v float64) int {
	i := 0
	for i < len(sorted) && sorted[i] <= v {
		i++
	}
	return i
}

func BenchmarkRungsApply(b *testing.B) {
	rule := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 27, Eta: 3}
	g := NewRungs("r", rule)
	r := rand.New(rand.NewPCG(5, 6))
	b.ReportAllocs()
	for i := range b.N {
		g.Apply(report(uint64(i+1), 1, 1, r.Float64()))
	}
}

// An attempt that resumed from saved progress at step 3 (its reports carry
// resumed_from) takes the rungs up to 3 as decided: its first report, at
// step 4, decides nothing, the next rung is judged as usual, and a report
// at or before the resume point is not folded.
func TestRungsResumedAttempt(t *testing.T) {
	t.Parallel()
	g := NewRungs("r", &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 27, Eta: 3})
	for _, step := range []int64{1, 2, 3} {
		g.Apply(report(1, 1, step, 0.1*float64(step)))
	}
	resumed := func(step int64) *schema.Report {
		r := report(1, 2, step, 0.1*float64(step))
		r.ResumedFrom = 3
		return r
	}
	if _, ok := g.Apply(resumed(3)); ok {
		t.Error("a report at the resume point was folded")
	}
	d, ok := g.Apply(resumed(4))
	if !ok || d.Rung != 0 {
		t.Errorf("the first report after the resume point: %+v (folded %v), want no rung decided again", d, ok)
	}
	if d, _ := g.Apply(resumed(9)); d.Rung != 9 {
		t.Errorf("the resumed attempt at step 9: %+v, want rung 9 decided", d)
	}
	for _, st := range g.Stats() {
		if st.Reports != 1 {
			t.Errorf("rung %d holds %d values, want the design's one", st.Step, st.Reports)
		}
	}
	// Without resumed_from another attempt decides its rungs afresh.
	if d, _ := g.Apply(report(1, 3, 2, 0.2)); d.Rung != 1 {
		t.Errorf("a third attempt from scratch at step 2: %+v, want rung 1 decided again", d)
	}
}

// TestRungsBrackets: with several brackets a design is judged at its own
// bracket's rungs, against the designs of its bracket alone, and a bracket
// whose first rung is at or past MaxStep stops nothing.
func TestRungsBrackets(t *testing.T) {
	t.Parallel()
	// Rungs 3 and 9 below 27: bracket 0 decides at 3 and 9, bracket 1 at
	// 9, bracket 2 nowhere.
	rule := &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 3, MaxStep: 27, Eta: 3, Brackets: 3}
	if err := rule.Validate(); err != nil {
		t.Fatal(err)
	}
	g := NewRungs("r", rule)
	decided := map[uint64][]RungDecision{}
	apply := func(seq uint64, step int64, f float64) {
		t.Helper()
		d, ok := g.Apply(report(seq, 1, step, f))
		if !ok {
			t.Fatalf("design %d step %d ignored", seq, step)
		}
		if d.Rung > 0 {
			decided[seq] = append(decided[seq], d)
		}
	}
	// Seqs 3 and 6 are bracket 0, 1 and 4 bracket 1, 2 and 5 bracket 2.
	// Design 1 (0.6) would rank below design 3 (0.9) at rung 9 if the
	// brackets shared their statistics, and stop.
	fitness := map[uint64]float64{3: 0.9, 6: 0.5, 1: 0.6, 4: 0.4, 2: 0.3, 5: 0.2}
	for _, seq := range []uint64{3, 6, 1, 4, 2, 5} {
		for step := int64(1); step <= 27; step++ {
			apply(seq, step, fitness[seq])
			if ds := decided[seq]; len(ds) > 0 && ds[len(ds)-1].Stop {
				break // its worker ends it
			}
		}
	}
	rungsOf := func(seq uint64) []int64 {
		var out []int64
		for _, d := range decided[seq] {
			out = append(out, d.Rung)
		}
		return out
	}
	for seq, want := range map[uint64][]int64{3: {3, 9}, 6: {3}, 1: {9}, 4: {9}, 2: nil, 5: nil} {
		if got := rungsOf(seq); !slices.Equal(got, want) {
			t.Errorf("design %d (bracket %d) decided at %v, want %v", seq, rule.Bracket(seq), got, want)
		}
	}
	for seq, stop := range map[uint64]bool{3: false, 6: true, 1: false, 4: true} {
		if d := decided[seq][0]; d.Stop != stop {
			t.Errorf("design %d at rung %d: stop %v, want %v (%s)", seq, d.Rung, d.Stop, stop, d.Reason)
		}
	}
	if d := decided[1][0]; !strings.Contains(d.Reason, "bracket 1") {
		t.Errorf("reason %q does not name the bracket", d.Reason)
	}
	var stats []RungStats
	for _, s := range g.Stats() {
		s.Median, s.Best = 0, 0
		stats = append(stats, s)
	}
	want := []RungStats{{Bracket: 0, Step: 3, Reports: 2, Stopped: 1}, {Bracket: 0, Step: 9, Reports: 1}, {Bracket: 1, Step: 9, Reports: 2, Stopped: 1}}
	if !slices.Equal(stats, want) {
		t.Errorf("stats %+v, want %+v", stats, want)
	}
	if g.Stops() != 2 {
		t.Errorf("%d stops, want 2", g.Stops())
	}
}

// TestRungsOneBracketIsTheOld: Brackets 0 and 1 decide and digest as a
// rule recorded before the field, for every design.
func TestRungsOneBracketIsTheOld(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 9))
	var reports []*schema.Report
	for seq := uint64(1); seq <= 60; seq++ {
		for step := int64(1); step <= 20; step++ {
			reports = append(reports, report(seq, 1, step, rng.Float64()))
		}
	}
	digest := func(brackets int) string {
		g := NewRungs("r", &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 20, Eta: 3, Brackets: brackets})
		for _, r := range reports {
			g.Apply(r)
		}
		if g.Stops() == 0 {
			t.Fatal("nothing stopped: the comparison says nothing")
		}
		return g.Digest()
	}
	if d0, d1, d3 := digest(0), digest(1), digest(3); d0 != d1 || d0 == d3 {
		t.Errorf("digests %s (0 brackets), %s (1), %s (3): want 0 and 1 equal, 3 apart", d0, d1, d3)
	}
}
