package runstate

import (
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"sort"

	"github.com/evoq/evoq/schema"
)

// MedianMinSamples is how many other designs the median rule needs at a
// rung before it stops one there: below it, the median of a handful is
// noise, and the first designs of a run would be judged by each other
// alone.
const MedianMinSamples = 3

// Rungs is the early-stopping rule's state, a pure fold over the run's
// reports stream in stream order, as Fold is over its results: a restart
// and `evoq replay` read the same reports and reach the same statistics
// and the same decisions. Nothing in it depends on when a report arrived,
// on the results stream, or on what a worker did with a decision (a
// worker that got no answer goes on; its later reports say so).
//
// A design decides at a rung once: at its first report at or past the
// rung (schema.EarlyStop.RungAt), whichever attempt made it. Its value
// there is recorded in the rung's statistics, and the decision is taken
// against the values recorded at that rung before it:
//
//   - asha: the design goes on when its value is in the top 1/eta of the
//     rung's values, its own included (rank <= ceil(n/eta), ties in its
//     favour), so the first design at a rung always goes on.
//     With several brackets (schema.EarlyStop.Brackets: asynchronous
//     Hyperband), a rung's values are those of the design's bracket.
//   - median: the value recorded is the design's running mean (the mean
//     of its reports so far); it stops when its best report so far is
//     below the median of the running means the other designs recorded
//     there, once there are at least MedianMinSamples of them.
//
// A later attempt of the design (a redelivery, a retry) that reaches a
// rung the design decided at gets the decision again, taken against the
// statistics as they are then, from the value recorded the first time;
// nothing is recorded twice.
//
// A design that reached its own end is never judged: a report marked
// last (schema.Report.Last: the evaluator said so, or the step reached
// the design's EarlyStop.MaxStepGene) records its value at the rung it
// falls on, for the designs that come after, and decides nothing; the
// attempt's later reports are ignored. A last report that repeats the
// step of the attempt's previous report says that report was the last
// (the evaluator learnt it only when its training returned): a stop taken
// at that report is withdrawn, since the design had finished when the
// stop reached it, and its worker records the result it finished with.
type Rungs struct {
	rule    *schema.EarlyStop
	run     string
	stats   map[rungKey]*rungStat
	designs map[uint64]*curve
	digest  hash.Hash64
	n       int // reports folded
	stopped int // decisions to stop, less those withdrawn
}

// rungKey is a rung of a bracket (schema.EarlyStop.Bracket): each
// bracket ranks its designs among its own.
type rungKey struct {
	bracket int
	step    int64
}

// rungStat is what one rung has seen.
type rungStat struct {
	values  bag
	stopped int
}

// curve is what the rule keeps of one design's reports: a few words per
// design, since a long run keeps one per design of its budget.
type curve struct {
	retry, attempt int // which attempt is reporting
	lastStep       int64
	sum            float64
	n              int
	best           float64
	decided        []rungValue // the rungs decided at, each with the value recorded there
	lastRung       int64       // the attempt's last rung decided at
	stopStep       int64       // the step of the attempt's report the rule stopped; -1: none
	ended          bool        // the attempt made its last report
}

// rungValue is a design's value recorded at a rung.
type rungValue struct {
	rung  int64
	value float64
}

// recorded is the value c recorded at rung, if any.
func (c *curve) recorded(rung int64) (float64, bool) {
	for _, rv := range c.decided {
		if rv.rung == rung {
			return rv.value, true
		}
	}
	return 0, false
}

// RungDecision is the rule's verdict on one report.
type RungDecision struct {
	// Rung is the rung the report decided at; 0 when at none.
	Rung int64
	Stop bool
	// End: the report was the design's last, so its value was recorded
	// at Rung and nothing was decided (Stop is false); or, with Rung 0,
	// it marked the previous report as the last.
	End bool
	// Reason says why, for logs and the stopped result.
	Reason string
}

// NewRungs returns the empty state of rule for run; a nil rule decides
// nothing.
func NewRungs(run string, rule *schema.EarlyStop) *Rungs {
	return &Rungs{rule: rule, run: run, stats: map[rungKey]*rungStat{}, designs: map[uint64]*curve{}, digest: fnv.New64a()}
}

// Apply folds in the next report in stream order and returns its
// decision. A report of another run, or one that does not validate, is
// ignored (ok false), as is one whose step does not increase on its
// attempt's last.
func (g *Rungs) Apply(r *schema.Report) (d RungDecision, ok bool) {
	if g.rule == nil || r == nil || r.Run != g.run || r.Validate() != nil {
		return d, false
	}
	c := g.curveOf(r)
	if c.ended {
		return d, false
	}
	if r.Step <= c.lastStep {
		if r.Last && r.Step == c.lastStep {
			return g.endAt(c, r), true
		}
		return d, false
	}
	g.n++
	c.lastStep = r.Step
	c.sum += r.Fitness
	c.n++
	c.best = max(c.best, r.Fitness)
	c.ended = r.Last
	rung, at := g.rule.RungAt(r.Seq, r.Step, c.lastRung)
	if !at {
		return RungDecision{End: r.Last}, true
	}
	c.lastRung = rung
	d = g.decide(c, rungKey{g.rule.Bracket(r.Seq), rung}, r.Fitness, r.Last)
	if d.Stop {
		c.stopStep = r.Step
	}
	g.note(r, d)
	return d, true
}

// endAt marks the attempt's previous report, at r's step, as its last,
// withdrawing a stop the rule took there.
func (g *Rungs) endAt(c *curve, r *schema.Report) RungDecision {
	g.n++
	c.ended = true
	if c.stopStep != r.Step {
		return RungDecision{End: true}
	}
	c.stopStep = -1
	if st := g.stats[rungKey{g.rule.Bracket(r.Seq), c.lastRung}]; st != nil {
		st.stopped--
	}
	g.stopped--
	g.noteFlag(r.Seq, c.lastRung, r.Fitness, flagWithdrawn)
	return RungDecision{End: true, Reason: fmt.Sprintf("the report at rung %d was the design's last: its stop is withdrawn", c.lastRung)}
}

// curveOf is the design's curve, started afresh (but for the rungs it
// decided at) when another attempt reports.
func (g *Rungs) curveOf(r *schema.Report) *curve {
	c := g.designs[r.Seq]
	if c == nil {
		c = &curve{attempt: -1, stopStep: -1}
		g.designs[r.Seq] = c
	}
	if c.retry != r.Retry || c.attempt != r.Attempt {
		c.retry, c.attempt, c.lastStep, c.sum, c.n, c.best, c.lastRung = r.Retry, r.Attempt, -1, 0, 0, math.Inf(-1), 0
		c.stopStep, c.ended = -1, false
		if r.ResumedFrom > 0 {
			// It resumed from an earlier attempt's saved progress: its
			// reports begin after that step, and the rungs up to it were
			// decided by the attempts that reached them.
			c.lastStep = r.ResumedFrom
			if rung, at := g.rule.RungAt(r.Seq, r.ResumedFrom, 0); at {
				c.lastRung = rung
			}
		}
	}
	return c
}

// decide takes the decision at rung k for a design whose report there
// has fitness value; for the design's last report (end) it only records
// the value.
func (g *Rungs) decide(c *curve, k rungKey, value float64, end bool) RungDecision {
	st := g.stats[k]
	if st == nil {
		st = &rungStat{}
		g.stats[k] = st
	}
	rung := k.step
	recorded, again := c.recorded(rung)
	if end {
		if !again {
			if g.rule.Rule == schema.RuleMedian {
				value = c.sum / float64(c.n)
			}
			c.decided = append(c.decided, rungValue{rung, value})
			st.values.insert(value)
		}
		return RungDecision{Rung: rung, End: true, Reason: fmt.Sprintf("%s at rung %d: the design's last report, recorded and not judged", g.rule.Rule, rung)}
	}
	if g.rule.Rule == schema.RuleMedian {
		return g.median(st, c, rung, again)
	}
	if !again {
		recorded = value
		c.decided = append(c.decided, rungValue{rung, value})
		st.values.insert(value)
	}
	n := st.values.len()
	rank := st.values.greater(recorded) + 1
	keep := (n + g.rule.Eta - 1) / g.rule.Eta
	d := RungDecision{Rung: rung, Stop: rank > keep}
	d.Reason = fmt.Sprintf("asha at rung %d%s: %.6g ranks %d of %d, the top 1/%d go on (%d)", rung, g.bracketText(k), recorded, rank, n, g.rule.Eta, keep)
	if d.Stop && !again {
		st.stopped++
	}
	return d
}

// bracketText names k's bracket in a reason, in a run of several.
func (g *Rungs) bracketText(k rungKey) string {
	if g.rule.Brackets <= 1 {
		return ""
	}
	return fmt.Sprintf(" of bracket %d", k.bracket)
}

// median is the median stopping rule's decision at rung.
func (g *Rungs) median(st *rungStat, c *curve, rung int64, again bool) RungDecision {
	mean := c.sum / float64(c.n)
	others := st.values.len()
	if again {
		others-- // its own mean is among the values
	}
	d := RungDecision{Rung: rung}
	if others >= MedianMinSamples {
		med := st.values.median()
		d.Stop = c.best < med
		d.Reason = fmt.Sprintf("median at rung %d: best %.6g against the median %.6g of %d running means", rung, c.best, med, st.values.len())
	} else {
		d.Reason = fmt.Sprintf("median at rung %d: %d other designs there, %d needed to judge", rung, others, MedianMinSamples)
	}
	if !again {
		c.decided = append(c.decided, rungValue{rung, mean})
		st.values.insert(mean)
		if d.Stop {
			st.stopped++
		}
	}
	return d
}

// What a digest entry says besides the design, rung and value: the flag
// byte. Runs without last reports digest as they did before there were.
const (
	flagGoOn      = 0
	flagStop      = 1
	flagEnd       = 2 // a last report's value recorded, nothing judged
	flagWithdrawn = 3 // a stop withdrawn: the report stopped was the last
)

// note adds a decision to the digest.
func (g *Rungs) note(r *schema.Report, d RungDecision) {
	flag := byte(flagGoOn)
	switch {
	case d.Stop:
		flag = flagStop
		g.stopped++
	case d.End:
		flag = flagEnd
	}
	g.noteFlag(r.Seq, d.Rung, r.Fitness, flag)
}

func (g *Rungs) noteFlag(seq uint64, rung int64, value float64, flag byte) {
	var b [8 * 4]byte
	binary.LittleEndian.PutUint64(b[0:], seq)
	binary.LittleEndian.PutUint64(b[8:], uint64(rung))
	binary.LittleEndian.PutUint64(b[16:], math.Float64bits(value))
	b[24] = flag
	g.digest.Write(b[:])
}

// Digest identifies the decisions taken so far and the values they were
// taken on, in order: a restart or a replay that folds the same reports
// reaches the same digest.
func (g *Rungs) Digest() string { return fmt.Sprintf("%016x", g.digest.Sum64()) }

// Reports is the number of reports folded.
func (g *Rungs) Reports() int { return g.n }

// Stops is the number of decisions to stop, less those withdrawn because
// the report stopped was the design's last.
func (g *Rungs) Stops() int { return g.stopped }

// RungStats are the figures of one rung.
type RungStats struct {
	// Bracket is the rung's bracket (schema.EarlyStop.Brackets); 0 in a
	// run of one.
	Bracket int   `json:"bracket,omitempty"`
	Step    int64 `json:"step"`
	// Reports is the number of designs that recorded a value there (those
	// whose last report fell there included), and Stopped how many of
	// them the rule stopped.
	Reports int `json:"reports"`
	Stopped int `json:"stopped"`
	// Median and Best are of the values recorded there (the reported
	// fitness for asha, running means for median).
	Median float64 `json:"median"`
	Best   float64 `json:"best"`
}

// Stats lists every rung that has seen a design, by bracket, lowest
// first.
func (g *Rungs) Stats() []RungStats {
	out := make([]RungStats, 0, len(g.stats))
	for k, st := range g.stats {
		rs := RungStats{Bracket: k.bracket, Step: k.step, Reports: st.values.len(), Stopped: st.stopped}
		if rs.Reports > 0 {
			rs.Median, rs.Best = st.values.median(), st.values.max()
		}
		out = append(out, rs)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bracket != out[j].Bracket {
			return out[i].Bracket < out[j].Bracket
		}
		return out[i].Step < out[j].Step
	})
	return out
}

// Rule is the rule the state decides by; nil for none.
func (g *Rungs) Rule() *schema.EarlyStop { return g.rule }

// bag is a multiset of values kept sorted in chunks, so that inserting,
// ranking and the median take time in proportion to the number of chunks
// and a chunk's length, not to the values: a rung of a long run sees a
// value per design.
type bag struct {
	chunks [][]float64
	n      int
}

const bagChunk = 512

func (b *bag) len() int { return b.n }

// insert adds v.
func (b *bag) insert(v float64) {
	b.n++
	if len(b.chunks) == 0 {
		b.chunks = [][]float64{{v}}
		return
	}
	i := sort.Search(len(b.chunks), func(i int) bool { c := b.chunks[i]; return c[len(c)-1] >= v })
	if i == len(b.chunks) {
		i--
	}
	c := b.chunks[i]
	j := sort.SearchFloat64s(c, v)
	c = append(c, 0)
	copy(c[j+1:], c[j:])
	c[j] = v
	if len(c) <= 2*bagChunk {
		b.chunks[i] = c
		return
	}
	lo, hi := append([]float64(nil), c[:bagChunk]...), append([]float64(nil), c[bagChunk:]...)
	b.chunks = append(b.chunks[:i+1], b.chunks[i:]...)
	b.chunks[i], b.chunks[i+1] = lo, hi
}

// greater is the number of values above v.
func (b *bag) greater(v float64) int {
	n := 0
	for i := len(b.chunks) - 1; i >= 0; i-- {
		c := b.chunks[i]
		if c[0] > v {
			n += len(c)
			continue
		}
		return n + len(c) - sort.Search(len(c), func(k int) bool { return c[k] > v })
	}
	return n
}

// kth is the k-th smallest value, from 0.
func (b *bag) kth(k int) float64 {
	for _, c := range b.chunks {
		if k < len(c) {
			return c[k]
		}
		k -= len(c)
	}
	return math.NaN()
}

// median is the median of the values (the mean of the middle two for an
// even count); NaN for none.
func (b *bag) median() float64 {
	if b.n == 0 {
		return math.NaN()
	}
	if b.n%2 == 1 {
		return b.kth(b.n / 2)
	}
	return (b.kth(b.n/2-1) + b.kth(b.n/2)) / 2
}

func (b *bag) max() float64 {
	c := b.chunks[len(b.chunks)-1]
	return c[len(c)-1]
}
