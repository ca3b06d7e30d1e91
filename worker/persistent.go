package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/evoq/evoq/schema"
)

// Persistent runs one long-lived evaluator process per slot (`sh -c Cmd`),
// so that heavy imports such as PyTorch happen once, not per design. For
// each design it writes one JSON line to the process's stdin — the design
// as the one-shot evaluator gets it, plus "attempt" and, when there are,
// "checkpoint_out" and "parent_checkpoint" (the one-shot evaluator's
// EVOQ_CHECKPOINT_OUT and EVOQ_PARENT_CHECKPOINT) — and reads stdout
// until a line that is a result object: {"fitness": x, "metrics": {...}},
// {"infeasible": "reason"} or {"error": "reason"}. Other lines are the
// evaluator's own output. If the process dies, the design is handed back
// for another try and the next design starts a fresh process; a timeout
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

	mu    sync.Mutex
	procs map[int]*evalProc
}

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
}

// Name implements Evaluator.
func (p *Persistent) Name() string { return "persistent" }

// Evaluate implements Evaluator.
func (p *Persistent) Evaluate(ctx context.Context, t Task) Outcome {
	proc, err := p.proc(t)
	if err != nil {
		return Failed(ctx, err)
	}
	// "attempt" stays the line's last key, where it was before the
	// checkpoint paths came: a shell evaluator may match the line's end.
	line, err := json.Marshal(struct {
		*schema.Design
		CheckpointOut    string `json:"checkpoint_out,omitempty"`
		ParentCheckpoint string `json:"parent_checkpoint,omitempty"`
		Attempt          int    `json:"attempt"`
	}{t.Design, t.CheckpointOut, t.ParentCheckpoint, t.Attempt})
	if err != nil {
		return Failed(ctx, fmt.Errorf("design to JSON: %w", err))
	}
	discard(proc.lines) // output left over from the last design
	if err := p.send(ctx, t.Slot, proc, append(line, '\n')); err != nil {
		if ctx.Err() != nil {
			o := Failed(ctx, ctx.Err())
			o.Error = appendTail(o.Error+" (the evaluator did not read its design)", proc.stderr.String())
			o.Exit, o.Signal = proc.end()
			return o
		}
		return p.died(t.Slot, proc, "its stdin is closed")
	}
	return p.await(ctx, t, proc)
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
// end the design with a result line.
func (p *Persistent) await(ctx context.Context, t Task, proc *evalProc) Outcome {
	var st stopState
	for {
		select {
		case l, ok := <-proc.lines:
			if !ok {
				if st.stopped {
					return st.outcome(proc.end())
				}
				return p.died(t.Slot, proc, "it exited")
			}
			if rep, isReport, err := reportLine(l.text); isReport {
				if err := p.answer(ctx, t, proc, rep, err, &st); err != nil {
					return p.unanswered(ctx, t.Slot, proc, &st)
				}
				continue
			}
			if out, ok := resultLine(l); ok {
				if st.stopped {
					return withMetricsOf(st.outcome(nil, ""), out)
				}
				return out
			}
		case <-st.grace:
			p.drop(t.Slot, proc)
			return st.outcome(proc.end())
		case <-ctx.Done():
			p.drop(t.Slot, proc)
			o := Failed(ctx, ctx.Err())
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
func (p *Persistent) unanswered(ctx context.Context, slot int, proc *evalProc, st *stopState) Outcome {
	if st.stopped {
		p.drop(slot, proc)
		return st.outcome(proc.end())
	}
	if ctx.Err() != nil {
		o := Failed(ctx, ctx.Err())
		o.Error = appendTail(o.Error+" (the evaluator did not read its answer to a report)", proc.stderr.String())
		o.Exit, o.Signal = proc.end()
		return o
	}
	return p.died(slot, proc, "its stdin is closed")
}

// discard drops the lines already waiting.
func discard(lines chan outLine) {
	for {
		select {
		case _, ok := <-lines:
			if !ok {
				return
			}
		default:
			return
		}
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

// died hands the design back: the process is gone, the design may be fine.
func (p *Persistent) died(slot int, proc *evalProc, why string) Outcome {
	p.drop(slot, proc)
	state := "no exit status"
	exit, sig := proc.end()
	if exit != nil || sig != "" { // reaped: ProcessState is written
		state = proc.cmd.ProcessState.String()
	}
	return Outcome{HandBack: true, Exit: exit, Signal: sig,
		Error: appendTail(fmt.Sprintf("persistent evaluator died (%s, %s)", why, state), proc.stderr.String())}
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
	cmd.Env = append(append(os.Environ(), p.Env...), "EVOQ_RUN="+t.Design.Run, "EVOQ_SLOT="+strconv.Itoa(t.Slot),
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
		quit: make(chan struct{}), waited: make(chan struct{})}
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
// exit), and after KillGrace its process group is killed.
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
		case <-drained(pr.lines):
		case <-deadline:
		}
		pr.once.Do(func() { close(pr.quit) })
		killGroup(pr.cmd, syscall.SIGKILL)
	}
	return nil
}

// drained is closed when lines is closed, discarding what is left.
func drained(lines chan outLine) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range lines {
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
