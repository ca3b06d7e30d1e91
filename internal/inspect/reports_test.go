package inspect

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/internal/report"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
)

// curvesRun is the run of the tests of reports: an ASHA run whose
// designs report their fitness at every step.
const curvesRun = "curves"

// curvesBudget designs are more than report.CurvesMax, so the chart
// samples them.
const curvesBudget = 400

var curvesRule = &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 27, Eta: 3}

// storedReport is a report as stored, with its stream sequence.
type storedReport struct {
	seq uint64
	rep *schema.Report
}

// curvesBundle is a broker holding curvesRun: its record, its results
// and its reports, as the workers and the controller would store them.
type curvesBundle struct {
	b         *testutil.Broker
	ctx       context.Context
	src       []string // the flags that read the run from b
	reports   []storedReport
	malformed int // stored reports that do not decode
	stopped   int // designs whose counted result is stopped
	completed int // designs counted ok
}

func setupCurves(t *testing.T) *curvesBundle {
	t.Helper()
	b := testutil.StartBroker(t)
	cb := &curvesBundle{b: b, ctx: testutil.Context(t, 60*time.Second), src: []string{"--nats", b.ClientURL(), "--run", curvesRun}}
	rec := &schema.Run{Run: curvesRun, Phase: schema.PhaseDone, Budget: curvesBudget, Space: "test", Seed: 1,
		ErrorRetries: new(1), EarlyStop: curvesRule, Created: time.Now(), Updated: time.Now()}
	data, err := schema.EncodeRun(rec)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := b.JS.KeyValue(cb.ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(cb.ctx, curvesRun, data); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for seq := uint64(1); seq <= curvesBudget; seq++ {
		cb.design(t, seq, rng.Float64())
	}
	return cb
}

// design stores design seq of quality q: its reports up to the rung it
// stops at (q in the top third goes on at each rung), then its result.
// Design 7's first attempt fails at step 2 and is retried: its reports
// are stored, and only its retry's curve counts.
func (cb *curvesBundle) design(t *testing.T, seq uint64, q float64) {
	t.Helper()
	reach, status := curvesRule.MaxStep, schema.StatusOK
	for i, r := range curvesRule.Rungs(curvesRule.MaxStep) {
		if q < 1-math.Pow(1.0/3, float64(i+1)) {
			reach, status = r, schema.StatusStopped
			break
		}
	}
	retry := 0
	if seq == 7 {
		cb.attempt(t, seq, 0, 2, q)
		cb.result(t, seq, 0, schema.StatusError, 2, 0)
		retry = 1
	}
	fit := cb.attempt(t, seq, retry, reach, q)
	if seq == 11 {
		cb.raw(t, []byte("not a report"))
	}
	cb.result(t, seq, retry, status, reach, fit)
	if status == schema.StatusStopped {
		cb.stopped++
	} else {
		cb.completed++
	}
}

// attempt stores the reports of one attempt up to step reach and returns
// the last fitness.
func (cb *curvesBundle) attempt(t *testing.T, seq uint64, retry int, reach int64, q float64) float64 {
	t.Helper()
	fit := 0.0
	for step := int64(1); step <= reach; step++ {
		fit = q * (1 - math.Exp(-float64(step)/8))
		r := &schema.Report{Run: curvesRun, DesignID: schema.DesignID(curvesRun, seq), Seq: seq, Retry: retry, Attempt: 1,
			Step: step, Fitness: fit, Metrics: map[string]any{"loss": 1 - fit, "epoch_s": int64(step)},
			Worker: "w" + strconv.Itoa(retry+1), Slot: int(seq % 4), Time: time.Now().UTC()}
		data, err := schema.EncodeReport(r)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := cb.b.JS.Publish(cb.ctx, schema.ReportSubject(curvesRun), data)
		if err != nil {
			t.Fatalf("store a report: %v", err)
		}
		// The stored report is what decoding gives back: metrics as the
		// wire normalizes them.
		back, err := schema.DecodeReport(data)
		if err != nil {
			t.Fatal(err)
		}
		cb.reports = append(cb.reports, storedReport{seq: ack.Sequence, rep: back})
	}
	return fit
}

func (cb *curvesBundle) raw(t *testing.T, data []byte) {
	t.Helper()
	if _, err := cb.b.JS.Publish(cb.ctx, schema.ReportSubject(curvesRun), data); err != nil {
		t.Fatal(err)
	}
	cb.malformed++
}

// result stores design seq's result, of its attempt that reached step
// reach.
func (cb *curvesBundle) result(t *testing.T, seq uint64, retry int, status schema.Status, reach int64, fit float64) {
	t.Helper()
	now := time.Now()
	d := schema.Design{Run: curvesRun, ID: schema.DesignID(curvesRun, seq), Seq: seq, Retry: retry,
		Genome: map[string]any{"x": int64(seq)}, Origin: schema.OriginRandom, Created: now}
	r := &schema.Result{Run: curvesRun, DesignID: d.ID, Design: d, Status: status, Fitness: fit,
		Worker: "w" + strconv.Itoa(retry+1), Host: "node", Slot: int(seq % 4), Attempt: 1, Start: now, Stop: now.Add(time.Millisecond)}
	if status == schema.StatusError {
		r.Fitness, r.Error = schema.InfeasibleFitness, "CUDA error"
	}
	if status == schema.StatusStopped {
		r.Metrics, r.Error = map[string]any{"stopped_at": reach}, "below the top 1/3 at its rung"
	}
	data, err := schema.EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.b.JS.Publish(cb.ctx, schema.ResultSubject(curvesRun), data); err != nil {
		t.Fatal(err)
	}
}

// evoq report on a run with reports draws the learning curves: a PNG
// beside the page and a figure in it, capped at report.CurvesMax curves
// with the caption saying how many, one × per stopped design drawn, and
// only the counted attempt of the retried design.
func TestReportDrawsLearningCurves(t *testing.T) {
	t.Parallel()
	cb := setupCurves(t)
	out := filepath.Join(t.TempDir(), "r.html")
	var stderr bytes.Buffer
	if code := Main(cb.ctx, append([]string{"report", "--out", out}, cb.src...), &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("evoq report: exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "skipping malformed report at stream sequence") || !strings.Contains(stderr.String(), "6 charts") {
		t.Errorf("evoq report's messages lack the malformed report's warning or the six charts:\n%s", stderr.String())
	}
	img, err := os.ReadFile(filepath.Join(filepath.Dir(out), "r-curves.png"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(img)); err != nil {
		t.Fatalf("r-curves.png: %v", err)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `<figure id="curves">`) || !strings.Contains(string(page), "300 of the 400 curves are drawn") {
		t.Errorf("page lacks the curves figure or its caption")
	}

	r := history.FromJS(cb.b.JS)
	ri, err := r.Pick(cb.ctx, curvesRun)
	if err != nil {
		t.Fatal(err)
	}
	in, err := (&reportCmd{env: Env{Stderr: &bytes.Buffer{}}, top: report.TopDefault}).input(cb.ctx, r, ri)
	if err != nil {
		t.Fatal(err)
	}
	a := report.Analyze(in)
	f := a.Curves
	if f.Designs != curvesBudget || f.Stopped != cb.stopped || f.Completed != cb.completed || f.Other != 0 {
		t.Errorf("curves %+v; want %d designs, %d stopped, %d completed, none other (design 7's failed attempt is not its curve)",
			f, curvesBudget, cb.stopped, cb.completed)
	}
	if f.Drawn != report.CurvesMax || f.Marks < 50 || f.Marks > f.Drawn-min(f.Completed, report.CurvesMax/2) {
		t.Errorf("%d curves drawn with %d × marks; want %d, the completed first and the marks on the stopped among them", f.Drawn, f.Marks, report.CurvesMax)
	}
	if a.Reports != len(cb.reports) || a.MalformedReports != cb.malformed || a.Counts[schema.StatusStopped] != cb.stopped {
		t.Errorf("%d reports, %d malformed, %d stopped; want %d, %d, %d", a.Reports, a.MalformedReports, a.Counts[schema.StatusStopped],
			len(cb.reports), cb.malformed, cb.stopped)
	}
}

// A store from before reports existed has no reports stream: the report
// has no curves chart, and no warning about it.
func TestReportWithoutReportsStream(t *testing.T) {
	t.Parallel()
	cb := setupCurves(t)
	if err := cb.b.JS.DeleteStream(cb.ctx, schema.ReportStream); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "r.html")
	var stderr bytes.Buffer
	if code := Main(cb.ctx, append([]string{"report", "--out", out}, cb.src...), &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("evoq report: exit %d\n%s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(out), "r-curves.png")); !os.IsNotExist(err) {
		t.Errorf("a curves chart without reports: %v", err)
	}
	if strings.Contains(stderr.String(), "warning") || !strings.Contains(stderr.String(), "5 charts") {
		t.Errorf("evoq report without a reports stream:\n%s", stderr.String())
	}
}

// evoq export --what reports writes one row per stored report that
// decodes, in stream order, with its fields and metrics, as CSV and JSON
// lines; a bad --what names the flag.
func TestExportReports(t *testing.T) {
	t.Parallel()
	cb := setupCurves(t)
	t.Run("csv", func(t *testing.T) {
		out := cliOut(t, 0, append([]string{"export", "--what", "reports"}, cb.src...)...)
		recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"stream_seq", "time", "design_id", "seq", "retry", "attempt", "step", "fitness", "worker", "slot", "last", "metric.epoch_s", "metric.loss"}
		if strings.Join(recs[0], ",") != strings.Join(want, ",") {
			t.Fatalf("header %q, want %q", recs[0], want)
		}
		if len(recs)-1 != len(cb.reports) {
			t.Fatalf("%d rows, want the %d stored reports that decode", len(recs)-1, len(cb.reports))
		}
		for i, sr := range cb.reports {
			r := sr.rep
			wantRow := []string{strconv.FormatUint(sr.seq, 10), r.Time.UTC().Format(time.RFC3339Nano), r.DesignID, strconv.FormatUint(r.Seq, 10),
				strconv.Itoa(r.Retry), "1", strconv.FormatInt(r.Step, 10), strconv.FormatFloat(r.Fitness, 'g', -1, 64), r.Worker,
				strconv.Itoa(r.Slot), lastCell(r.Last), strconv.FormatInt(r.Step, 10), strconv.FormatFloat(1-r.Fitness, 'g', -1, 64)}
			if got := recs[i+1]; strings.Join(got, ",") != strings.Join(wantRow, ",") {
				t.Fatalf("row %d\n got %q\nwant %q", i+1, got, wantRow)
			}
		}
	})
	t.Run("jsonl", func(t *testing.T) {
		out := cliOut(t, 0, append([]string{"export", "--what", "reports", "--format", "jsonl"}, cb.src...)...)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != len(cb.reports) {
			t.Fatalf("%d lines, want %d", len(lines), len(cb.reports))
		}
		for i, l := range lines {
			var got struct {
				StreamSeq uint64 `json:"stream_seq"`
				schema.Report
			}
			if err := json.Unmarshal([]byte(l), &got); err != nil {
				t.Fatalf("line %d: %v\n%s", i+1, err, l)
			}
			want := cb.reports[i]
			if got.StreamSeq != want.seq || got.DesignID != want.rep.DesignID || got.Retry != want.rep.Retry || got.Step != want.rep.Step ||
				got.Fitness != want.rep.Fitness || !got.Time.Equal(want.rep.Time) || got.Metrics["loss"] != want.rep.Metrics["loss"] {
				t.Fatalf("line %d: %s\nwant stream sequence %d and %+v", i+1, l, want.seq, *want.rep)
			}
		}
	})
	t.Run("bad what", func(t *testing.T) {
		var stderr bytes.Buffer
		if code := Main(cb.ctx, append([]string{"export", "--what", "curves"}, cb.src...), &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("exit %d, want 2", code)
		}
		if !strings.Contains(stderr.String(), `--what "curves": want results or reports`) {
			t.Errorf("stderr %q does not name the flag", stderr.String())
		}
	})
	t.Run("results keep a stopped fitness", func(t *testing.T) {
		out := cliOut(t, 0, append([]string{"export", "--format", "jsonl"}, cb.src...)...)
		n := 0
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var row struct {
				Status  schema.Status `json:"status"`
				Fitness *float64      `json:"fitness"`
			}
			if err := json.Unmarshal([]byte(l), &row); err != nil {
				t.Fatal(err)
			}
			if row.Status == schema.StatusStopped {
				n++
				if row.Fitness == nil || *row.Fitness <= 0 {
					t.Errorf("stopped result with fitness %v, want its last reported one: %s", row.Fitness, l)
				}
			}
		}
		if n != cb.stopped {
			t.Errorf("%d stopped results exported, want %d", n, cb.stopped)
		}
	})
}
