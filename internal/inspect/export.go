package inspect

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/internal/cmdbase"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/sirupsen/logrus"
)

// sourceFlags choose where export and replay read a run's history.
type sourceFlags struct {
	dir, nats, connect, run string
	trust                   string
	creds                   cmdbase.SiteCreds // --creds and --nkey
}

func (s *sourceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.trust, "trust", "", "with --dir: the trust root of a store in operator mode (evoq broker init, or the controller's --trust)")
	fs.StringVar(&s.dir, "dir", broker.DirDefault, "JetStream store directory of a stopped run (no broker may be using it)")
	fs.StringVar(&s.nats, "nats", "", "URL of a live broker (instead of --dir)")
	fs.StringVar(&s.connect, "connect", "", "connect file of a live controller (instead of --dir)")
	fs.StringVar(&s.run, "run", "", "run ID (default: the connect file's run, else the only run in the store)")
	s.creds.Register(fs)
}

// source checks that one source is named and returns it.
func (s *sourceFlags) source(fs *flag.FlagSet, stderr io.Writer) (history.Source, error) {
	src := history.Source{NATS: s.nats, ConnectFile: s.connect, Run: s.run}
	if err := cmdbase.CheckRunID("run", s.run); err != nil {
		return src, err
	}
	if err := s.siteCredential(fs, &src); err != nil {
		return src, err
	}
	if err := s.checkReaderFile(); err != nil {
		return src, err
	}
	if s.nats != "" && s.connect != "" {
		return src, cmdbase.UsageErr("--nats and --connect: give one or the other")
	}
	if cmdbase.IsSet(fs, "dir") && (s.nats != "" || s.connect != "") {
		return src, cmdbase.UsageErr("--dir and --nats or --connect: give one source")
	}
	if s.nats == "" && s.connect == "" {
		if s.dir == "" {
			return src, cmdbase.UsageErr("--dir: empty store directory")
		}
		src.Dir = s.dir
	}
	if s.trust != "" {
		if src.Dir == "" {
			return src, cmdbase.UsageErr("--trust: with --dir only (a connect file holds its own credential)")
		}
		t, err := broker.LoadTrust(s.trust)
		if err != nil {
			return src, cmdbase.UsageErr("--trust: %v", err)
		}
		src.Trust, src.Run = t, s.run
	}
	log := logrus.New()
	log.SetOutput(stderr)
	log.SetLevel(logrus.ErrorLevel)
	src.Logger = log
	return src, nil
}

// siteCredential reads --creds or --nkey, else $NATS_CREDS or $NATS_NKEY
// with --nats or $NATS_URL, into src: a site's NATS.
func (s *sourceFlags) siteCredential(fs *flag.FlagSet, src *history.Source) error {
	given := s.creds.Creds != "" || s.creds.Nkey != ""
	if given && s.connect != "" {
		return cmdbase.UsageErr("--creds or --nkey, and --connect: a connect file carries its own credential; give one or the other")
	}
	if s.connect != "" || (!given && s.nats == "" && (cmdbase.IsSet(fs, "dir") || os.Getenv("NATS_URL") == "")) {
		return nil
	}
	if s.nats == "" && !cmdbase.IsSet(fs, "dir") {
		s.nats = os.Getenv("NATS_URL")
		src.NATS = s.nats
	}
	if s.nats == "" {
		return cmdbase.UsageErr("--creds or --nkey: give the URL of the broker they are for with --nats (or $NATS_URL)")
	}
	if err := s.creds.Load(s.connect, false); err != nil {
		return err
	}
	src.Credential = s.creds.Credential
	return nil
}

// checkReaderFile refuses, at once, a connect file whose credential
// cannot read a run: a worker's, which the broker would refuse request by
// request.
func (s *sourceFlags) checkReaderFile() error {
	if s.connect == "" {
		return nil
	}
	cf, err := broker.ReadConnectFile(s.connect)
	if err != nil {
		return cmdbase.UsageErr("%v", err)
	}
	if cf.Role == broker.RoleWorker {
		return cmdbase.UsageErr("--connect %s holds a worker's credential, which may not read a run's results: give the reader's connect file the controller wrote beside it (%s), or the admin's", s.connect, cmdbase.ReaderFile(s.connect))
	}
	if cf.Trust != "" && s.run == "" && cf.Run == "" {
		return cmdbase.UsageErr("--connect %s is an admin's of a broker in operator mode, where each run is an account of its own: name the run with --run", s.connect)
	}
	return nil
}

// refusalHint says which credential to give when the broker refused the
// one given.
func (s *sourceFlags) refusalHint(err error) error {
	if !broker.AuthRefused(err) {
		return err
	}
	switch {
	case s.connect != "":
		return fmt.Errorf("%w: the broker refused the credential in --connect %s: give the reader's connect file the controller wrote beside its --connect-file (NAME-reader.json), or the admin's; a credential may also have expired or been revoked", err, s.connect)
	case s.creds.Credential != nil:
		return fmt.Errorf("%w: the broker refused the credential in --creds or --nkey (expired, revoked, or of another server or account?)", err)
	case broker.HasUserInfo(s.nats):
		return fmt.Errorf("%w: the broker refused the user and password (or token) in --nats: check them", err)
	}
	return fmt.Errorf("%w: the broker wants a credential: give --connect FILE (the reader's connect file the controller wrote), --creds FILE, or a user and password in --nats", err)
}

// open checks the source flags, opens the source and picks the run.
func (s *sourceFlags) open(ctx context.Context, fs *flag.FlagSet, stderr io.Writer) (*history.Reader, history.RunInfo, error) {
	src, err := s.source(fs, stderr)
	if err != nil {
		return nil, history.RunInfo{}, err
	}
	return s.openRun(ctx, src)
}

// openRun opens the source and picks the run.
func (s *sourceFlags) openRun(ctx context.Context, src history.Source) (*history.Reader, history.RunInfo, error) {
	r, err := history.Open(ctx, src)
	if err != nil {
		return nil, history.RunInfo{}, s.refusalHint(err)
	}
	ri, err := r.Pick(ctx, s.run)
	if err == nil && ri.Err != nil {
		err = fmt.Errorf("run %s: state does not decode: %w", ri.ID, ri.Err)
	}
	if err != nil {
		r.Close()
		return nil, history.RunInfo{}, err
	}
	return r, ri, nil
}

// exportCmd writes one row per stored result, or per stored intermediate
// report, of a run.
type exportCmd struct {
	env               cmdbase.Env
	src               sourceFlags
	format, out, what string
	warned            int
	verdicts          map[runstate.Verdict]int
}

// exportRow is one stored result that decoded, with controller.Tally's
// verdict on it.
type exportRow struct {
	seq     uint64
	res     *schema.Result
	verdict runstate.Verdict
	// front is nil for a run of one fitness; else whether the design is
	// on the front of the pool the whole stream folds into.
	front *bool
}

func (c *exportCmd) Run(ctx context.Context, args []string) error {
	fs := cmdbase.NewFlagSet("export", "Writes one row per stored result of a run, or with --what reports one per intermediate report,\n"+
		"in stream order, as CSV or JSON lines.", c.env.Stderr)
	c.src.register(fs)
	fs.StringVar(&c.format, "format", "csv", "output format: csv or jsonl")
	fs.StringVar(&c.out, "out", "", "output file (default: standard output)")
	fs.StringVar(&c.what, "what", "results", "what to write: results (one row per stored result) or reports (one per intermediate report, the learning curves)")
	if err := cmdbase.Parse(fs, args); err != nil {
		return err
	}
	if c.format != "csv" && c.format != "jsonl" {
		return cmdbase.UsageErr("--format %q: want csv or jsonl", c.format)
	}
	if c.what != "results" && c.what != "reports" {
		return cmdbase.UsageErr("--what %q: want results or reports", c.what)
	}
	r, ri, err := c.src.open(ctx, fs, c.env.Stderr)
	if err != nil {
		return err
	}
	defer r.Close()
	if c.what == "reports" {
		return c.exportReports(ctx, r, ri)
	}
	rows, err := c.read(ctx, r, ri)
	if err != nil {
		return err
	}
	err = c.output(func(w io.Writer) error {
		if c.format == "csv" {
			return writeCSV(w, ri.Run, rows)
		}
		return writeJSONL(w, rows)
	})
	if err != nil {
		return err
	}
	v := c.verdicts
	fmt.Fprintf(c.env.Stderr, "evoq export: run %s: %d rows, %d designs counted (%d retried, %d duplicate and %d foreign results not counted), %d malformed results skipped\n",
		ri.ID, len(rows), v[runstate.Counted], v[runstate.Retried], v[runstate.Duplicate], v[runstate.Foreign], c.warned)
	return nil
}

// read collects the run's results, each with its verdict; a malformed one
// has nothing to write and is skipped with a warning.
func (c *exportCmd) read(ctx context.Context, r *history.Reader, ri history.RunInfo) ([]exportRow, error) {
	var rows []exportRow
	fold, err := exportFold(ri)
	if err != nil {
		return nil, err
	}
	c.verdicts = map[runstate.Verdict]int{}
	err = r.Results(ctx, ri.ID, func(seq uint64, _ time.Time, res *schema.Result, err error) error {
		v := fold.Apply(res, err)
		c.verdicts[v]++
		if v == runstate.Malformed {
			c.warned++
			fmt.Fprintf(c.env.Stderr, "evoq export: warning: skipping malformed result at stream sequence %d: %v\n", seq, err)
			return nil
		}
		rows = append(rows, exportRow{seq: seq, res: res, verdict: v})
		return nil
	})
	if err != nil || !fold.Pool().Ranked() {
		return rows, err
	}
	front := map[string]bool{}
	for _, m := range fold.Pool().Front() {
		front[m.Design.ID] = true
	}
	for i := range rows {
		on := rows[i].verdict == runstate.Counted && front[rows[i].res.DesignID]
		rows[i].front = &on
	}
	return rows, nil
}

// exportFold is the fold the controller folds the run into: its verdicts
// are the tally's, and for a run of several objectives its pool's front
// is what the front column marks.
func exportFold(ri history.RunInfo) (*runstate.Fold, error) {
	tally := runstate.NewTally(ri.ID, ri.Budget, runstate.RulesOf(ri.Run))
	obj, err := runstate.ObjectivesOf(ri.Run)
	if err != nil || !obj.Pareto() {
		return runstate.NewFold(tally, 1, 1, runstate.ReplaceWorst), err
	}
	return runstate.NewFoldFor(tally, ri.Run.Init, ri.Run.Pool, runstate.Replace(ri.Run.Replace), obj, ri.Run.HVRef), nil
}

// output hands write --out or standard output, buffered.
func (c *exportCmd) output(write func(io.Writer) error) error {
	w := c.env.Stdout
	var f *os.File
	if c.out != "" {
		var err error
		if f, err = os.Create(c.out); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	err := write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && f != nil {
		err = f.Close()
	}
	if err != nil {
		return fmt.Errorf("write export: %w", err)
	}
	return nil
}

// fixedColumns are the export's columns before the parameters.
var fixedColumns = []string{"seq", "design_id", "counted", "verdict", "status", "fitness", "attempt", "worker", "host",
	"slot", "gpu", "gpu_uuid", "start", "stop", "duration_s", "origin", "parents", "error", "exit", "signal",
	"checkpoint_bytes", "checkpoint_error"}

func writeCSV(w io.Writer, run *schema.Run, rows []exportRow) error {
	params := paramColumns(run)
	metrics := metricColumns(rows)
	cw := csv.NewWriter(w)
	header := append([]string(nil), fixedColumns...)
	ranked := len(rows) > 0 && rows[0].front != nil
	if ranked {
		header = append(header, "front")
	}
	for _, p := range params {
		name := p
		if isFixed(p) {
			name = "param." + p
		}
		header = append(header, name)
	}
	for _, m := range metrics {
		header = append(header, "metric."+m)
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, row := range rows {
		rec := fixedValues(row)
		if ranked {
			rec = append(rec, strconv.FormatBool(*row.front))
		}
		for _, p := range params {
			rec = append(rec, cell(row.res.Design.Genome[p]))
		}
		for _, m := range metrics {
			rec = append(rec, cell(row.res.Metrics[m]))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func isFixed(name string) bool {
	for _, f := range fixedColumns {
		if f == name {
			return true
		}
	}
	return false
}

func fixedValues(row exportRow) []string {
	r := row.res
	parents := ""
	if len(r.Design.Parents) > 0 {
		parents = cell(r.Design.Parents)
	}
	fitness := ""
	if f := exportFitness(r); f != nil {
		fitness = strconv.FormatFloat(*f, 'g', -1, 64)
	}
	exit := "" // no process ended with the evaluation: not the same as 0
	if r.Exit != nil {
		exit = strconv.Itoa(*r.Exit)
	}
	ckpt := "" // none stored: not the same as an empty one
	if r.Checkpoint != nil {
		ckpt = strconv.FormatInt(r.Checkpoint.Size, 10)
	}
	return []string{strconv.FormatUint(row.seq, 10), r.DesignID, strconv.FormatBool(row.verdict == runstate.Counted), row.verdict.String(), string(r.Status),
		fitness, strconv.Itoa(r.Attempt), r.Worker, r.Host,
		strconv.Itoa(r.Slot), r.GPU, r.GPUUUID, r.Start.UTC().Format(time.RFC3339Nano), r.Stop.UTC().Format(time.RFC3339Nano),
		strconv.FormatFloat(r.Duration().Seconds(), 'f', -1, 64), string(r.Design.Origin), parents, r.Error, exit, r.Signal,
		ckpt, r.CheckpointError}
}

// exportFitness is the fitness export shows: a result's fitness only when
// it is ok or stopped (the last fitness the design reported before the
// run's early-stopping rule stopped it: a real score, of shorter
// training). The wire requires a fitness on every result and evoq fills it
// with InfeasibleFitness otherwise, a placeholder that would read as a
// real score in a spreadsheet or a plot; nil shows as an empty cell or
// null.
func exportFitness(r *schema.Result) *float64 {
	if r.Status != schema.StatusOK && r.Status != schema.StatusStopped {
		return nil
	}
	f := r.Fitness
	return &f
}

// paramColumns are the run's search-space parameters, or none when its
// space is not stored or does not parse.
func paramColumns(run *schema.Run) []string {
	if run == nil || len(run.SpaceYAML) == 0 {
		return nil
	}
	sp, err := space.Parse(run.SpaceYAML)
	if err != nil {
		return nil
	}
	return sp.Columns()
}

// metricColumns is the union of the metric names of the rows, sorted.
func metricColumns(rows []exportRow) []string {
	ms := make([]map[string]any, len(rows))
	for i, row := range rows {
		ms[i] = row.res.Metrics
	}
	return metricNames(ms)
}

// metricNames is the union of the keys of ms, sorted: the metric columns.
func metricNames(ms []map[string]any) []string {
	set := map[string]struct{}{}
	for _, m := range ms {
		for k := range m {
			set[k] = struct{}{}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// cell formats one value: scalars plainly, lists and maps as JSON.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// jsonlRow is one line of the JSON lines export: the result with its
// stream sequence, whether it counted and the verdict. Its Fitness,
// shallower than the result's own, replaces it in the output.
type jsonlRow struct {
	Seq     uint64   `json:"seq"`
	Counted bool     `json:"counted"`
	Verdict string   `json:"verdict"`
	Fitness *float64 `json:"fitness"`
	// Front, in a run of several objectives, says whether the design is
	// on the final pool's front.
	Front *bool `json:"front,omitempty"`
	*schema.Result
}

// writeJSONL writes each result as JSON with its stream sequence, whether
// it counted and the verdict.
func writeJSONL(w io.Writer, rows []exportRow) error {
	for _, row := range rows {
		b, err := json.Marshal(jsonlRow{Seq: row.seq, Counted: row.verdict == runstate.Counted, Verdict: row.verdict.String(), Fitness: exportFitness(row.res), Front: row.front, Result: row.res})
		if err != nil {
			return fmt.Errorf("result %s at stream sequence %d: %w", row.res.DesignID, row.seq, err)
		}
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}

// reportRow is one stored intermediate report that decoded.
type reportRow struct {
	seq uint64
	rep *schema.Report
}

// exportReports writes the run's intermediate reports, in stream order; a
// malformed one is skipped with a warning, as a malformed result is.
func (c *exportCmd) exportReports(ctx context.Context, r *history.Reader, ri history.RunInfo) error {
	var rows []reportRow
	err := broker.ReadReports(ctx, r.JS(), ri.ID, func(seq uint64, _ time.Time, rep *schema.Report, err error) error {
		if err != nil {
			c.warned++
			fmt.Fprintf(c.env.Stderr, "evoq export: warning: skipping malformed report at stream sequence %d: %v\n", seq, err)
			return nil
		}
		rows = append(rows, reportRow{seq: seq, rep: rep})
		return nil
	})
	if err != nil {
		return err
	}
	err = c.output(func(w io.Writer) error {
		if c.format == "csv" {
			return writeReportsCSV(w, rows)
		}
		return writeReportsJSONL(w, rows)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.env.Stderr, "evoq export: run %s: %d reports, %d malformed reports skipped\n", ri.ID, len(rows), c.warned)
	return nil
}

// reportColumns are the reports export's columns before the metrics.
// stream_seq, not seq as in the results export: a report's seq is its
// design's. last is "true" for an attempt's last report, else empty; one
// that repeats its step only marks the row before as the last.
var reportColumns = []string{"stream_seq", "time", "design_id", "seq", "retry", "attempt", "step", "fitness", "worker", "slot", "last"}

func lastCell(last bool) string {
	if last {
		return "true"
	}
	return ""
}

func writeReportsCSV(w io.Writer, rows []reportRow) error {
	ms := make([]map[string]any, len(rows))
	for i, row := range rows {
		ms[i] = row.rep.Metrics
	}
	metrics := metricNames(ms)
	cw := csv.NewWriter(w)
	header := append([]string(nil), reportColumns...)
	for _, m := range metrics {
		header = append(header, "metric."+m)
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, row := range rows {
		r := row.rep
		rec := []string{strconv.FormatUint(row.seq, 10), r.Time.UTC().Format(time.RFC3339Nano), r.DesignID,
			strconv.FormatUint(r.Seq, 10), strconv.Itoa(r.Retry), strconv.Itoa(r.Attempt), strconv.FormatInt(r.Step, 10),
			strconv.FormatFloat(r.Fitness, 'g', -1, 64), r.Worker, strconv.Itoa(r.Slot), lastCell(r.Last)}
		for _, m := range metrics {
			rec = append(rec, cell(r.Metrics[m]))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// reportLine is one line of the JSON lines export of reports: the report
// with its stream sequence.
type reportLine struct {
	StreamSeq uint64 `json:"stream_seq"`
	*schema.Report
}

func writeReportsJSONL(w io.Writer, rows []reportRow) error {
	for _, row := range rows {
		b, err := json.Marshal(reportLine{StreamSeq: row.seq, Report: row.rep})
		if err != nil {
			return fmt.Errorf("report of %s at stream sequence %d: %w", row.rep.DesignID, row.seq, err)
		}
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}
