package inspect

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/internal/cmdbase"
	"github.com/evoq/evoq/internal/report"
	"github.com/evoq/evoq/schema"
)

// reportCmd writes a run's report: one HTML page and its charts as PNGs.
type reportCmd struct {
	env cmdbase.Env
	src sourceFlags
	out string
	top int
}

func (c *reportCmd) Run(ctx context.Context, args []string) error {
	fs := cmdbase.NewFlagSet("report", "Writes one self-contained HTML page picturing a run (for a run of several objectives, the front and its\n"+
		"hypervolume against evaluations; best fitness against evaluations and time,\n"+
		"the learning curves of designs that reported, a per-slot Gantt chart coloured by status, utilization over time, status breakdown, top designs),\n"+
		"and each chart as a PNG beside it (report.html → report-gantt.png, ...).", c.env.Stderr)
	c.src.register(fs)
	fs.StringVar(&c.out, "out", "report.html", "the HTML file to write; the PNGs go beside it")
	fs.IntVar(&c.top, "top", report.TopDefault, "number of designs in the top designs table")
	if err := cmdbase.Parse(fs, args); err != nil {
		return err
	}
	if c.top < 1 {
		return cmdbase.UsageErr("--top %d: need at least 1", c.top)
	}
	if c.out == "" || strings.HasSuffix(c.out, string(os.PathSeparator)) {
		return cmdbase.UsageErr("--out %q: want a file name such as report.html", c.out)
	}
	if fi, err := os.Stat(filepath.Dir(c.out)); err != nil || !fi.IsDir() {
		return cmdbase.UsageErr("--out %s: directory %s does not exist", c.out, filepath.Dir(c.out))
	}
	r, ri, err := c.src.open(ctx, fs, c.env.Stderr)
	if err != nil {
		return err
	}
	defer r.Close()
	in, err := c.input(ctx, r, ri)
	if err != nil {
		return err
	}
	a := report.Analyze(in)
	files, err := report.Write(c.out, a, in.Generated)
	if err != nil {
		return err
	}
	if a.ObjectivesError != "" {
		fmt.Fprintf(c.env.Stderr, "evoq report: warning: the run's objectives do not read, drawn as for one fitness: %s\n", a.ObjectivesError)
	}
	front := ""
	if f := a.FrontFacts(); f != "" {
		front = "; " + f
	}
	fmt.Fprintf(c.env.Stderr, "evoq report: run %s: %d evaluations, %d slots%s; wrote %s and %d charts (%s)\n",
		ri.ID, a.Evaluations, a.Slots, front, files.HTML, len(files.PNGs), strings.Join(files.PNGs, ", "))
	return nil
}

// input reads what the report is drawn from: the run's stored results and
// intermediate reports, and its workers' heartbeats.
func (c *reportCmd) input(ctx context.Context, r *history.Reader, ri history.RunInfo) (report.Input, error) {
	in := report.Input{RunID: ri.ID, Run: ri.Run, Generated: time.Now(), Top: c.top}
	err := r.Results(ctx, ri.ID, func(seq uint64, _ time.Time, res *schema.Result, err error) error {
		if err != nil {
			in.Malformed++
			fmt.Fprintf(c.env.Stderr, "evoq report: warning: skipping malformed result at stream sequence %d: %v\n", seq, err)
			return nil
		}
		in.Results = append(in.Results, report.Entry{Seq: seq, Result: res})
		return nil
	})
	if err != nil {
		return in, err
	}
	if err := c.readReports(ctx, r, &in); err != nil {
		// The results make the report; a credential or broker that
		// cannot read the reports stream costs only the curves.
		fmt.Fprintf(c.env.Stderr, "evoq report: warning: intermediate reports not read, no learning curves drawn: %v\n", err)
		in.Reports, in.MalformedReports = nil, 0
	}
	ps, err := r.Presence(ctx, ri.ID)
	if err != nil {
		fmt.Fprintf(c.env.Stderr, "evoq report: warning: workers' heartbeats not read, slots that never evaluated a design are not shown: %v\n", err)
	}
	for _, p := range ps {
		in.Workers = append(in.Workers, report.Worker{ID: p.Worker, Host: p.Host, Slots: p.Slots, Started: p.Started, Heartbeat: p.Stored})
	}
	return in, nil
}

// readReports adds the run's intermediate reports to in; a store from
// before reports existed has none, and the report has no learning curves.
func (c *reportCmd) readReports(ctx context.Context, r *history.Reader, in *report.Input) error {
	return broker.ReadReports(ctx, r.JS(), in.RunID, func(seq uint64, _ time.Time, rep *schema.Report, err error) error {
		if err != nil {
			in.MalformedReports++
			fmt.Fprintf(c.env.Stderr, "evoq report: warning: skipping malformed report at stream sequence %d: %v\n", seq, err)
			return nil
		}
		in.Reports = append(in.Reports, report.ReportEntry{Seq: seq, Report: rep})
		return nil
	})
}
