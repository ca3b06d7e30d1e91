package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"golang.org/x/sys/unix"
)

// Limits on what an external evaluator may print. Of stdout only the last
// line is kept, up to schema.MaxResultLine; of stderr, the tail.
const (
	StderrKeep = 4 << 10 // bytes of stderr tail put into error results
	// KillGrace is how long a cancelled evaluator's process group has
	// between SIGTERM and SIGKILL.
	KillGrace = 2 * time.Second
	// OutputGrace is how long output is still read after the evaluator's
	// process group is gone (a daemonized child may hold the pipes).
	OutputGrace = time.Second
)

// Command runs an external evaluator per design: `sh -c Cmd`, the design as
// JSON on stdin, EVOQ_RUN, EVOQ_DESIGN_ID, EVOQ_ATTEMPT, EVOQ_SLOT and
// EVOQ_WORKER in its environment (and EVOQ_CHECKPOINT_OUT and
// EVOQ_PARENT_CHECKPOINT when there are: see Task). The last non-empty stdout line must be a
// JSON object: {"fitness": 0.93, "metrics": {...}} or {"infeasible":
// "reason"}. A non-zero exit is an error result carrying the tail of
// stderr. The evaluator runs in its own process group, which is killed as a
// whole when the evaluation is cancelled or times out.
type Command struct {
	Cmd string
	// Env is added to the evaluator's environment (KEY=VALUE).
	Env []string
	// LogDir, when set, keeps each evaluation's whole stdout and stderr in
	// LogDir/<run>/<design>-<attempt>.out and .err; a retry's in
	// <design>-retry<n>-<attempt>, since its delivery count starts again
	// at 1.
	LogDir string
	// StopGrace is how long an evaluator stopped by the run's
	// early-stopping rule has between SIGTERM and SIGKILL. Defaults to
	// StopGraceDefault.
	StopGrace time.Duration
}

// Name implements Evaluator.
func (c Command) Name() string { return "command" }

// Evaluate implements Evaluator.
func (c Command) Evaluate(ctx context.Context, t Task) Outcome {
	input, err := json.Marshal(t.Design)
	if err != nil {
		return Failed(ctx, fmt.Errorf("design to JSON: %w", err))
	}
	stdout, stderr := newLastLine(schema.MaxResultLine), newTail(StderrKeep)
	// A stop decision ends the evaluation through stopCtx; reports are
	// still stored and asked about under ctx. resultFirst: the evaluator
	// had printed a result after its last report when the stop was
	// decided, so it had finished.
	stopCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var resultFirst atomic.Bool
	pump := newReportPump(ctx, t, func() { resultFirst.Store(stdout.endsInResult()); stop(errStopped) })
	defer pump.close()
	stdout.report = pump.line
	cmd, guard, err := evaluatorCommand(c.Cmd)
	if err != nil {
		return Failed(ctx, err)
	}
	defer guard.close()
	cmd.Stdin = bytes.NewReader(input)
	cmd.Env = append(append(evaluatorEnviron(), c.Env...), taskEnv(t)...)
	files, err := openLogs(c.LogDir, t.Design.Run, logName(t))
	if err != nil {
		return Failed(ctx, err)
	}
	defer files.close()
	outs, err := attachOutputs(cmd, files.tee(0, stdout), files.tee(1, stderr))
	if err != nil {
		return Failed(ctx, err)
	}
	err = cmd.Start()
	outs.started()
	guard.started()
	if err != nil {
		outs.wait()
		return Failed(ctx, fmt.Errorf("start %q: %w", c.Cmd, err))
	}
	err = waitGroup(stopCtx, cmd, graceOf(c.StopGrace))
	outs.wait()
	end := pump.close()
	cut := end.stopped && ctx.Err() == nil && context.Cause(stopCtx) == errStopped
	var out Outcome
	switch {
	case cut && (end.finished || resultFirst.Load() && cmd.ProcessState != nil && cmd.ProcessState.Success()):
		// The stop came too late: the evaluator had made its last report,
		// or printed its result and went on to exit 0, before it reached
		// it. It trained to its end, and its result stands. (A result
		// line alone is not enough: a JSON log line can look like one.)
		out = finishedOutcome(stdout, end)
	case cut && errors.Is(err, context.Canceled):
		// Stopped before it ended by itself. What it printed then is not
		// its result, but its metrics are kept (inheritance, say).
		out = withMetricsOf(Stopped(end.last, end.reason), printedResult(stdout))
	default:
		out = commandOutcome(ctx, err, stdout, stderr)
	}
	out.Exit, out.Signal = processEnd(cmd.ProcessState)
	return out
}

// finishedOutcome is the outcome of an evaluation that trained to its end
// though a stop was decided for one of its reports: the result it printed,
// else its last report's, else (it printed its result, then more) the
// stop's.
func finishedOutcome(stdout *lastLine, end pumpEnd) Outcome {
	if o := printedResult(stdout); o.Status == schema.StatusOK || o.Status == schema.StatusInfeasible {
		return o
	}
	if end.finished {
		return finishedAt(end.end)
	}
	return Stopped(end.last, end.reason)
}

// printedResult is the result on the evaluator's last stdout line, an
// error outcome when there is none.
func printedResult(stdout *lastLine) Outcome {
	line, n := stdout.Line()
	if n > schema.MaxResultLine {
		return lineTooLong(line, n)
	}
	return ParseOutput(line)
}

// graceOf is a stop grace, or StopGraceDefault for none given.
func graceOf(d time.Duration) time.Duration {
	if d <= 0 {
		return StopGraceDefault
	}
	return d
}

// commandOutcome reads the outcome of an evaluator that ran and ended,
// err being how its wait ended.
func commandOutcome(ctx context.Context, err error, stdout *lastLine, stderr *tail) Outcome {
	if err != nil {
		return commandFailed(ctx, err, stderr.String())
	}
	line, n := stdout.Line()
	if n > schema.MaxResultLine {
		return lineTooLong(line, n)
	}
	if line == "" {
		return noResultLine(stdout.Reports())
	}
	if _, isReport, _ := reportLine(line); isReport {
		// A last report line with no newline: no result line came either.
		return noResultLine(stdout.Reports() + 1)
	}
	return ParseOutput(line)
}

// processEnd says how a process ended: its exit code, or the name of the
// signal that killed it (nil and "" for a process not reaped). A process
// that sh started for a command with shell syntax is sh's child, and sh
// reports its death by a signal as exit 128+n.
func processEnd(ps *os.ProcessState) (*int, string) {
	if ps == nil {
		return nil, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return nil, signalName(ws.Signal())
	}
	code := ps.ExitCode()
	return &code, ""
}

// signalName is a signal's conventional name, SIGKILL rather than Go's
// "killed", so that it reads as the batch system and the shell write it.
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// outputs copies an evaluator's stdout and stderr through pipes of our
// own, so that cmd.Wait returns when the evaluator exits even if a child it
// left behind still holds them; the group kill that follows closes them.
type outputs struct {
	writers []*os.File
	readers []*os.File
	copied  sync.WaitGroup
}

func attachOutputs(cmd *exec.Cmd, stdout, stderr io.Writer) (*outputs, error) {
	o := &outputs{}
	for _, w := range []io.Writer{stdout, stderr} {
		r, pw, err := os.Pipe()
		if err != nil {
			o.started()
			o.wait()
			return nil, fmt.Errorf("evaluator pipes: %w", err)
		}
		o.readers, o.writers = append(o.readers, r), append(o.writers, pw)
		o.copied.Add(1)
		go func() { defer o.copied.Done(); _, _ = io.Copy(w, r) }()
	}
	cmd.Stdout, cmd.Stderr = o.writers[0], o.writers[1]
	return o, nil
}

// started closes our copies of the write ends: the evaluator holds its own.
func (o *outputs) started() {
	for _, w := range o.writers {
		w.Close()
	}
}

// wait waits for the copies to finish; a writer that escaped the process
// group kill gets OutputGrace before its pipe is closed under it.
func (o *outputs) wait() {
	done := make(chan struct{})
	go func() { o.copied.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(OutputGrace):
		for _, r := range o.readers {
			r.Close()
		}
		<-done
	}
	for _, r := range o.readers {
		r.Close()
	}
}

// logFiles are an evaluation's stdout and stderr files; empty without a
// log directory.
type logFiles []*os.File

// openLogs creates dir/run/name.out and .err, or nothing when dir is "".
func openLogs(dir, run, name string) (logFiles, error) {
	if dir == "" {
		return nil, nil
	}
	d := filepath.Join(dir, run)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("evaluator logs: %w", err)
	}
	var files logFiles
	for _, ext := range []string{".out", ".err"} {
		f, err := os.OpenFile(filepath.Join(d, name+ext), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			files.close()
			return nil, fmt.Errorf("evaluator logs: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// tee writes to w and, with log files, to file i as well.
func (l logFiles) tee(i int, w io.Writer) io.Writer {
	if l == nil {
		return w
	}
	return io.MultiWriter(w, l[i])
}

func (l logFiles) close() {
	for _, f := range l {
		f.Close()
	}
}

// evaluatorAttr puts an evaluator in a process group of its own, killed as
// a whole on timeout, and kills its shell if the worker dies (SIGKILL,
// OOM); the guard (see evaluatorCommand) kills the rest of the group.
func evaluatorAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// guardScript runs the evaluator's command, $1, in this shell, beside a
// watcher that kills the whole process group once fd 3 reads end of file.
// The worker holds the pipe's only write end, so that happens when the
// worker is done with the evaluator or dies, however it dies. Pdeathsig
// reaches only the shell, not what the command starts (a python and its
// data-loader processes), which would hold the GPU as orphans.
//
// SIGUSR1 is ignored, and so by whatever the command starts unless it
// handles the signal itself: it is the batch system's warning that the
// job ends soon (Slurm's --signal, LSF's -wa), which reaches every process
// of the job, and its default action would end the evaluation the worker
// is about to let finish, or ask to save its progress, as it drains.
const guardScript = `trap '' USR1; (read _ <&3; kill -9 0) </dev/null >/dev/null 2>&1 & exec 3<&-; eval "$1"`

// evaluatorGuard is the worker's side of an evaluator's guard pipe.
type evaluatorGuard struct{ r, w *os.File }

// evaluatorCommand is the process of an evaluator running command with
// sh, in a process group of its own that dies with the worker.
func evaluatorCommand(command string) (*exec.Cmd, *evaluatorGuard, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("evaluator guard: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", guardScript, "evoq-evaluator", shellCommand(command))
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = evaluatorAttr()
	return cmd, &evaluatorGuard{r: r, w: w}, nil
}

// started closes the read end the evaluator got.
func (g *evaluatorGuard) started() { _ = g.r.Close() }

// close ends the guard: what is left of the evaluator's group is killed.
func (g *evaluatorGuard) close() {
	_ = g.r.Close()
	_ = g.w.Close()
}

// shellCommand makes sh exec a simple command (no shell syntax), so that
// the evaluator itself, not a shell, is the worker's child and dies with it.
func shellCommand(cmd string) string {
	if strings.ContainsAny(cmd, ";&|<>()$`\\\n'\"*?[]{}~#=") {
		return cmd
	}
	return "exec " + cmd
}

// logName names an evaluation's log files.
func logName(t Task) string {
	if t.Design.Retry > 0 {
		return fmt.Sprintf("%s-retry%d-%d", t.Design.ID, t.Design.Retry, t.Attempt)
	}
	return fmt.Sprintf("%s-%d", t.Design.ID, t.Attempt)
}

func taskEnv(t Task) []string {
	return append([]string{
		"EVOQ_RUN=" + t.Design.Run,
		"EVOQ_DESIGN_ID=" + t.Design.ID,
		"EVOQ_ATTEMPT=" + strconv.Itoa(t.Attempt),
		"EVOQ_SLOT=" + strconv.Itoa(t.Slot),
		"EVOQ_WORKER=" + t.Worker,
	}, append(checkpointEnv(t), GPUEnv(t.GPU)...)...)
}

// waitGroup waits for cmd; when ctx ends first it kills cmd's whole process
// group (SIGTERM, then SIGKILL after grace; KillGrace for a timeout or a
// cancelled evaluation, the stop grace when early stopping ended it) and
// returns ctx's error. Either way the group is killed at the end, so no
// stray child of the evaluator outlives its evaluation.
func waitGroup(ctx context.Context, cmd *exec.Cmd, grace time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer killGroup(cmd, syscall.SIGKILL)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	killGroup(cmd, syscall.SIGTERM)
	if context.Cause(ctx) != errStopped {
		grace = KillGrace
	}
	select {
	case <-done:
		return ctx.Err()
	case <-time.After(grace):
	}
	killGroup(cmd, syscall.SIGKILL)
	<-done
	return ctx.Err()
}

func killGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}

func commandFailed(ctx context.Context, err error, stderr string) Outcome {
	if ctx.Err() != nil {
		o := Failed(ctx, err)
		o.Error = appendTail(o.Error, stderr)
		return o
	}
	msg := err.Error()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		msg = "evaluator " + ee.ProcessState.String()
	}
	return Outcome{Status: schema.StatusError, Fitness: schema.InfeasibleFitness, Error: appendTail(msg, stderr)}
}

// stderrTail joins an error and the tail of its evaluator's stderr.
const stderrTail = "; stderr tail: "

func appendTail(msg, stderr string) string {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return msg
	}
	return msg + stderrTail + stderr
}

// logError shortens an error text to about n bytes for a log line. The
// tail of stderr in it keeps its last lines, not its first: a program says
// why it failed at the end, and a Python traceback's exception line is its
// last. The text before the tail, which says how the evaluator ended,
// keeps its beginning.
func logError(text string, n int) string {
	msg, stderr, ok := strings.Cut(text, stderrTail)
	if !ok {
		return clip(text, n)
	}
	msg = clip(msg, n/3) + stderrTail
	return msg + lastLines(stderr, max(n-len(msg), 40))
}

// lastLines is the end of s in at most n bytes: its last whole lines that
// fit, else the end of its last line; "…" marks a cut.
func lastLines(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("…")
	cut := len(s) - n
	if i := strings.IndexByte(s[cut:], '\n'); i >= 0 && i < len(s)-cut-1 {
		return "…" + s[cut+i:]
	}
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return "…" + s[cut:]
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// tail is an io.Writer that keeps the last n bytes written.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// lineBuf is a line being written: its first max bytes and its whole
// length, so that a line too long to be a result is reported by its size,
// not cut into something else.
type lineBuf struct {
	max int
	buf []byte
	n   int
}

// write adds p to the line, calling end at each newline: the line is then
// complete, and end hands it on and resets it.
func (l *lineBuf) write(p []byte, end func()) {
	for {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		l.n += len(seg)
		if room := l.max - len(l.buf); room > 0 {
			l.buf = append(l.buf, seg[:min(room, len(seg))]...)
		}
		if i < 0 {
			return
		}
		end()
		p = p[i+1:]
	}
}

func (l *lineBuf) reset() { l.buf, l.n = l.buf[:0], 0 }

// lastLine is an io.Writer that keeps the last non-blank line written, up
// to max bytes of it, and its whole length. Report lines are handed to
// report, when set, and are never the last line: the result comes after
// them.
type lastLine struct {
	mu     sync.Mutex
	cur    lineBuf
	last   []byte // the last complete non-blank line
	lastN  int    // its whole length
	report func(line string)
	// result says whether last is a result line printed after the last
	// report line. It is read without mu, by the goroutine that report
	// feeds, which mu may be waiting on.
	result  atomic.Bool
	reports int // report lines handed on
}

// endsInResult says whether the last complete line is a result (ok or
// infeasible) that came after every report line.
func (l *lastLine) endsInResult() bool { return l.result.Load() }

func newLastLine(max int) *lastLine { return &lastLine{cur: lineBuf{max: max}} }

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur.write(p, l.endLine)
	return len(p), nil
}

// endLine makes the line being written the last one, unless it is blank.
func (l *lastLine) endLine() {
	if l.report != nil && isProgressLine(l.cur.buf) {
		if _, ok := progressLine(string(l.cur.buf)); ok {
			// In the reports' queue, so that a save is stored before
			// the report that follows it.
			l.report(string(l.cur.buf))
			l.cur.reset()
			return
		}
	}
	if l.report != nil && bytes.Contains(l.cur.buf, []byte(`"report"`)) {
		if _, isReport, _ := reportLine(string(l.cur.buf)); isReport {
			l.result.Store(false)
			l.report(string(l.cur.buf))
			l.reports++
			l.cur.reset()
			return
		}
	}
	if t := bytes.TrimSpace(l.cur.buf); len(t) > 0 {
		l.result.Store(isResult(t, l.cur.n, l.cur.max))
		l.last, l.cur.buf, l.lastN = l.cur.buf, l.last, l.cur.n
	}
	l.cur.reset()
}

// Reports is the number of report lines handed on.
func (l *lastLine) Reports() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reports
}

// isResult says whether t, a trimmed line of n bytes (max kept), is a
// result line: ok or infeasible.
func isResult(t []byte, n, max int) bool {
	if t[0] != '{' || n > max {
		return false
	}
	s := ParseOutput(string(t)).Status
	return s == schema.StatusOK || s == schema.StatusInfeasible
}

// Line is the last non-blank line, trimmed (at most max bytes of it), and
// the length of the whole line: the trimmed length when it was kept whole.
func (l *lastLine) Line() (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line, n := l.cur.buf, l.cur.n
	if len(bytes.TrimSpace(line)) == 0 {
		line, n = l.last, l.lastN
	}
	t := strings.TrimSpace(string(line))
	if n <= l.cur.max {
		n = len(t)
	}
	return t, n
}

// checkpointEnv tells an evaluator where to write its design's checkpoint
// and where its parent's is; each is absent when there is none.
func checkpointEnv(t Task) []string {
	var env []string
	if t.CheckpointOut != "" {
		env = append(env, "EVOQ_CHECKPOINT_OUT="+t.CheckpointOut)
	}
	if t.ParentCheckpoint != "" {
		env = append(env, "EVOQ_PARENT_CHECKPOINT="+t.ParentCheckpoint)
	}
	if t.ProgressOut != "" {
		env = append(env, "EVOQ_PROGRESS_OUT="+t.ProgressOut, "EVOQ_PROGRESS_REQUEST="+t.ProgressRequest)
	}
	if t.ProgressIn != "" {
		env = append(env, "EVOQ_PROGRESS_IN="+t.ProgressIn, "EVOQ_RESUME_STEP="+strconv.FormatInt(t.ResumeStep, 10))
	}
	return env
}

// evaluatorEnviron is the worker's environment as its evaluators get it:
// $NATS_URL without the user info of its URLs. A password or token that
// reached the worker there would otherwise reach every evaluator, and
// any evaluator that prints its environment, or crashes with it, would
// put it in its log and in its error results.
func evaluatorEnviron() []string {
	env := os.Environ()
	for i, kv := range env {
		if u, ok := strings.CutPrefix(kv, "NATS_URL="); ok && broker.HasUserInfo(u) {
			env[i] = "NATS_URL=" + broker.StripUserInfo(u)
		}
	}
	return env
}
