package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/internal/cmdbase"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// errIntegrity means the replayed history failed an integrity check.
var errIntegrity = errors.New("integrity check failed")

// replayListMax bounds the sequence numbers listed in the text report.
const replayListMax = 20

// replayCmd rebuilds the controller's fold from a run's results stream and
// checks the stream's integrity.
type replayCmd struct {
	env     cmdbase.Env
	src     sourceFlags
	until   string
	jsonOut bool
	init    int
	pool    int
	replace string
}

// replayMember is one pool member in the report.
type replayMember struct {
	DesignID string         `json:"design_id"`
	Fitness  float64        `json:"fitness"`
	Origin   schema.Origin  `json:"origin"`
	Genome   map[string]any `json:"genome"`
}

// replayReport is what replay prints; its JSON form is the --json output.
type replayReport struct {
	Run         string         `json:"run"`
	Phase       schema.Phase   `json:"phase"`
	Budget      int            `json:"budget"`
	UntilSeq    uint64         `json:"until_seq,omitempty"`
	UntilTime   *time.Time     `json:"until_time,omitempty"`
	Results     int            `json:"results"`     // stored results read
	Evaluations int            `json:"evaluations"` // designs with a terminal result
	Duplicates  int            `json:"duplicates"`
	Retried     int            `json:"retried"`     // failed attempts retried, not counted (see controller.Tally)
	Quarantined []string       `json:"quarantined"` // slots the results leave quarantined, as worker/slot
	Counts      map[string]int `json:"counts"`
	LastSeq     uint64         `json:"last_seq"`
	LastTime    *time.Time     `json:"last_time,omitempty"`
	MaxDesign   uint64         `json:"max_design_seq"`
	Missing     []uint64       `json:"missing"`   // design seqs below the highest without a result
	InFlight    bool           `json:"in_flight"` // missing ones may still be evaluating
	Malformed   []uint64       `json:"malformed"` // stream sequences that did not decode
	Foreign     []uint64       `json:"foreign"`   // stream sequences of results for designs not the run's: not counted, no integrity problem
	OutOfOrder  []uint64       `json:"out_of_order"`
	// SlotsUsed, UtilSteady and IdleBeforeFirst are the run's figures as
	// its controller's summary has them: they come from the counted
	// results alone (controller.Stats).
	SlotsUsed       int            `json:"slots_used"`
	UtilSteady      float64        `json:"util_steady"`
	IdleBeforeFirst float64        `json:"idle_before_first"`
	PoolDigest      string         `json:"pool_digest"`
	Pool            []replayMember `json:"pool"`
	Integrity       string         `json:"integrity"` // ok or failed
	Problems        []string       `json:"problems"`
	// FailFast is the fail-fast check's verdict as the run's controller
	// reaches it (off, judging, passed or failed), and Failure its figures
	// when failed.
	FailFast string          `json:"fail_fast"`
	Failure  *schema.Failure `json:"failure,omitempty"`
	// StopRule is the run's target and plateau rule; StopReason what it
	// decided from the results (target or plateau), StopAt after how many
	// counted results; "" while it has not ended the run.
	StopRule   string            `json:"stop_rule,omitempty"`
	StopReason schema.StopReason `json:"stop_reason,omitempty"`
	StopAt     int               `json:"stop_at,omitempty"`
	// EarlyStop is what the run's early-stopping rule decided, rebuilt
	// from its reports stream (the whole stream: --until bounds results);
	// nil for a run without a rule.
	EarlyStop *runstate.EarlyStopSummary `json:"early_stop,omitempty"`
	// Pareto is the front of a run of several objectives, as its
	// controller's summary has it; nil for a run of one fitness.
	*runstate.Pareto
	fold     *runstate.Fold
	space    string
	check    *runstate.FailFast
	recorded *schema.Failure // the run's recorded fail-fast verdict
}

func (c *replayCmd) Run(ctx context.Context, args []string) error {
	fs := cmdbase.NewFlagSet("replay", "Rebuilds the controller's pool from a run's results stream, up to --until, and checks the stream's integrity.\n"+
		"--init, --pool and --replace default to the run's recorded values; compare the pool_digest of the\n"+
		"controller's progress lines or summary with the one printed here.", c.env.Stderr)
	c.src.register(fs)
	fs.StringVar(&c.until, "until", "", "replay up to this stream sequence number, or this time (RFC3339)")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object")
	fs.IntVar(&c.init, "init", runstate.InitDefault, "the run's --init (default: recorded with the run)")
	fs.IntVar(&c.pool, "pool", runstate.PoolDefault, "the run's --pool (default: recorded with the run)")
	fs.StringVar(&c.replace, "replace", string(runstate.ReplaceDefault), "the run's --replace, worst or oldest (default: recorded with the run)")
	if err := cmdbase.Parse(fs, args); err != nil {
		return err
	}
	replace, untilSeq, untilTime, err := c.validate()
	if err != nil {
		return err
	}
	r, ri, err := c.src.open(ctx, fs, c.env.Stderr)
	if err != nil {
		return err
	}
	defer r.Close()
	if replace, err = c.fromRun(fs, ri.Run, replace); err != nil {
		return err
	}
	obj, err := runstate.ObjectivesOf(ri.Run)
	if err != nil {
		return err
	}
	var ref []float64
	var space string
	if ri.Run != nil {
		ref = ri.Run.HVRef
		space = ri.Run.Space
	}
	rep := &replayReport{Run: ri.ID, Phase: ri.Phase, Budget: ri.Budget, UntilSeq: untilSeq, UntilTime: untilTime,
		Counts: map[string]int{}, fold: runstate.NewFoldFor(runstate.NewTally(ri.ID, ri.Budget, runstate.RulesOf(ri.Run)), c.init, c.pool, replace, obj, ref),
		check: failFastOf(ri.Run), space: space}
	rep.fold.SetStopRule(runstate.StopRuleOf(ri.Run))
	if ri.Run != nil {
		rep.fold.SetSelect(ri.Run.EarlyStop)
		rep.recorded = ri.Run.Failure
	}
	if err := r.Results(ctx, ri.ID, rep.apply); err != nil {
		return err
	}
	if err := rep.rungs(ctx, r, ri); err != nil {
		return err
	}
	rep.finish()
	if err := rep.print(c.env.Stdout, c.jsonOut); err != nil {
		return err
	}
	if rep.Integrity != "ok" {
		return fmt.Errorf("%w: %s", errIntegrity, strings.Join(rep.Problems, "; "))
	}
	return nil
}

// fromRun takes --init, --pool and --replace from the run's state where
// they were not given, and warns where given ones differ from it: the pool
// rebuilt then is not the run's.
func (c *replayCmd) fromRun(fs *flag.FlagSet, run *schema.Run, replace runstate.Replace) (runstate.Replace, error) {
	if run == nil || run.Init == 0 {
		if !cmdbase.IsSet(fs, "init") || !cmdbase.IsSet(fs, "pool") || !cmdbase.IsSet(fs, "replace") {
			fmt.Fprintf(c.env.Stderr, "warning: run %s does not record --init, --pool and --replace; replaying with --init %d --pool %d --replace %s\n",
				run.Run, c.init, c.pool, replace)
		}
		return replace, nil
	}
	differ := func(name string, given, recorded any) {
		if given != recorded {
			fmt.Fprintf(c.env.Stderr, "warning: --%s %v differs from the run's %v: the rebuilt pool is not the run's\n", name, given, recorded)
		}
	}
	if cmdbase.IsSet(fs, "init") {
		differ("init", c.init, run.Init)
	} else {
		c.init = run.Init
	}
	if cmdbase.IsSet(fs, "pool") {
		differ("pool", c.pool, run.Pool)
	} else {
		c.pool = run.Pool
	}
	if cmdbase.IsSet(fs, "replace") {
		differ("replace", string(replace), run.Replace)
		return replace, nil
	}
	r, err := runstate.ParseReplace(run.Replace)
	if err != nil {
		return "", fmt.Errorf("run %s: recorded replace policy: %w", run.Run, err)
	}
	return r, nil
}

// failFastOf is the fail-fast check as the run's record sets it: the
// window and the number of attempts its controller judges. A run recorded
// before the check was kept had none.
func failFastOf(run *schema.Run) *runstate.FailFast {
	if run == nil {
		return runstate.NewFailFast(0, 0)
	}
	return runstate.NewFailFast(run.FailFast, run.FailFastFrom)
}

// validate checks the flags and parses --replace and --until.
func (c *replayCmd) validate() (runstate.Replace, uint64, *time.Time, error) {
	if c.init < 1 {
		return "", 0, nil, cmdbase.UsageErr("--init %d: need at least 1", c.init)
	}
	if c.pool < 1 {
		return "", 0, nil, cmdbase.UsageErr("--pool %d: need at least 1", c.pool)
	}
	replace, err := runstate.ParseReplace(c.replace)
	if err != nil {
		return "", 0, nil, cmdbase.UsageErr("%v", err)
	}
	if c.until == "" {
		return replace, 0, nil, nil
	}
	if n, err := strconv.ParseUint(c.until, 10, 64); err == nil && n > 0 {
		return replace, n, nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, c.until)
	if err != nil {
		return "", 0, nil, cmdbase.UsageErr("--until %q: want a stream sequence number (from 1) or an RFC3339 time", c.until)
	}
	return replace, 0, &t, nil
}

// apply folds one stored result in, up to --until.
func (rep *replayReport) apply(seq uint64, t time.Time, res *schema.Result, err error) error {
	if (rep.UntilSeq > 0 && seq > rep.UntilSeq) || (rep.UntilTime != nil && t.After(*rep.UntilTime)) {
		return history.ErrStop
	}
	rep.Results++
	if seq <= rep.LastSeq {
		rep.OutOfOrder = append(rep.OutOfOrder, seq)
	}
	rep.LastSeq, rep.LastTime = seq, &t
	v := rep.fold.Apply(res, err)
	rep.check.Observe(seq, res, v, rep.fold.Terminal() >= rep.Budget)
	switch v {
	case runstate.Malformed:
		rep.Malformed = append(rep.Malformed, seq)
	case runstate.Duplicate:
		rep.Duplicates++
	case runstate.Foreign:
		rep.Foreign = append(rep.Foreign, seq)
	}
	return nil
}

// rungs rebuilds the early-stopping rule's decisions from the run's
// reports, in stream order, as its controller does.
func (rep *replayReport) rungs(ctx context.Context, r *history.Reader, ri history.RunInfo) error {
	if ri.Run == nil || ri.Run.EarlyStop == nil {
		return nil
	}
	g := runstate.NewRungs(ri.ID, ri.Run.EarlyStop)
	err := broker.ReadReports(ctx, r.JS(), ri.ID, func(_ uint64, _ time.Time, rp *schema.Report, err error) error {
		if err == nil {
			g.Apply(rp)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read reports: %w", err)
	}
	rep.EarlyStop = runstate.Summarize(g)
	return nil
}

// finish fills in the figures from the fold and gives the verdict.
func (rep *replayReport) finish() {
	f := rep.fold
	rep.Evaluations, rep.MaxDesign, rep.PoolDigest = f.Terminal(), f.MaxSeq(), f.Pool().Digest()
	rep.Retried, rep.Quarantined = f.Tally().Retries(), []string{}
	rep.SlotsUsed, rep.UtilSteady, rep.IdleBeforeFirst = runstate.SteadyFigures(f.Stats())
	for _, s := range f.Tally().Quarantined() {
		rep.Quarantined = append(rep.Quarantined, fmt.Sprintf("%s/%d", s.Worker, s.Slot))
	}
	for _, s := range schema.Statuses {
		rep.Counts[string(s)] = f.Count(s)
	}
	for s := uint64(1); s <= f.MaxSeq(); s++ {
		if !f.Has(s) {
			rep.Missing = append(rep.Missing, s)
		}
	}
	rep.Pareto = runstate.ParetoOf(f, rep.space)
	if r := f.StopRule(); r.On() {
		rep.StopRule = runstate.StopRuleText(r)
		rep.StopReason, rep.StopAt = f.Stop()
	}
	members := append([]runstate.Member(nil), f.Pool().Members()...)
	sort.SliceStable(members, func(i, j int) bool { return members[i].Fitness > members[j].Fitness })
	for _, m := range members {
		rep.Pool = append(rep.Pool, replayMember{DesignID: m.Design.ID, Fitness: m.Fitness, Origin: m.Design.Origin, Genome: m.Design.Genome})
	}
	// Designs are evaluated out of order: before the run is done, or when
	// replaying part of it, a gap may be a design still being evaluated.
	rep.InFlight = rep.Phase != schema.PhaseDone || rep.UntilSeq > 0 || rep.UntilTime != nil
	// Whether the run failed is its controller's verdict, recorded: it
	// waited for every live slot to fail, which no stream holds.
	if f := rep.recorded; f != nil && rep.LastSeq >= f.StreamSeq {
		rep.Failure = f
	}
	rep.FailFast = failFastVerdict(rep.check, rep.Failure)
	if rep.Failure == nil && rep.check.Held() != nil {
		rep.FailFast = fmt.Sprintf("held: the first %d attempts failed; the controller stops the run once every live slot has failed too", rep.check.Held().Attempts)
	}
	rep.verdict()
}

// failFastVerdict names the state of a fail-fast check.
func failFastVerdict(check *runstate.FailFast, f *schema.Failure) string {
	failed, of, done := check.Pending()
	switch {
	case f != nil:
		return "failed"
	case of == 0:
		return "off"
	case done:
		return "passed"
	}
	return fmt.Sprintf("judging: %d of the first %d attempts failed so far", failed, of)
}

func (rep *replayReport) verdict() {
	if n := len(rep.Malformed); n > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d results do not decode (stream sequences %s)", n, seqList(rep.Malformed)))
	}
	if n := len(rep.OutOfOrder); n > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d stream sequence numbers do not increase (%s)", n, seqList(rep.OutOfOrder)))
	}
	if n := len(rep.Missing); n > 0 && !rep.InFlight {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d designs below %d have no result (design seqs %s)", n, rep.MaxDesign, seqList(rep.Missing)))
	}
	rep.Integrity = "ok"
	if len(rep.Problems) > 0 {
		rep.Integrity = "failed"
	}
	if rep.Problems == nil {
		rep.Problems = []string{}
	}
	for _, p := range []*[]uint64{&rep.Missing, &rep.Malformed, &rep.OutOfOrder, &rep.Foreign} {
		if *p == nil {
			*p = []uint64{}
		}
	}
}

// seqList lists up to replayListMax numbers.
func seqList(seqs []uint64) string {
	var b strings.Builder
	for i, s := range seqs {
		if i == replayListMax {
			fmt.Fprintf(&b, ", … %d more", len(seqs)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(s, 10))
	}
	return b.String()
}

func (rep *replayReport) print(w io.Writer, jsonOut bool) error {
	if jsonOut {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	upTo := "the whole stream"
	if rep.LastTime != nil {
		upTo = fmt.Sprintf("up to stream sequence %d (%s)", rep.LastSeq, rep.LastTime.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "run %s (%s, budget %d): %d results read, %s\n", rep.Run, rep.Phase, rep.Budget, rep.Results, upTo)
	stopped := ""
	if n := rep.Counts["stopped"]; n > 0 || rep.EarlyStop != nil {
		stopped = fmt.Sprintf(", %d stopped", n)
	}
	fmt.Fprintf(w, "evaluations: %d (%d ok, %d infeasible, %d error, %d timeout, %d lost%s); %d retried, %d duplicate and %d foreign results not counted\n",
		rep.Evaluations, rep.Counts["ok"], rep.Counts["infeasible"], rep.Counts["error"], rep.Counts["timeout"], rep.Counts["lost"], stopped, rep.Retried, rep.Duplicates, len(rep.Foreign))
	if len(rep.Quarantined) > 0 {
		fmt.Fprintf(w, "quarantined slots (worker/slot): %s\n", strings.Join(rep.Quarantined, " "))
	}
	if len(rep.Foreign) > 0 {
		fmt.Fprintf(w, "foreign results (designs not the run's, or beyond its budget) at stream sequences %s\n", seqList(rep.Foreign))
	}
	if f := rep.Failure; f != nil {
		fmt.Fprintf(w, "fail-fast: failed at stream sequence %d: the first %d attempts all failed, %d of them with %q\n",
			f.StreamSeq, f.Attempts, f.Count, f.Error)
	} else {
		fmt.Fprintf(w, "fail-fast: %s\n", rep.FailFast)
	}
	if rep.StopRule != "" {
		verdict := "not met"
		if rep.StopReason != "" {
			verdict = fmt.Sprintf("%s, after %d counted results", rep.StopReason, rep.StopAt)
		}
		fmt.Fprintf(w, "stop rule (%s): %s\n", rep.StopRule, verdict)
	}
	if e := rep.EarlyStop; e != nil {
		fmt.Fprintf(w, "early stopping: %s; %d reports, %d stops, rungs digest %s\n", e.Rule, e.Reports, e.Stops, e.Digest)
		for _, g := range e.Rungs {
			bracket := ""
			if g.Bracket > 0 {
				bracket = fmt.Sprintf(" of bracket %d", g.Bracket)
			}
			fmt.Fprintf(w, "  rung %-6d%s %6d designs, %6d stopped, median %.6g, best %.6g\n", g.Step, bracket, g.Reports, g.Stopped, g.Median, g.Best)
		}
	}
	if p := rep.Pareto; p != nil {
		hv := "not known yet"
		if p.Hypervolume != nil {
			hv = fmt.Sprintf("%.6g from %v", *p.Hypervolume, p.HVRef)
		}
		fmt.Fprintf(w, "front: %d designs, digest %s; hypervolume %s\n", len(p.Front), p.FrontDigest, hv)
	}
	fmt.Fprintf(w, "slots used: %d; util_steady %g, idle_before_first %g\n", rep.SlotsUsed, rep.UtilSteady, rep.IdleBeforeFirst)
	fmt.Fprintf(w, "pool: %d members, digest %s\n", len(rep.Pool), rep.PoolDigest)
	for _, m := range rep.Pool {
		g, _ := json.Marshal(m.Genome)
		fmt.Fprintf(w, "  %-24s %12.6g  %s\n", m.DesignID, m.Fitness, g)
	}
	if len(rep.Missing) > 0 && rep.InFlight {
		fmt.Fprintf(w, "in flight at that point (no result yet): design seqs %s\n", seqList(rep.Missing))
	}
	if rep.Integrity == "ok" {
		fmt.Fprintln(w, "integrity: ok")
		return nil
	}
	fmt.Fprintln(w, "integrity: FAILED")
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
	return nil
}
