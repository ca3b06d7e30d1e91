package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

// Persistent runs one long-lived evaluator process per slot (`sh -c Cmd`),
// so that heavy imports such as PyTorch happen once, not per design. For
// each design it writes one JSON line to the process's stdin — the design
// as the one-shot evaluator gets it, plus "attempt" and, when there are,
// "checkpoint_out" and "parent_checkpoint" (the one-shot evaluator's
// EVOQ_CHECKPOINT_OUT and EVOQ_PARENT_CHECKPOINT) — and reads stdout
// until a line that is a result object: {"fitness": x, "metrics": {...}},
// {"infeasible": "reason"} or {"error": "reason"}, which echoes the design
// line's "id" (see tie for the rule, and for lines that name another
// design or come with none outstanding: protocol errors). Other lines are
// the evaluator's own output. A process that dies before its design's
// result ends the design error with its stderr tail, as a one-shot
// evaluator's non-zero exit does, except on a design's first delivery to
// a process that had answered designs before, which is handed back (see
// died); either way the next design starts a fresh process. A timeout
// kills the process group and records a timeout.
type Persistent struct {
	Cmd string
	// Env is added to the evaluator's environment (KEY=VALUE).
	Env []string
	// LogDir, when set, keeps each slot process's whole stdout and stderr
	// in LogDir/<run>/<worker>-slot<i>.out and .err (appended across
	// restarts).
	LogDir string
	// StopGrace is how long an evaluator told to stop a design has to
	// print that design's result line before its process is killed (and
	// a fresh one started for the next design). Defaults to
	// StopGraceDefault.
	StopGrace time.Duration
	// FirstAnswerWarn is how long a process may take over its first
	// design before the worker warns that it may be an evaluator written
	// for one-shot mode, waiting for an end of stdin that never comes.
	// An evaluation with a deadline (an eval timeout) warns at half the
	// time it has, if that is sooner. Defaults to FirstAnswerWarnDefault.
	FirstAnswerWarn time.Duration

	mu     sync.Mutex
	procs  map[int]*evalProc
	noTies sync.Once // the warning that result lines do not echo the id
}

// FirstAnswerWarnDefault is Persistent.FirstAnswerWarn's default: long
// enough for an interpreter to start and import its libraries, short
// enough that a hung run is explained within the first minute.
const FirstAnswerWarnDefault = 20 * time.Second

// evalProc is one slot's running evaluator.
type evalProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan outLine // stdout, line by line; closed at EOF
	stderr *tail
	outs   *outputs
	quit   chan struct{} // closed when the process is dropped
	once   sync.Once
	waited chan struct{} // closed when the process has been reaped
	copied chan struct{} // closed when its stdout and stderr are read to the end

	// Read and written by the slot's goroutine only.
	log      logrus.FieldLogger // its latest design's, for what it says after that
	answered int                // designs it ended with a result line
	last     string             // the ID of the last of them
	ties     bool               // a result line of its echoed the design's id: every one must
	heard    bool               // it sent a protocol line, a report or a result
}

// Name implements Evaluator.
func (p *Persistent) Name() string { return "persistent" }

// Evaluate implements Evaluator.
func (p *Persistent) Evaluate(ctx context.Context, t Task) Outcome {
	t.Log = taskLog(t)
	if out, bad := p.between(t); bad {
		return out
	}
	proc, err := p.proc(t)
	if err != nil {
		return Failed(ctx, err)
	}
	proc.log = t.Log
	line, err := designLine(t)
	if err != nil {
		return Failed(ctx, err)
	}
	if err := p.send(ctx, t.Slot, proc, line); err != nil {
		if ctx.Err() != nil {
			o := Failed(ctx, ctx.Err())
			o.Error = appendTail(o.Error+" (the evaluator did not read its design)", proc.stderr.String())
			o.Exit, o.Signal = proc.end()
			return o
		}
		return p.died(t, proc, "its stdin is closed")
	}
	return p.await(ctx, t, proc)
}

// designLine is the line that hands t's design to the evaluator. "attempt"
// stays the line's last key, where it was before the checkpoint paths
// came: a shell evaluator may match the line's end.
func designLine(t Task) ([]byte, error) {
	line, err := json.Marshal(struct {
		*schema.Design
		CheckpointOut    string `json:"checkpoint_out,omitempty"`
		ParentCheckpoint string `json:"parent_checkpoint,omitempty"`
		ProgressOut      string `json:"progress_out,omitempty"`
		ProgressRequest  string `json:"progress_request,omitempty"`
		ProgressIn       string `json:"progress_in,omitempty"`
		ResumeStep       int64  `json:"resume_step,omitempty"`
		Attempt          int    `json:"attempt"`
	}{t.Design, t.CheckpointOut, t.ParentCheckpoint, t.ProgressOut, t.ProgressRequest, t.ProgressIn, t.ResumeStep, t.Attempt})
	if err != nil {
		return nil, fmt.Errorf("design to JSON: %w", err)
	}
	return append(line, '\n'), nil
}

// send writes a design line; an evaluator that stops reading its stdin
// cannot hold the slot past ctx: its process is dropped, which ends the
// write.
func (p *Persistent) send(ctx context.Context, slot int, proc *evalProc, line []byte) error {
	done := make(chan error, 1)
	go func() { _, err := proc.stdin.Write(line); done <- err }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		p.drop(slot, proc)
		proc.stdin.Close()
		<-done
		return ctx.Err()
	}
}

// await reads the process's output until a result line, its death or ctx.
// A report line is handed to the task's Reporter and answered on the
// process's stdin; once an answer said stop, the design is stopped
// whatever the process says next, and the process has the stop grace to
// end the design with a result line. A result line that is not this
// design's is a protocol error (see tie).
func (p *Persistent) await(ctx context.Context, t Task, proc *evalProc) Outcome {
	var st stopState
	began := time.Now()
	slow, stopSlow := p.firstAnswerTimer(ctx, proc)
	defer stopSlow()
	for {
		select {
		case l, ok := <-proc.lines:
			if !ok {
				if st.stopped {
					return st.outcome(proc.end())
				}
				return p.died(t, proc, "it exited")
			}
			if step, ok := progressLine(l.text); ok {
				proc.heard = true
				t.saved(step)
				continue
			}
			if rep, isReport, err := reportLine(l.text); isReport {
				proc.heard = true
				if err := p.answer(ctx, t, proc, rep, err, &st); err != nil {
					return p.unanswered(ctx, t, proc, &st)
				}
				continue
			}
			if out, ok := resultLine(l); ok {
				if perr := p.tie(t, proc, l.text); perr != nil {
					return p.protocolError(t, proc, perr)
				}
				proc.answered, proc.last, proc.heard = proc.answered+1, t.Design.ID, true
				if st.stopped {
					return withMetricsOf(st.outcome(nil, ""), out)
				}
				return out
			}
		case <-slow:
			p.warnFirstAnswer(t, proc, time.Since(began))
		case <-st.grace:
			p.drop(t.Slot, proc)
			return st.outcome(proc.end())
		case <-ctx.Done():
			p.drop(t.Slot, proc)
			o := Failed(ctx, ctx.Err())
			if !proc.heard {
				o.Error += " (the persistent evaluator never answered its first design: " + oneShotHint + ")"
			}
			o.Error = appendTail(o.Error, proc.stderr.String())
			o.Exit, o.Signal = proc.end()
			return o
		}
	}
}

// stopState is what a persistent evaluation knows of its stop.
type stopState struct {
	stopped bool
	last    Progress
	reason  string
	grace   <-chan time.Time // fires when the stopped evaluator's grace is over
}

// outcome is the stopped design's outcome, with how its process ended
// when it did.
func (st *stopState) outcome(exit *int, sig string) Outcome {
	o := Stopped(st.last, st.reason)
	o.Exit, o.Signal = exit, sig
	return o
}

// answer hands a report line to the Reporter and writes its answer; a
// line that is not a valid report is answered "continue", so that the
// evaluator never waits for an answer that does not come.
func (p *Persistent) answer(ctx context.Context, t Task, proc *evalProc, rep Progress, bad error, st *stopState) error {
	stop, reason := false, ""
	switch {
	case st.stopped:
		stop, reason = true, st.reason
	case bad != nil:
		if r, ok := t.Reports.(*reporter); ok {
			r.warnOnce(bad)
		}
	default:
		stop, reason = t.Report(ctx, rep)
		if stop {
			st.stopped, st.last, st.reason = true, rep, reason
			st.grace = time.After(graceOf(p.StopGrace))
		}
	}
	return p.send(ctx, t.Slot, proc, stopAnswer(stop, reason))
}

// unanswered ends an evaluation whose evaluator stopped reading its
// stdin while it waited for an answer.
func (p *Persistent) unanswered(ctx context.Context, t Task, proc *evalProc, st *stopState) Outcome {
	if st.stopped {
		p.drop(t.Slot, proc)
		return st.outcome(proc.end())
	}
	if ctx.Err() != nil {
		o := Failed(ctx, ctx.Err())
		o.Error = appendTail(o.Error+" (the evaluator did not read its answer to a report)", proc.stderr.String())
		o.Exit, o.Signal = proc.end()
		return o
	}
	return p.died(t, proc, "its stdin is closed")
}

// died ends a design whose process is gone. Like a one-shot evaluator's
// non-zero exit, that is an error result with the process's stderr tail:
// an evaluator that cannot start or dies on its first design ends every
// design so, and the run's fail-fast check sees it. One death is handed
// back instead: on a design's first delivery, of a process that had
// answered designs before. The process may have died of its own history
// (memory grown over many designs, a driver fault), not of the design,
// which gets one more try in a fresh process; dying there too is its
// error, so that no design circles until it is lost.
func (p *Persistent) died(t Task, proc *evalProc, why string) Outcome {
	p.drop(t.Slot, proc)
	state := "no exit status"
	exit, sig := proc.end()
	if exit != nil || sig != "" { // reaped: ProcessState is written
		state = proc.cmd.ProcessState.String()
	}
	proc.drain() // the whole stderr, for its tail
	stderr := proc.stderr.String()
	if proc.answered > 0 && t.Attempt == 1 {
		return Outcome{HandBack: true, Exit: exit, Signal: sig,
			Error: appendTail(fmt.Sprintf("persistent evaluator died (%s, %s)", why, state), stderr)}
	}
	msg := fmt.Sprintf("persistent evaluator died before answering its first design (%s, %s)", why, state)
	if proc.answered > 0 {
		msg = fmt.Sprintf("persistent evaluator died (%s, %s) on this design's delivery %d", why, state, t.Attempt)
	}
	return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Exit: exit, Signal: sig,
		Error: appendTail(msg, stderr)}
}

// drain waits, up to KillGrace, until a dead process's output is read to
// the end.
func (proc *evalProc) drain() {
	select {
	case <-proc.copied:
	case <-time.After(KillGrace):
	}
}

// end waits up to KillGrace for a dropped process to be reaped and says
// how it ended; nil and "" if it was not reaped in time (stuck in the
// kernel, say, on a hung GPU).
func (proc *evalProc) end() (*int, string) {
	select {
	case <-proc.waited:
		return processEnd(proc.cmd.ProcessState)
	case <-time.After(KillGrace):
		return nil, ""
	}
}

// proc returns the slot's process, starting one if there is none.
func (p *Persistent) proc(t Task) (*evalProc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.procs == nil {
		p.procs = map[int]*evalProc{}
	}
	if pr, ok := p.procs[t.Slot]; ok {
		return pr, nil
	}
	pr, err := p.start(t)
	if err != nil {
		return nil, err
	}
	p.procs[t.Slot] = pr
	return pr, nil
}

func (p *Persistent) start(t Task) (*evalProc, error) {
	cmd, guard, err := evaluatorCommand(p.Cmd)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(append(evaluatorEnviron(), p.Env...), "EVOQ_RUN="+t.Design.Run, "EVOQ_SLOT="+strconv.Itoa(t.Slot),
		"EVOQ_WORKER="+t.Worker, "EVOQ_PERSISTENT=1")
	cmd.Env = append(cmd.Env, GPUEnv(t.GPU)...)
	files, err := openLogs(p.LogDir, t.Design.Run, fmt.Sprintf("%s-slot%d", t.Worker, t.Slot))
	if err != nil {
		guard.close()
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		files.close()
		guard.close()
		return nil, fmt.Errorf("persistent evaluator: %w", err)
	}
	pr := &evalProc{cmd: cmd, stdin: stdin, lines: make(chan outLine, 64), stderr: newTail(StderrKeep),
		quit: make(chan struct{}), waited: make(chan struct{}), copied: make(chan struct{}), log: t.Log}
	lw := newLineWriter(pr.lines, pr.quit)
	if pr.outs, err = attachOutputs(cmd, files.tee(0, lw), files.tee(1, pr.stderr)); err != nil {
		stdin.Close()
		files.close()
		guard.close()
		return nil, err
	}
	err = cmd.Start()
	pr.outs.started()
	guard.started()
	if err != nil {
		pr.outs.wait()
		stdin.Close()
		files.close()
		guard.close()
		return nil, fmt.Errorf("start %q: %w", p.Cmd, err)
	}
	go func() {
		_ = cmd.Wait()
		close(pr.waited)
		killGroup(cmd, syscall.SIGKILL)
		guard.close()
		pr.outs.wait()
		close(pr.copied)
		lw.close()
		files.close()
	}()
	return pr, nil
}

// drop kills a slot's process and forgets it.
func (p *Persistent) drop(slot int, proc *evalProc) {
	p.mu.Lock()
	if p.procs[slot] == proc {
		delete(p.procs, slot)
	}
	p.mu.Unlock()
	proc.once.Do(func() { close(proc.quit) })
	killGroup(proc.cmd, syscall.SIGKILL)
}

// Close ends every evaluator process: stdin is closed (EOF asks it to
// exit), and after KillGrace its process group is killed. A protocol line
// a process printed after its last design is warned about: with no design
// after it, no result records it.
func (p *Persistent) Close() error {
	p.mu.Lock()
	procs := p.procs
	p.procs = nil
	p.mu.Unlock()
	for _, pr := range procs {
		pr.stdin.Close()
	}
	deadline := time.After(KillGrace)
	for _, pr := range procs {
		select {
		case <-drained(pr):
		case <-deadline:
		}
		pr.once.Do(func() { close(pr.quit) })
		killGroup(pr.cmd, syscall.SIGKILL)
	}
	return nil
}

// drained is closed when a closing process's lines are read to the end.
func drained(pr *evalProc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		warned := false
		for l := range pr.lines {
			_, isReport, _ := reportLine(l.text)
			if _, isResult := resultLine(l); (isResult || isReport) && !warned && pr.log != nil {
				warned = true
				pr.log.WithFields(logrus.Fields{"protocol_error": ProtocolLateLine, "after": pr.last, "line": clip(l.text, 300)}).
					Warn("evaluator protocol error: a line arrived after the last design's result, with no design outstanding")
			}
		}
		close(done)
	}()
	return done
}

// outLine is one line of a persistent evaluator's stdout: at most
// schema.MaxResultLine bytes of it, and its whole length.
type outLine struct {
	text string
	n    int
}

// lineWriter splits what it is written into lines for a channel, keeping
// at most schema.MaxResultLine bytes of each.
type lineWriter struct {
	mu    sync.Mutex
	cur   lineBuf
	lines chan outLine
	quit  <-chan struct{} // nobody reads any more: drop lines
	shut  bool
}

func newLineWriter(lines chan outLine, quit <-chan struct{}) *lineWriter {
	return &lineWriter{cur: lineBuf{max: schema.MaxResultLine}, lines: lines, quit: quit}
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur.write(b, w.send)
	return len(b), nil
}

// send hands the line being written on and starts the next.
func (w *lineWriter) send() {
	l := outLine{text: strings.TrimRight(string(w.cur.buf), "\r"), n: w.cur.n}
	w.cur.reset()
	if w.shut {
		return
	}
	select {
	case w.lines <- l:
	case <-w.quit:
	}
}

func (w *lineWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur.n > 0 {
		w.send()
	}
	w.shut = true
	close(w.lines)
}
