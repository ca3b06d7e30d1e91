package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// AskWait bounds the wait for the controller's answer at a rung. Past it,
// or at once when no controller listens (a restart), the design goes on:
// an evaluation is never held for a decision, and its later reports tell
// the rule, when it is back, that it went on.
const AskWait = 5 * time.Second

// ReportStoreWait bounds the retries of storing one report: a report that
// cannot be stored (the broker is away) is given up, with a warning, and
// the evaluation goes on; its result is what must not be lost.
const ReportStoreWait = 10 * time.Second

// StopGraceDefault is how long a stopped evaluator has to end its design
// by itself (one-shot: after SIGTERM; persistent: after the stop answer)
// before its process group is killed.
const StopGraceDefault = 10 * time.Second

// reporter takes one evaluation's reports for its slot: it stores each on
// the reports stream, renews the design's ack deadline, and at a rung of
// the run's rule asks the controller whether the design goes on.
type reporter struct {
	w       *Worker
	log     logrus.FieldLogger
	d       *schema.Design
	attempt int
	slot    int
	msg     design

	// end is the design's own end, from the run's MaxStepGene (hasEnd
	// false when there is none): a report at or past it is the last.
	end    float64
	hasEnd bool

	// prog is the attempt's saved progress: an attempt that resumed
	// reports from after its step, and its rungs up to it are decided.
	prog    *attemptProgress
	resumed int64
	first   bool // a report came

	mu       sync.Mutex
	lastStep int64
	lastRung int64
	ended    bool // the attempt made its last report
	warned   bool
	renewed  time.Time
}

func (w *Worker) newReporter(s *slotState, msg design, d *schema.Design, attempt int) *reporter {
	r := &reporter{w: w, log: s.log.WithFields(logrus.Fields{"design": d.ID, "attempt": attempt}),
		d: d, attempt: attempt, slot: s.index, msg: msg, lastStep: -1}
	r.end, r.hasEnd = w.rule.End(d.Genome)
	return r
}

// Report implements Reporter. A last report (the evaluator's, or one at
// or past the design's own end) is stored and never asked about: the
// rule does not judge a design that trained to its end.
func (r *reporter) Report(ctx context.Context, p Progress) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resume(p.Step)
	marks := p.Last && r.lastStep >= 0 && p.Step == r.lastStep // says the previous report was the last
	switch {
	case r.ended:
		if !marks {
			r.warnOnce(fmt.Errorf("report at step %d after the last one, at step %d", p.Step, r.lastStep))
		}
		return false, ""
	case !marks:
		if err := r.check(p); err != nil {
			r.warnOnce(err)
			return false, ""
		}
	}
	if r.hasEnd && float64(p.Step) >= r.end {
		p.Last = true
	}
	r.lastStep, r.ended = p.Step, p.Last
	rep := &schema.Report{Run: r.d.Run, DesignID: r.d.ID, Seq: r.d.Seq, Retry: r.d.Retry, Attempt: r.attempt,
		Step: p.Step, Fitness: p.Fitness, Metrics: p.Metrics, Worker: r.w.cfg.ID, Slot: r.slot, Time: time.Now(), Last: p.Last,
		ResumedFrom: r.resumed}
	data, err := schema.EncodeReport(rep)
	if err != nil {
		r.warnOnce(fmt.Errorf("report at step %d cannot be encoded: %w", p.Step, err))
		return false, ""
	}
	seq, err := r.store(ctx, rep, data)
	if err != nil {
		r.log.WithError(err).WithField("step", p.Step).Warn("storing a report failed; the evaluation goes on without it")
		return false, ""
	}
	r.renew()
	if p.Last {
		return false, ""
	}
	rung, at := r.w.rule.RungAt(r.d.Seq, p.Step, r.lastRung)
	if !at {
		return false, ""
	}
	r.lastRung = rung
	return r.ask(ctx, rep, seq)
}

// resume, at the attempt's first report (at step), takes the resume point
// when the evaluator did resume: the rungs at or below it were decided by
// the attempts before, as the rule's fold takes them (runstate.Rungs).
func (r *reporter) resume(step int64) {
	if r.first {
		return
	}
	r.first = true
	r.prog.firstReport(step)
	if r.resumed = r.prog.resumedFrom(); r.resumed > 0 {
		r.lastStep = r.resumed
		if rung, at := r.w.rule.RungAt(r.d.Seq, r.resumed, 0); at {
			r.lastRung = rung
		}
	}
}

// check refuses a report whose step does not increase or whose fitness
// is not a number the rules can rank.
func (r *reporter) check(p Progress) error {
	switch {
	case p.Step < 0:
		return fmt.Errorf("report step %d is negative", p.Step)
	case p.Step <= r.lastStep:
		return fmt.Errorf("report step %d does not increase on the last one, %d", p.Step, r.lastStep)
	case math.IsNaN(p.Fitness) || math.IsInf(p.Fitness, 0):
		return fmt.Errorf("report at step %d has fitness %v, not a finite number", p.Step, p.Fitness)
	}
	return nil
}

// warnOnce logs the first bad report of an evaluation: the evaluation goes
// on, its bad reports are left out, and one line says why.
func (r *reporter) warnOnce(err error) {
	if r.warned {
		return
	}
	r.warned = true
	r.log.WithError(err).Warn("ignoring a bad report from the evaluator (further ones of this evaluation are ignored silently)")
}

// store publishes the report and waits for the broker's confirmation; its
// stream sequence is what the controller's answer is keyed to.
func (r *reporter) store(ctx context.Context, rep *schema.Report, data []byte) (uint64, error) {
	var seq uint64
	b := broker.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Limit: ReportStoreWait}
	err := broker.Retry(ctx, b, func() error {
		ack, err := r.w.js.Publish(ctx, schema.ReportSubject(rep.Run), data, jetstream.WithMsgID(rep.MsgID()))
		if err == nil {
			seq = ack.Sequence
		}
		return err
	})
	return seq, err
}

// renew resets the design's ack deadline, at most every quarter second:
// a report says the evaluation lives as well as a heartbeat does.
func (r *reporter) renew() {
	if time.Since(r.renewed) < 250*time.Millisecond {
		return
	}
	r.renewed = time.Now()
	_ = r.msg.InProgress()
}

// ask asks the controller whether the design goes on past its report at
// stream sequence seq.
func (r *reporter) ask(ctx context.Context, rep *schema.Report, seq uint64) (bool, string) {
	body, err := schema.EncodeAsk(&schema.Ask{Run: rep.Run, DesignID: rep.DesignID, Step: rep.Step, StreamSeq: seq})
	if err != nil {
		return false, ""
	}
	actx, cancel := context.WithTimeout(ctx, AskWait)
	defer cancel()
	began := time.Now()
	reply, err := r.w.js.Conn().RequestWithContext(actx, schema.AskSubject(rep.Run), body)
	if err != nil {
		if ctx.Err() == nil {
			r.w.noteAskFailed(r.log, err)
		}
		return false, ""
	}
	d, err := schema.DecodeDecision(reply.Data)
	if err != nil || d.DesignID != rep.DesignID {
		r.log.WithError(err).Warn("the controller's answer does not decode or names another design; the design goes on")
		return false, ""
	}
	r.log.WithFields(logrus.Fields{"step": rep.Step, "rung": d.Rung, "stop": d.Stop,
		"answer_ms": float64(time.Since(began).Microseconds()) / 1000}).Debug("rung decision")
	return d.Stop, d.Reason
}

// noteAskFailed says, at most once a minute, that stop questions go
// unanswered: the controller is away or restarting, and designs at rungs
// go on meanwhile.
func (w *Worker) noteAskFailed(log logrus.FieldLogger, err error) {
	w.askMu.Lock()
	defer w.askMu.Unlock()
	if time.Since(w.askWarned) < time.Minute {
		return
	}
	w.askWarned = time.Now()
	why := "no answer within " + AskWait.String()
	if errors.Is(err, nats.ErrNoResponders) {
		why = "no controller is listening"
	}
	log.WithError(err).Warn("asking the controller whether a design at a rung goes on failed (" + why + "); designs at rungs go on until it answers")
}

// reportLead is how a report line begins, for a line that is not valid
// JSON: it means to be a report, and is not taken for a result or output.
var reportLead = regexp.MustCompile(`^\{\s*"report"\s*:`)

// reportLine parses an evaluator's report line,
// {"report": {"step": 3, "fitness": 0.71, "metrics": {...}}}, with
// "last": true in the report for the last one. isReport is false for any
// other line; err says what is wrong with a line that means to be a
// report.
func reportLine(line string) (p Progress, isReport bool, err error) {
	t := strings.TrimSpace(line)
	if !strings.HasPrefix(t, "{") || !strings.Contains(t, `"report"`) {
		return p, false, nil
	}
	var e struct {
		Report *struct {
			Step    json.Number    `json:"step"`
			Fitness *float64       `json:"fitness"`
			Metrics map[string]any `json:"metrics"`
			Last    bool           `json:"last"`
		} `json:"report"`
		Fitness, Infeasible, Error json.RawMessage
	}
	if jerr := json.Unmarshal([]byte(t), &e); jerr != nil {
		if reportLead.MatchString(t) {
			return p, true, fmt.Errorf("report line is not valid JSON (%v): %q", jerr, clip(t, 200))
		}
		return p, false, nil
	}
	if e.Report == nil || e.Fitness != nil || e.Infeasible != nil || e.Error != nil {
		return p, false, nil
	}
	step, serr := e.Report.Step.Int64()
	switch {
	case serr != nil:
		return p, true, fmt.Errorf(`report "step" %q is not an integer: %q`, e.Report.Step, clip(t, 200))
	case e.Report.Fitness == nil:
		return p, true, fmt.Errorf(`report has no "fitness": %q`, clip(t, 200))
	}
	return Progress{Step: step, Fitness: *e.Report.Fitness, Metrics: e.Report.Metrics, Last: e.Report.Last}, true, nil
}

// stopAnswer is the line a persistent evaluator reads on its stdin after
// each report line.
func stopAnswer(stop bool, reason string) []byte {
	b, _ := json.Marshal(struct {
		Continue bool   `json:"continue"`
		Reason   string `json:"reason,omitempty"`
	}{!stop, reason})
	return append(b, '\n')
}

// errStopped is the cause of an evaluation's end when the run's
// early-stopping rule stopped it.
var errStopped = errors.New("stopped by the run's early-stopping rule")

// reportPump hands a one-shot evaluator's report lines, in the order it
// printed them, to its task's Reporter, off the goroutine that copies its
// stdout, and ends the evaluation (stop) at the first stop decision.
type reportPump struct {
	ctx   context.Context
	t     Task
	stop  func()
	lines chan string
	done  chan struct{}
	once  sync.Once

	// Written by the pump's goroutine, read after done.
	end pumpEnd
}

// pumpEnd is what an evaluation's reports said of its end.
type pumpEnd struct {
	// stopped: a report's answer was stop, at report last, for reason.
	stopped bool
	last    Progress
	reason  string
	// finished: the evaluator made its last report, end (Progress.Last):
	// its training ended, whatever a stop that reached it meanwhile.
	finished bool
	end      Progress
}

func newReportPump(ctx context.Context, t Task, stop func()) *reportPump {
	p := &reportPump{ctx: ctx, t: t, stop: stop, lines: make(chan string, 64), done: make(chan struct{})}
	go p.run()
	return p
}

// line queues a report line. It blocks while 64 wait: an evaluator that
// reports faster than its reports are stored waits for them.
func (p *reportPump) line(l string) { p.lines <- l }

func (p *reportPump) run() {
	defer close(p.done)
	var warned bool
	for l := range p.lines {
		if step, ok := progressLine(l); ok {
			p.t.saved(step)
			continue
		}
		prog, _, err := reportLine(l)
		if err == nil && p.atEnd(prog.Step) {
			// The run names the gene that holds the design's end: a report
			// there is the last, as if the evaluator had said so, even
			// when it comes after a stop that reached the evaluator too
			// late.
			prog.Last = true
		}
		if p.end.stopped {
			// It is being stopped: what it reports now is not asked
			// about, but a last report says it trained to its end
			// before the stop reached it.
			if err == nil && prog.Last && !p.end.finished {
				p.t.Report(p.ctx, prog)
				p.end.finished, p.end.end = true, prog
			}
			continue
		}
		if err != nil {
			if !warned && p.t.Reports != nil {
				warned = true
				if r, ok := p.t.Reports.(*reporter); ok {
					r.warnOnce(err)
				}
			}
			continue
		}
		if prog.Last {
			p.end.finished, p.end.end = true, prog
		}
		if stop, reason := p.t.Report(p.ctx, prog); stop {
			p.end.stopped, p.end.last, p.end.reason = true, prog, reason
			p.stop()
		}
	}
}

// atEnd reports whether step is at or past the design's own end, when
// the run declares one (--max-step-gene).
func (p *reportPump) atEnd(step int64) bool {
	e, ok := p.t.Reports.(endKnower)
	return ok && e.AtEnd(step)
}

// endKnower is a Reporter that knows where the design's training ends.
type endKnower interface {
	AtEnd(step int64) bool
}

// AtEnd reports whether step is at or past the design's own end, when the
// run names the gene that holds it.
func (r *reporter) AtEnd(step int64) bool { return r.hasEnd && float64(step) >= r.end }

// close waits for the reports queued to be handled and says what they
// said of the evaluation's end.
func (p *reportPump) close() pumpEnd {
	p.once.Do(func() { close(p.lines) })
	<-p.done
	return p.end
}
