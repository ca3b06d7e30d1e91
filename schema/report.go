package schema

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// Names of the early-stopping protocol's streams and subjects.
const (
	// ReportStream holds every intermediate report of every run (limits
	// retention): the learning curves, and what the early-stopping rules
	// decide from, in stream order.
	ReportStream = "EVOQ_REPORTS"
	ReportPrefix = "evoq.report." // + run ID
	// AskPrefix + run ID is where a worker asks the run's controller,
	// with a NATS request, whether a design that reached a rung goes on.
	AskPrefix = "evoq.ask."
)

// ReportSubject is the subject the reports of run are published on.
func ReportSubject(run string) string { return ReportPrefix + run }

// AskSubject is where the workers of run ask its controller for a stop
// decision (a request: Ask, answered by Decision).
func AskSubject(run string) string { return AskPrefix + run }

// ReportMsgID is the Nats-Msg-Id of a report: the attempt's result ID
// (AttemptMsgID) and the step, so that a report published twice is
// stored once, and each attempt's curve is kept apart.
func ReportMsgID(designID string, retry, attempt int, step int64) string {
	return AttemptMsgID(designID, retry, attempt) + "/s" + strconv.FormatInt(step, 10)
}

// Report is one intermediate report of an evaluation: its fitness after
// Step steps of training (epochs, say), published by the worker on
// ReportSubject(run) while the evaluation runs.
type Report struct {
	V        int    `msgpack:"v" json:"v"`
	Run      string `msgpack:"run" json:"run"`
	DesignID string `msgpack:"design_id" json:"design_id"`
	Seq      uint64 `msgpack:"seq" json:"seq"`
	// Retry and Attempt say which attempt of the design reports (see
	// Design.Retry and Result.Attempt).
	Retry   int `msgpack:"retry,omitempty" json:"retry,omitempty"`
	Attempt int `msgpack:"attempt" json:"attempt"`
	// Step is where the training is, as the evaluator counts it; it
	// increases from one report of an attempt to the next.
	Step    int64          `msgpack:"step" json:"step"`
	Fitness float64        `msgpack:"fitness" json:"fitness"`
	Metrics map[string]any `msgpack:"metrics,omitempty" json:"metrics,omitempty"`
	Worker  string         `msgpack:"worker" json:"worker"`
	Slot    int            `msgpack:"slot" json:"slot"`
	// Time is when the worker read the report from its evaluator.
	Time time.Time `msgpack:"time" json:"time"`
	// Last says that the attempt's training ended at Step: its evaluator
	// said so, or Step reached the design's own end (EarlyStop.End). A
	// last report is recorded at its rung but never judged there: a
	// design that trained to its end is not stopped. A last report may
	// repeat the step of the attempt's previous report: it then only says
	// that that report was the last (an evaluator that learns its
	// training ended only when it returns).
	Last bool `msgpack:"last,omitempty" json:"last,omitempty"`
	// ResumedFrom is the step of the saved progress the attempt resumed
	// from (Result.ResumedFrom): its reports begin after it, and the
	// early-stopping rule takes the rungs at or below it as decided by
	// the attempts before.
	ResumedFrom int64 `msgpack:"resumed_from,omitempty" json:"resumed_from,omitempty"`
}

// MsgID is the Nats-Msg-Id a worker stores r with. A last report has its
// own, so that one repeating the previous report's step is not taken for
// a duplicate of it.
func (r *Report) MsgID() string {
	id := ReportMsgID(r.DesignID, r.Retry, r.Attempt, r.Step)
	if r.Last {
		id += "/last"
	}
	return id
}

// Validate checks every field of r.
func (r *Report) Validate() error {
	if err := ValidToken(r.Run); err != nil {
		return invalid("report", "run", "%v", err)
	}
	if r.Seq == 0 {
		return invalid("report", "seq", "must be >= 1")
	}
	if want := DesignID(r.Run, r.Seq); r.DesignID != want {
		return invalid("report", "design_id", "%q, want %q for run %q seq %d", r.DesignID, want, r.Run, r.Seq)
	}
	if r.Retry < 0 {
		return invalid("report", "retry", "%d < 0", r.Retry)
	}
	if r.Attempt < 1 {
		return invalid("report", "attempt", "%d < 1", r.Attempt)
	}
	if r.Step < 0 {
		return invalid("report", "step", "%d < 0", r.Step)
	}
	if r.ResumedFrom < 0 {
		return invalid("report", "resumed_from", "%d < 0", r.ResumedFrom)
	}
	if math.IsNaN(r.Fitness) || math.IsInf(r.Fitness, 0) {
		return invalid("report", "fitness", "%v is not finite", r.Fitness)
	}
	if err := ValidToken(r.Worker); err != nil {
		return invalid("report", "worker", "%v", err)
	}
	if r.Slot < 0 {
		return invalid("report", "slot", "%d < 0", r.Slot)
	}
	if r.Time.IsZero() {
		return invalid("report", "time", "missing")
	}
	return nil
}

// EncodeReport stamps the schema version on r, validates and encodes it.
func EncodeReport(r *Report) ([]byte, error) {
	r.V = Version
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return Marshal(r)
}

// DecodeReport decodes and validates a report.
func DecodeReport(b []byte) (*Report, error) {
	r := new(Report)
	if err := unmarshal(b, r, "report"); err != nil {
		return nil, err
	}
	Normalize(r.Metrics)
	return r, r.Validate()
}

// Ask is a worker's question to the controller, sent as a NATS request
// on AskSubject(run) once the report at StreamSeq of the reports stream
// reached a rung: does the design go on?
type Ask struct {
	V        int    `msgpack:"v" json:"v"`
	Run      string `msgpack:"run" json:"run"`
	DesignID string `msgpack:"design_id" json:"design_id"`
	Step     int64  `msgpack:"step" json:"step"`
	// StreamSeq is the report's sequence in ReportStream, from its
	// PubAck: the controller answers once it has read the stream that
	// far, so that its answer is the one its rule gave the report in
	// stream order.
	StreamSeq uint64 `msgpack:"stream_seq" json:"stream_seq"`
}

// Validate checks every field of a.
func (a *Ask) Validate() error {
	if err := ValidToken(a.Run); err != nil {
		return invalid("ask", "run", "%v", err)
	}
	if a.DesignID == "" {
		return invalid("ask", "design_id", "empty")
	}
	if a.StreamSeq == 0 {
		return invalid("ask", "stream_seq", "must be >= 1")
	}
	return nil
}

// Decision is the controller's answer to an Ask.
type Decision struct {
	V        int    `msgpack:"v" json:"v"`
	Run      string `msgpack:"run" json:"run"`
	DesignID string `msgpack:"design_id" json:"design_id"`
	Step     int64  `msgpack:"step" json:"step"`
	// Rung is the rung the report decided at; 0 when it decided at none
	// (the report was not at a rung for the controller: see Reason).
	Rung int64 `msgpack:"rung,omitempty" json:"rung,omitempty"`
	// Stop: the design stops now, with the reported fitness.
	Stop   bool   `msgpack:"stop" json:"stop"`
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// Validate checks every field of d.
func (d *Decision) Validate() error {
	if err := ValidToken(d.Run); err != nil {
		return invalid("decision", "run", "%v", err)
	}
	if d.DesignID == "" {
		return invalid("decision", "design_id", "empty")
	}
	return nil
}

// EncodeAsk stamps the schema version on a, validates and encodes it.
func EncodeAsk(a *Ask) ([]byte, error) {
	a.V = Version
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return Marshal(a)
}

// DecodeAsk decodes and validates an Ask.
func DecodeAsk(b []byte) (*Ask, error) {
	a := new(Ask)
	if err := unmarshal(b, a, "ask"); err != nil {
		return nil, err
	}
	return a, a.Validate()
}

// EncodeDecision stamps the schema version on d, validates and encodes it.
func EncodeDecision(d *Decision) ([]byte, error) {
	d.V = Version
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return Marshal(d)
}

// DecodeDecision decodes and validates a Decision.
func DecodeDecision(b []byte) (*Decision, error) {
	d := new(Decision)
	if err := unmarshal(b, d, "decision"); err != nil {
		return nil, err
	}
	return d, d.Validate()
}

// Early-stopping rules (EarlyStop.Rule).
const (
	RuleMedian = "median" // stop below the median of the running means at a rung
	RuleASHA   = "asha"   // asynchronous successive halving: go on only in the top 1/eta at a rung
)

// EarlyStop is a run's early-stopping rule, recorded with the run so that
// its workers know where the rungs are and a restart or a replay decides
// as the run did.
type EarlyStop struct {
	Rule string `msgpack:"rule" json:"rule"`
	// MinStep is the first rung; the rungs are MinStep, MinStep*Eta,
	// MinStep*Eta^2, ... below MaxStep.
	MinStep int64 `msgpack:"min_step" json:"min_step"`
	// MaxStep is the step of full training, at and past which there is
	// no rung; 0: no bound.
	MaxStep int64 `msgpack:"max_step,omitempty" json:"max_step,omitempty"`
	Eta     int   `msgpack:"eta" json:"eta"`
	// MaxStepGene names the top-level gene that holds each design's own
	// training length in report steps (epochs, say): a design's report at
	// or past that step is its last (see End and Report.Last), so the
	// rung it falls on does not judge it. "": the designs' lengths are
	// not in their genomes.
	MaxStepGene string `msgpack:"max_step_gene,omitempty" json:"max_step_gene,omitempty"`
	// Select says whether a stopped design may be a parent: SelectReached
	// puts it in the pool with the fitness it reached when it stopped,
	// SelectPromoted does so only for a design stopped at or past the
	// second rung, and SelectOff (and "", in runs recorded before the
	// field was kept) keeps the pool to designs that trained to their end.
	Select string `msgpack:"select,omitempty" json:"select,omitempty"`
	// Brackets is asynchronous Hyperband's number of brackets, for asha:
	// a design is in bracket Bracket(seq), whose first rung is
	// MinStep*Eta^bracket, and is ranked among the designs of its own
	// bracket alone. A bracket whose first rung is at or past MaxStep
	// stops nothing: its designs train to their end. 0 (runs recorded
	// before the field, and runs of one bracket) and 1: every design in
	// bracket 0.
	Brackets int `msgpack:"brackets,omitempty" json:"brackets,omitempty"`
}

// MaxBrackets bounds EarlyStop.Brackets in a run whose training has no
// MaxStep (with one, the bound is its rungs plus one).
const MaxBrackets = 16

// Bracket is the bracket of the design of sequence number seq: seq modulo
// Brackets, so that every bracket gets every Brackets-th design.
func (e *EarlyStop) Bracket(seq uint64) int {
	if e == nil || e.Brackets <= 1 {
		return 0
	}
	return int(seq % uint64(e.Brackets))
}

// MaxBracketsFor is the most brackets e's rungs allow: with a MaxStep,
// one per rung of bracket 0 and one that stops nothing; without,
// MaxBrackets.
func (e *EarlyStop) MaxBracketsFor() int {
	if e.MaxStep == 0 {
		return MaxBrackets
	}
	return min(len(e.Rungs(e.MaxStep))+1, MaxBrackets)
}

// Parent selection of a run with an early-stopping rule (EarlyStop.Select).
const (
	SelectOff     = "off"     // only designs that trained to their end are parents
	SelectReached = "reached" // a stopped design competes with the fitness it reached
	// SelectPromoted: as SelectReached, for a design that went on at a
	// rung and was stopped at a later one.
	SelectPromoted = "promoted"
)

// SelectValid reports whether s is a Select value; "" is, as the value of
// runs recorded before the field was kept.
func SelectValid(s string) bool {
	return s == "" || s == SelectOff || s == SelectReached || s == SelectPromoted
}

// Validate checks every field of e.
func (e *EarlyStop) Validate() error {
	if e.Rule != RuleMedian && e.Rule != RuleASHA {
		return invalid("early_stop", "rule", "%q is not median or asha", e.Rule)
	}
	if e.MinStep < 1 {
		return invalid("early_stop", "min_step", "%d < 1", e.MinStep)
	}
	if e.Eta < 2 {
		return invalid("early_stop", "eta", "%d < 2", e.Eta)
	}
	if e.MaxStep != 0 && e.MaxStep <= e.MinStep {
		return invalid("early_stop", "max_step", "%d is not above min_step %d (0: no bound)", e.MaxStep, e.MinStep)
	}
	if g := e.MaxStepGene; g != "" && (strings.TrimSpace(g) != g || len(g) > 200) {
		return invalid("early_stop", "max_step_gene", "%q is not a gene's name", g)
	}
	if !SelectValid(e.Select) {
		return invalid("early_stop", "select", "%q is not off, reached or promoted", e.Select)
	}
	if e.Brackets < 0 || e.Brackets > 1 && e.Rule != RuleASHA {
		return invalid("early_stop", "brackets", "%d: want 0 or 1, or more with asha", e.Brackets)
	}
	if e.Brackets > e.MaxBracketsFor() {
		return invalid("early_stop", "brackets", "%d is above %d, the rungs' bound", e.Brackets, e.MaxBracketsFor())
	}
	return nil
}

// End is the step at which a design of genome ends its training, from its
// MaxStepGene: ok is false when e names no gene, or the genome holds no
// number there. A report at or past End is the design's last.
func (e *EarlyStop) End(genome map[string]any) (end float64, ok bool) {
	if e == nil || e.MaxStepGene == "" {
		return 0, false
	}
	switch v := genome[e.MaxStepGene].(type) {
	case int64:
		end = float64(v)
	case uint64:
		end = float64(v)
	case int:
		end = float64(v)
	case float64:
		end = v
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return 0, false
		}
		end = f
	default:
		return 0, false
	}
	return end, !math.IsNaN(end)
}

// Rungs lists bracket 0's rungs up to and including limit (MaxStep, when
// limit is larger and MaxStep bounds them).
func (e *EarlyStop) Rungs(limit int64) []int64 { return e.BracketRungs(0, limit) }

// BracketRungs lists the rungs of bracket b up to and including limit
// (MaxStep, when limit is larger and MaxStep bounds them): MinStep*Eta^b,
// then each Eta times the last.
func (e *EarlyStop) BracketRungs(b int, limit int64) []int64 {
	var out []int64
	first := e.MinStep
	for range b {
		if first > math.MaxInt64/int64(e.Eta) {
			return nil
		}
		first *= int64(e.Eta)
	}
	for r := first; r <= limit && (e.MaxStep == 0 || r < e.MaxStep); {
		out = append(out, r)
		if r > math.MaxInt64/int64(e.Eta) {
			break
		}
		r *= int64(e.Eta)
	}
	return out
}

// RungAt is the rung a report at step of the design of sequence number
// seq decides at, for an attempt whose last decision was at rung last (0:
// none yet): the highest rung of the design's bracket above last and at
// most step. Rungs a report skips over (steps 2 then 10 with rungs 3 and
// 9) are not decided at. ok is false when the report is at no new rung.
// A nil EarlyStop has no rungs.
func (e *EarlyStop) RungAt(seq uint64, step, last int64) (rung int64, ok bool) {
	if e == nil || step <= last {
		return 0, false
	}
	for _, r := range e.BracketRungs(e.Bracket(seq), step) {
		if r > last {
			rung, ok = r, true
		}
	}
	return rung, ok
}
