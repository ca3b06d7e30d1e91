package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/internal/cmdbase"
	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// statusCmd shows a run at a glance: phase, budget, the work queue, the
// best so far and every worker, flagging idle slots.
type statusCmd struct {
	env     cmdbase.Env
	src     sourceFlags
	jsonOut bool
	watch   time.Duration
	// shown is the count of the last redraw of a --watch: a controller's
	// figures behind it (a second old, or taken over from a count of the
	// results as the controller started) are not shown.
	shown int
}

// runStatus is what status reports; its JSON form is `evoq status --json`.
type runStatus struct {
	Run      string                `json:"run"`
	Phase    schema.Phase          `json:"phase"`
	Budget   int                   `json:"budget"`
	Done     int                   `json:"done"`
	ByStatus map[schema.Status]int `json:"by_status"`
	InFlight int                   `json:"in_flight"` // delivered to a slot, not acked
	Queued   int                   `json:"queued"`    // waiting on the work queue
	Best     *float64              `json:"best_fitness"`
	BestID   string                `json:"best_id,omitempty"`
	// The stored results that do not count, by controller.Tally's
	// verdict.
	Duplicates int `json:"duplicates"`
	Foreign    int `json:"foreign"`
	Malformed  int `json:"malformed"`
	// Retried are failed attempts the run retried elsewhere.
	Retried int `json:"retried"`
	// Settings are the search settings the run records, as name=value;
	// Changes the ones restarts and run extend changed on purpose.
	Settings []string        `json:"settings"`
	Changes  []schema.Change `json:"changes,omitempty"`
	// EarlyStop is the run's early-stopping rule; nil: none. The text
	// form shows it among the settings (controller.RecordSettings).
	EarlyStop *schema.EarlyStop `json:"early_stop,omitempty"`
	// Failure says why the controller failed the run (phase failed).
	Failure *schema.Failure `json:"failure,omitempty"`
	// StopReason is why the run ended, as its controller recorded it
	// (budget, target, plateau, time, failed, interrupted); "" while it
	// runs.
	StopReason schema.StopReason `json:"stop_reason,omitempty"`
	// Progress is what saved progress did for the run's interrupted
	// designs (runstate.ProgressOf): resumed, or retrained from scratch;
	// nil when no counted design was interrupted.
	Progress *runstate.ProgressSummary `json:"progress,omitempty"`
	// Checkpoints is the run's checkpoint store now; nil for a run that
	// keeps none.
	Checkpoints *checkpointStatus `json:"checkpoints,omitempty"`
	// Controller is the controller that holds the run's lease, if one
	// does and the credential may read it.
	Controller *schema.Lease `json:"controller,omitempty"`
	// ControllerLive says whether a controller runs the run now: one
	// holds its lease, renewed it within controller.LeaseFresh and, when
	// it runs on this host, its process is there. Only a live
	// controller's figures are shown; otherwise status counts the stored
	// results.
	ControllerLive bool `json:"controller_live"`
	// ControllerGone says what became of the controller that holds the
	// lease when it is not live; nil when it is, or when no controller
	// holds the lease.
	ControllerGone *controllerGone `json:"controller_gone,omitempty"`
	Workers        []workerStatus  `json:"workers"`
	Problems       []string        `json:"problems"`
	// Warnings are the run's standing warnings, as its record keeps them
	// (controller.Warnings), and those its live workers send with their
	// heartbeats.
	Warnings []string `json:"warnings"`
	// CountedBy says where the figures come from: "controller", the
	// snapshot the run's live controller keeps in its lease, or
	// "results", a count of the stored results.
	CountedBy   string `json:"counted_by"`
	leaseUnread bool
	queueKnown  bool
	perWorker   map[string]*workerStatus
	quarantined []schema.QuarantinedSlot
}

// controllerGone is a controller that holds its run's lease but stopped
// renewing it: killed, frozen or cut off from the broker.
type controllerGone struct {
	// Since is its last renewal, on this host's clock.
	Since time.Time `json:"since"`
	// PIDGone says that it ran on this host and its process is gone.
	PIDGone bool `json:"pid_gone"`
}

type workerStatus struct {
	Worker      string    `json:"worker"`
	Host        string    `json:"host"`
	Slots       int       `json:"slots"`
	Busy        int       `json:"busy"`
	Live        bool      `json:"live"`
	Leaving     bool      `json:"leaving"`
	Evaluations int       `json:"evaluations"`
	Failures    int       `json:"failures"`
	LastSeen    time.Time `json:"last_seen"`
	LastResult  time.Time `json:"last_result"`
	// Quarantined are its slots that take no designs: those its heartbeat
	// reports and those the run's results quarantine
	// (controller.HeldSlots).
	Quarantined []int  `json:"quarantined,omitempty"`
	State       string `json:"state"`
	presence    *schema.Presence
	faults      []string // the quarantined slots' last errors, for the problems
}

func (c *statusCmd) Run(ctx context.Context, args []string) error {
	fs := cmdbase.NewFlagSet("status", "Shows a run: phase, budget done / in flight / queued, the best so far, and every worker, flagging idle slots.", c.env.Stderr)
	c.src.register(fs)
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object")
	fs.DurationVar(&c.watch, "watch", 0, "redraw every this long until interrupted, e.g. 2s (0: once)")
	if err := cmdbase.Parse(fs, args); err != nil {
		return err
	}
	src, err := c.src.source(fs, c.env.Stderr)
	if err != nil {
		return err
	}
	if c.watch < 0 || (c.watch > 0 && c.watch < 100*time.Millisecond) {
		return cmdbase.UsageErr("--watch %s: want 0 or at least 100ms", c.watch)
	}
	r, ri, err := c.src.openRun(ctx, src)
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		err := c.show(ctx, r, ri)
		if c.watch > 0 && ctx.Err() != nil {
			return nil // interrupted while watching: a normal end
		}
		if err != nil || c.watch == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.watch):
		}
	}
}

// show collects and prints the status once; with --watch on a terminal it
// redraws the screen.
func (c *statusCmd) show(ctx context.Context, r *history.Reader, ri history.RunInfo) error {
	if x, err := r.Pick(ctx, ri.ID); err == nil && x.Err == nil {
		ri = x // the phase moves on while watching
	}
	st, err := collectStatus(ctx, r, ri, c.shown)
	if err != nil {
		return err
	}
	c.shown = st.Done
	if c.jsonOut {
		b, _ := json.Marshal(st)
		_, err = fmt.Fprintf(c.env.Stdout, "%s\n", b)
		return err
	}
	if c.watch > 0 && cmdbase.IsTerminal(c.env.Stdout) {
		fmt.Fprint(c.env.Stdout, "\033[H\033[2J")
	}
	st.print(c.env)
	return nil
}

// collectStatus reads the results' figures, the presence bucket and the
// work queue. The figures come from the snapshot a live controller keeps
// in its lease, renewed every second, so that status answers at once
// whatever the size of the run; with no live controller (a run done or
// stopped, a controller killed or still replaying), status counts the
// stored results itself, by the same rule (see useLease). Figures of the
// controller's that count fewer results than floor (what the last redraw
// of a --watch showed) are passed over for a count of the results, so
// that a watch never goes back.
func collectStatus(ctx context.Context, r *history.Reader, ri history.RunInfo, floor int) (*runStatus, error) {
	st := &runStatus{Run: ri.ID, Phase: ri.Phase, Budget: ri.Budget, ByStatus: map[schema.Status]int{},
		perWorker: map[string]*workerStatus{}}
	lv, err := broker.ReadLease(ctx, r.JS(), ri.ID)
	if err != nil {
		st.leaseUnread = true
		st.Problems = append(st.Problems, "the controller's lease not read (whether a controller runs the run is not known): "+err.Error())
	}
	st.readLease(lv)
	var fig *runstate.Figures
	if st.useLease(lv, floor) {
		l := lv.Lease
		fig, st.quarantined, st.CountedBy = runstate.FiguresOf(l.Figures), l.Figures.Quarantined, "controller"
	} else {
		tally := runstate.NewTally(ri.ID, ri.Budget, runstate.RulesOf(ri.Run))
		fig = runstate.NewFigures()
		err := r.Results(ctx, ri.ID, func(_ uint64, _ time.Time, res *schema.Result, err error) error {
			fig.Add(tally.Judge(res, err), res)
			return nil
		})
		if err != nil {
			return nil, err
		}
		st.quarantined, st.CountedBy = runstate.QuarantinedOf(tally), "results"
	}
	st.take(fig)
	if ri.Run != nil {
		st.Settings, st.Changes, st.Failure = runstate.RecordSettings(ri.Run), ri.Run.Changes, ri.Run.Failure
		st.EarlyStop, st.StopReason = ri.Run.EarlyStop, ri.Run.StopReason
		st.Warnings = append(st.Warnings, ri.Run.Warnings...)
	}
	if ri.Run != nil && ri.Run.Checkpoints != nil {
		st.Checkpoints = readCheckpoints(ctx, r.JS(), ri.ID, ri.Run.Checkpoints)
	}
	st.readPresence(ctx, r)
	st.readQueue(ctx, r.JS())
	st.finish(time.Now())
	return st, nil
}

// readLease takes in the run's lease: who holds it and whether it is
// live.
func (st *runStatus) readLease(lv *broker.LeaseView) {
	if lv == nil {
		return
	}
	st.Controller, st.ControllerLive = lv.Lease, lv.Live()
	if !st.ControllerLive {
		st.ControllerGone = &controllerGone{Since: lv.Renewed, PIDGone: lv.PIDGone}
	}
}

// useLease says whether the figures in the lease lv are the run's: its
// controller is live, it took them within a missed renewal or two of its
// last renewal (a controller whose loop is stuck renews its lease with
// figures that no longer move), the run is not over, and they count at
// least floor results. Otherwise the stored results are counted: what
// they hold is then more than any controller's belief.
func (st *runStatus) useLease(lv *broker.LeaseView, floor int) bool {
	if !st.ControllerLive || lv.Lease.Figures == nil || !st.active() {
		return false
	}
	f := lv.Lease.Figures
	// Both times are the controller's own clock.
	return lv.Lease.Renewed.Sub(f.At) < broker.LeaseFresh && f.Done >= floor
}

// active says whether the run's phase is one a controller runs.
func (st *runStatus) active() bool {
	switch st.Phase {
	case schema.PhaseStarting, schema.PhaseRunning, schema.PhaseDraining:
		return true
	}
	return false
}

// phaseText is the run's phase, and for a run that a controller should be
// running, whether one does: a phase is what the last controller wrote,
// and says nothing of whether that controller still runs.
func (st *runStatus) phaseText() string {
	switch {
	case !st.active() || st.ControllerLive || st.leaseUnread:
		return string(st.Phase)
	case st.ControllerGone != nil:
		return fmt.Sprintf("%s (controller gone since %s)", st.Phase, st.ControllerGone.Since.Local().Format(time.TimeOnly))
	}
	return fmt.Sprintf("%s (no controller)", st.Phase)
}

func (st *runStatus) worker(id string) *workerStatus {
	w, ok := st.perWorker[id]
	if !ok {
		w = &workerStatus{Worker: id}
		st.perWorker[id] = w
	}
	return w
}

// take fills in the results' figures.
func (st *runStatus) take(f *runstate.Figures) {
	st.Done, st.ByStatus, st.Best, st.BestID = f.Done, f.ByStatus, f.Best, f.BestID
	st.Duplicates, st.Foreign, st.Malformed, st.Retried = f.Duplicates, f.Foreign, f.Malformed, f.Retried
	st.Progress = runstate.ProgressOf(f)
	for id, wf := range f.Workers {
		w := st.worker(id)
		w.Host, w.Evaluations, w.Failures, w.LastResult = wf.Host, wf.Evaluations, wf.Failures, wf.LastResult
	}
}

func (st *runStatus) readPresence(ctx context.Context, r *history.Reader) {
	ps, err := r.Presence(ctx, st.Run)
	if err != nil {
		st.Problems = append(st.Problems, "workers' heartbeats not read: "+err.Error())
		return
	}
	// A heartbeat's time is the broker's, which stored it: it is judged
	// against the broker's clock, and shown on this host's.
	now, skew := time.Now(), time.Duration(0)
	if kv, err := r.JS().KeyValue(ctx, schema.PresenceBucket); err == nil {
		if bt, ok := broker.BrokerTime(ctx, kv); ok {
			skew = time.Since(bt)
		}
	}
	for _, p := range ps {
		w := st.worker(p.Worker)
		stored := p.Stored.Add(skew)
		w.Host, w.Slots, w.Busy, w.Leaving, w.LastSeen = p.Host, p.Slots, p.Busy, p.Leaving, stored
		w.Live = runstate.Alive(p.Presence, stored, now)
		w.presence = &p.Presence
		if !w.Live {
			continue
		}
		for _, x := range p.Warnings {
			// The controller's record words a worker's warning so.
			if msg := fmt.Sprintf("worker %s (host %s): %s", p.Worker, p.Host, x); !slices.Contains(st.Warnings, msg) {
				st.Warnings = append(st.Warnings, msg)
			}
		}
	}
}

// quarantine fills in each worker's quarantined slots.
func (st *runStatus) quarantine() {
	for id, w := range st.perWorker {
		var q []int
		for _, s := range runstate.HeldSlotsOf(st.quarantined, id, w.presence) {
			q = append(q, s.Slot)
		}
		if w.presence != nil {
			q = append(q, w.presence.Quarantined...)
		}
		slices.Sort(q)
		w.Quarantined = slices.Compact(q)
		for _, i := range w.Quarantined {
			f := fmt.Sprintf("worker %s slot %d on host %s is quarantined", id, i, w.Host)
			if j := slices.IndexFunc(st.quarantined, func(s schema.QuarantinedSlot) bool { return s.Worker == id && s.Slot == i }); j >= 0 {
				s := st.quarantined[j]
				if s.GPU != "" {
					f += " (GPU " + s.GPU + ")"
				}
				if s.Failures > 0 {
					f += fmt.Sprintf(" after %d failed designs in a row; last error: %s", s.Failures, clipText(s.LastError, 200))
				}
			}
			w.faults = append(w.faults, f)
		}
	}
}

func (st *runStatus) readQueue(ctx context.Context, js jetstream.JetStream) {
	cons, err := js.Consumer(ctx, schema.DesignStream, schema.ConsumerName(st.Run))
	if err != nil {
		return
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return
	}
	st.InFlight, st.Queued, st.queueKnown = info.NumAckPending, int(info.NumPending), true
}

// finish sorts the workers and names what looks wrong.
func (st *runStatus) finish(now time.Time) {
	st.quarantine()
	for _, w := range st.perWorker {
		w.State = w.state()
		st.Workers = append(st.Workers, *w)
	}
	sort.Slice(st.Workers, func(i, j int) bool { return st.Workers[i].Worker < st.Workers[j].Worker })
	loads := make([]runstate.WorkerLoad, len(st.Workers))
	for i, w := range st.Workers {
		st.Problems = append(st.Problems, w.faults...)
		loads[i] = runstate.WorkerLoad{Worker: w.Worker, Slots: max(w.Slots-len(w.Quarantined), 0), Busy: w.Busy, Live: w.Live, Evaluations: w.Evaluations}
	}
	if st.active() && !st.ControllerLive && !st.leaseUnread {
		// Idle slots follow: say why first, and what to do.
		st.Problems = append(st.Problems, "no live controller: nothing publishes the run's designs; start the controller again with the same --run (and --dir) to continue it")
	}
	active := st.Phase == schema.PhaseRunning || st.Phase == schema.PhaseStarting
	idle := runstate.IdleWorkers(loads, runstate.QueueFigures{Queued: st.Queued},
		runstate.BudgetFigures{Budget: st.Budget, Done: st.Done, Open: active})
	for _, w := range idle {
		st.Problems = append(st.Problems, w.String())
	}
}

func (st *runStatus) print(env cmdbase.Env) {
	fmt.Fprintf(env.Stdout, "run %s: %s; %d of %d done", st.Run, st.phaseText(), st.Done, st.Budget)
	if st.queueKnown {
		fmt.Fprintf(env.Stdout, ", %d in flight, %d queued", st.InFlight, st.Queued)
	}
	fmt.Fprintln(env.Stdout)
	fmt.Fprintf(env.Stdout, "results: %s", strings.Join(st.statusParts(), ", "))
	if st.Retried+st.Duplicates+st.Foreign+st.Malformed > 0 {
		fmt.Fprintf(env.Stdout, "; not counted: %d retried, %d duplicate, %d foreign, %d malformed", st.Retried, st.Duplicates, st.Foreign, st.Malformed)
	}
	fmt.Fprintln(env.Stdout)
	if st.StopReason != "" {
		fmt.Fprintf(env.Stdout, "stop reason: %s\n", st.StopReason)
	}
	if f := st.Failure; f != nil {
		fmt.Fprintf(env.Stdout, "failed: the first %d evaluations all failed, %d of them with %q; continue with --resume once the evaluator is fixed\n",
			f.Attempts, f.Count, f.Error)
	}
	if len(st.Warnings) > 0 {
		fmt.Fprintf(env.Stdout, "warnings:\n%s", runstate.WarningsText(st.Warnings))
	}
	if st.Best != nil {
		fmt.Fprintf(env.Stdout, "best: %.4f (%s)\n", *st.Best, st.BestID)
	}
	if line := progressLine(st.Progress); line != "" {
		fmt.Fprintln(env.Stdout, line)
	}
	if len(st.Settings) > 0 {
		fmt.Fprintf(env.Stdout, "settings: %s\n", strings.Join(st.Settings, " "))
	}
	for _, ch := range st.Changes {
		via := ""
		if ch.Via != "" {
			via = " (" + ch.Via + ")"
		}
		fmt.Fprintf(env.Stdout, "changed: %s %s -> %s at %s%s\n", ch.Setting, ch.From, ch.To, ch.At.Local().Format(time.DateTime), via)
	}
	if l := st.Controller; l != nil {
		fmt.Fprintf(env.Stdout, "controller: pid %d on %s since %s%s\n", l.PID, l.Host, l.Since.Local().Format(time.DateTime), st.goneText())
	}
	if c := st.Checkpoints; c != nil {
		fmt.Fprintln(env.Stdout, c.line())
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tHOST\tSLOTS\tBUSY\tSTATE\tEVALUATIONS\tFAILURES\tLAST SEEN")
	for _, w := range st.Workers {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%s\n", w.Worker, w.Host, w.Slots, w.Busy, w.State,
			w.Evaluations, w.Failures, ago(w.LastSeen))
	}
	tw.Flush()
	for _, p := range st.Problems {
		fmt.Fprintln(env.Stdout, "!", p)
	}
}

// goneText says how the controller that holds the lease is gone; empty
// for a live one.
func (st *runStatus) goneText() string {
	g := st.ControllerGone
	if g == nil {
		return ""
	}
	s := fmt.Sprintf("; stopped renewing its lease at %s (%s ago)", g.Since.Local().Format(time.TimeOnly),
		time.Since(g.Since).Round(100*time.Millisecond))
	if g.PIDGone {
		s += fmt.Sprintf("; pid %d is gone from this host", st.Controller.PID)
	}
	return s + "; counting the stored results"
}

// statusParts are the counted results by status, "3 ok". Stopped shows
// only where it can happen or did: a run without early stopping keeps the
// line it always had.
func (st *runStatus) statusParts() []string {
	var parts []string
	for _, s := range schema.Statuses {
		if s == schema.StatusStopped && st.EarlyStop == nil && st.ByStatus[s] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %s", st.ByStatus[s], s))
	}
	return parts
}

// state is the worker's state: quarantined when every slot is, else
// its heartbeat's state, naming the quarantined slots of a worker that
// has some.
func (w workerStatus) state() string {
	n := len(w.Quarantined)
	switch {
	case n > 0 && n >= w.Slots:
		return "quarantined"
	case n > 0:
		return fmt.Sprintf("%s, slots %s quarantined", w.heartbeatState(), intList(w.Quarantined))
	}
	return w.heartbeatState()
}

func intList(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// clipText shortens s to at most n bytes, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (w workerStatus) heartbeatState() string {
	switch {
	case w.Leaving:
		return "leaving"
	case w.Live:
		return "live"
	case w.LastSeen.IsZero():
		return "gone"
	}
	return "silent"
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

// checkpointStatus is a run's checkpoint store, as listed.
type checkpointStatus struct {
	Store string `json:"store"` // the object store bucket, or the directory
	Count int    `json:"count"`
	Bytes int64  `json:"bytes"`
	// Error says why the store could not be listed (a directory this
	// machine does not mount, a credential that may not list it).
	Error string `json:"error,omitempty"`
}

func readCheckpoints(ctx context.Context, js jetstream.JetStream, run string, cfg *schema.Checkpoints) *checkpointStatus {
	cs := &checkpointStatus{Store: "object store bucket " + schema.CheckpointBucket(run)}
	if cfg.Store == schema.CheckpointDir {
		cs.Store = filepath.Join(cfg.Dir, run)
	}
	s, err := checkpoint.Open(ctx, js, run, cfg, "")
	if err == nil {
		var u checkpoint.Usage
		u, err = checkpoint.Measure(ctx, s)
		cs.Count, cs.Bytes = u.Count, u.Bytes
	}
	if err != nil {
		cs.Error = err.Error()
	}
	return cs
}

func (c *checkpointStatus) line() string {
	if c.Error != "" {
		return fmt.Sprintf("checkpoints: %s: cannot list: %s", c.Store, c.Error)
	}
	return fmt.Sprintf("checkpoints: %d, %s, in %s", c.Count, byteSize(c.Bytes), c.Store)
}

// byteSize says n bytes in the largest unit that keeps a whole number.
func byteSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.size), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// progressLine says what saved progress did for the interrupted designs,
// naming only the figures that are not zero; "" when both are.
func progressLine(p *runstate.ProgressSummary) string {
	if p == nil {
		return ""
	}
	var parts []string
	if p.Resumed > 0 {
		parts = append(parts, fmt.Sprintf("%d %s resumed from saved progress (%.1f slot-s not repeated)", p.Resumed,
			map[bool]string{true: "design", false: "designs"}[p.Resumed == 1], p.ResumedSavedS))
	}
	if p.FromScratch > 0 {
		parts = append(parts, fmt.Sprintf("%d retrained from scratch (about %.1f slot-s)", p.FromScratch, p.FromScratchCostS))
	}
	if len(parts) == 0 {
		return ""
	}
	return "interrupted: " + strings.Join(parts, "; ")
}
