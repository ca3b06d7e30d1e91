package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// The kinds of protocol error a persistent evaluator's line can be, as
// the error result's metrics.protocol_error names them.
const (
	// ProtocolLateLine: a result or report line that arrived with no
	// design outstanding (after the last design's result, before the
	// next design line).
	ProtocolLateLine = "late_line"
	// ProtocolOtherDesign: a result line whose "id" names another design
	// than the one the evaluator is serving.
	ProtocolOtherDesign = "other_design"
	// ProtocolMissingID: a result line without an "id" from a process
	// whose result lines carried it before.
	ProtocolMissingID = "missing_id"
)

// protocolErr is a line of a persistent evaluator that belongs to no
// design it is serving.
type protocolErr struct {
	kind string
	why  string // what is wrong, in words
	line string
}

// tie checks that a result line belongs to t's design: it carries the
// design line's "id". The line of another design is a protocol error. A
// line without an id is taken while the process never echoed one, so
// that evaluators written before the id was echoed keep working, with a
// warning once per worker: for them a late line cannot be told from the
// next design's result. Once a process has echoed the id, a line without
// it is a protocol error: most likely a late line of the design before.
func (p *Persistent) tie(t Task, proc *evalProc, line string) *protocolErr {
	id, has := lineID(line)
	switch {
	case has && id == t.Design.ID:
		proc.ties = true
		return nil
	case has:
		return &protocolErr{kind: ProtocolOtherDesign, line: line,
			why: fmt.Sprintf("a result line for design %q arrived while the evaluator served %s", id, t.Design.ID)}
	case proc.ties:
		return &protocolErr{kind: ProtocolMissingID, line: line,
			why: fmt.Sprintf("a result line without the design's id arrived while the evaluator served %s, "+
				"though its result lines carry the id (a late line of %s?)", t.Design.ID, orNone(proc.last))}
	}
	p.noTies.Do(func() {
		msg := `the persistent evaluator's result lines do not echo their design's "id": a line printed late ` +
			`cannot be told from the next design's result; print the design line's "id" in each result line ` +
			`(evoq_eval does)`
		t.Log.Warn(msg)
		t.warn(msg)
	})
	return nil
}

// idField finds a result line's "id" where the line is not valid JSON (a
// NaN in it, or cut at MaxResultLine).
var idField = regexp.MustCompile(`"id"\s*:\s*"((?:[^"\\]|\\.)*)"`)

// lineID is the design ID a result line names, and whether it names one.
// An "id" that is not a string names no design of this run: it is
// returned as its JSON text.
func lineID(line string) (string, bool) {
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(line)), &probe) != nil {
		if m := idField.FindStringSubmatch(line); m != nil {
			var id string
			if json.Unmarshal([]byte(`"`+m[1]+`"`), &id) == nil {
				return id, true
			}
			return m[1], true
		}
		return "", false
	}
	if len(probe.ID) == 0 || string(probe.ID) == "null" {
		return "", false
	}
	var id string
	if json.Unmarshal(probe.ID, &id) != nil {
		return string(probe.ID), true
	}
	return id, true
}

// between looks at what the slot's process printed since its last design,
// before the next is sent. A result or report line there had no design
// outstanding: a protocol error, which ends t's design (see
// protocolError). A process that exited meanwhile, saying nothing wrong,
// is replaced by a fresh one for t without ado beyond a warning: t's
// design never reached it.
func (p *Persistent) between(t Task) (Outcome, bool) {
	p.mu.Lock()
	proc := p.procs[t.Slot]
	p.mu.Unlock()
	if proc == nil {
		return Outcome{}, false
	}
	exited := closed(proc.waited)
	if line, found := strayLine(proc, exited); found {
		return p.protocolError(t, proc, &protocolErr{kind: ProtocolLateLine, line: line,
			why: fmt.Sprintf("a line arrived after design %s's result, with no design outstanding", orNone(proc.last))}), true
	}
	if exited {
		p.drop(t.Slot, proc)
		exit, sig := proc.end()
		t.Log.WithFields(exitFields(exit, sig)).WithField("stderr_tail", clip(strings.TrimSpace(proc.stderr.String()), 500)).
			Warn("the persistent evaluator exited between designs; starting a new one (each design in its own process loses what --persistent saves)")
	}
	return Outcome{}, false
}

// strayLine reads what a process printed between designs up to its first
// protocol line (a result or a report), and returns that line: the lines
// there already or, from a process that has exited, every one.
func strayLine(proc *evalProc, exited bool) (string, bool) {
	var limit <-chan time.Time
	if exited {
		limit = time.After(KillGrace + OutputGrace)
	}
	for {
		l, ok := nextLeft(proc.lines, limit)
		if !ok {
			return "", false
		}
		_, isReport, _ := reportLine(l.text)
		if _, isResult := resultLine(l); isResult || isReport {
			return l.text, true
		}
	}
}

// nextLeft is the next line of lines: one there already with no limit,
// else one that comes before limit.
func nextLeft(lines chan outLine, limit <-chan time.Time) (outLine, bool) {
	if limit == nil {
		select {
		case l, ok := <-lines:
			return l, ok
		default:
			return outLine{}, false
		}
	}
	select {
	case l, ok := <-lines:
		return l, ok
	case <-limit:
		return outLine{}, false
	}
}

// protocolError ends t's design with an error result that names the line
// that belongs to no design it serves, and kills the process, whose idea
// of which design it serves is no longer evoq's: the slot's next design
// starts a fresh one. The line's fitness is never taken, for t's design
// or any other; the design it came after keeps the result it had.
func (p *Persistent) protocolError(t Task, proc *evalProc, e *protocolErr) Outcome {
	p.drop(t.Slot, proc)
	exit, sig := proc.end()
	t.Log.WithFields(logrus.Fields{"protocol_error": e.kind, "after": proc.last, "line": clip(e.line, 300)}).
		Warn("evaluator protocol error: " + e.why + "; the design ends error and the evaluator is restarted")
	return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Exit: exit, Signal: sig,
		Metrics: map[string]any{"protocol_error": e.kind},
		Error: fmt.Sprintf("evaluator protocol error: %s: %q; the evaluator process was restarted (every result line "+
			"must echo its design line's \"id\", and come once, while its design is outstanding)", e.why, clip(e.line, 200))}
}

// oneShotHint names the likely cause of a first design that goes
// unanswered, and the fix.
const oneShotHint = "an evaluator written for one-shot mode (json.load(sys.stdin), sys.stdin.read()) waits for the " +
	"end of stdin, which never comes with --persistent: drop --persistent, or read one line per design " +
	"(evoq_eval.main or serve does)"

// firstAnswerTimer fires when a process that has not answered a design
// yet has taken FirstAnswerWarn over its first (half ctx's time left, if
// sooner); never for a process that answered before.
func (p *Persistent) firstAnswerTimer(ctx context.Context, proc *evalProc) (<-chan time.Time, func()) {
	if proc.answered > 0 || proc.heard {
		return nil, func() {}
	}
	d := p.FirstAnswerWarn
	if d <= 0 {
		d = FirstAnswerWarnDefault
	}
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)/2)
	}
	tm := time.NewTimer(max(d, 0))
	return tm.C, func() { tm.Stop() }
}

// warnFirstAnswer warns about a process slow over its first design, unless
// it has sent a report meanwhile (it read its design and trains).
func (p *Persistent) warnFirstAnswer(t Task, proc *evalProc, waited time.Duration) {
	if proc.heard {
		return
	}
	msg := "the persistent evaluator has not answered its first design: " + oneShotHint +
		"; if its first design just takes this long, ignore this"
	t.Log.WithField("waited", waited.Round(100*time.Millisecond).String()).Warn(msg)
	t.warn(fmt.Sprintf("after %s, %s", waited.Round(time.Second), msg))
}

// taskLog is t's logger, with its slot, design and attempt.
func taskLog(t Task) logrus.FieldLogger {
	if t.Log != nil {
		return t.Log
	}
	return logrus.StandardLogger().WithFields(logrus.Fields{"slot": t.Slot, "design": t.Design.ID, "attempt": t.Attempt})
}

func exitFields(exit *int, sig string) logrus.Fields {
	f := logrus.Fields{}
	if exit != nil {
		f["exit"] = *exit
	}
	if sig != "" {
		f["signal"] = sig
	}
	return f
}

func orNone(id string) string {
	if id == "" {
		return "(none)"
	}
	return id
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// resultLine parses a result object; any other line is output. A line
// that means to be a result (an object naming fitness, infeasible or
// error) but is not valid JSON — NaN from Python's json.dumps, say — is
// an error result quoting it, not output to wait past. So is an object
// longer than schema.MaxResultLine: only its beginning is kept, which
// cannot tell, and an object that long is a result with large metrics far
// more often than a log line; waiting past it would hold the slot until
// the timeout.
func resultLine(ol outLine) (Outcome, bool) {
	l := ol.text
	t := strings.TrimSpace(l)
	if !strings.HasPrefix(t, "{") {
		return Outcome{}, false
	}
	if ol.n > schema.MaxResultLine {
		return lineTooLong(t, ol.n), true
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal([]byte(t), &probe) != nil {
		if looksLikeResult(t) {
			return ParseOutput(t), true
		}
		return Outcome{}, false
	}
	if e, ok := probe["error"]; ok {
		var msg string
		if json.Unmarshal(e, &msg) != nil {
			msg = string(e)
		}
		return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Error: msg}, true
	}
	_, fit := probe["fitness"]
	_, inf := probe["infeasible"]
	if !fit && !inf {
		return Outcome{}, false
	}
	return ParseOutput(l), true
}

func looksLikeResult(l string) bool {
	for _, k := range []string{`"fitness"`, `"infeasible"`, `"error"`} {
		if strings.Contains(l, k) {
			return true
		}
	}
	return false
}
