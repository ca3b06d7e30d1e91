package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestReportLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line     string
		isReport bool
		wantErr  string
		want     Progress
	}{
		{`{"report": {"step": 3, "fitness": 0.71, "metrics": {"loss": 0.5}}}`, true, "",
			Progress{Step: 3, Fitness: 0.71, Metrics: map[string]any{"loss": 0.5}}},
		{`  {"report":{"step":0,"fitness":1}}  `, true, "", Progress{Step: 0, Fitness: 1}},
		{`{"report": {"step": 9, "fitness": 0.8, "last": true}}`, true, "", Progress{Step: 9, Fitness: 0.8, Last: true}},
		{`{"report": {"step": 9, "fitness": 0.8, "last": "yes"}}`, true, "not valid JSON", Progress{}},
		{`{"report": {"step": 1.5, "fitness": 0.7}}`, true, "not an integer", Progress{}},
		{`{"report": {"step": 2}}`, true, `no "fitness"`, Progress{}},
		{`{"report": {"step": 2, "fitness": NaN}}`, true, "not valid JSON", Progress{}},
		{`{"fitness": 0.9, "metrics": {"report": 1}}`, false, "", Progress{}},
		{`{"fitness": 0.9, "report": {"step": 1, "fitness": 0.1}}`, false, "", Progress{}},
		{`a log line mentioning "report"`, false, "", Progress{}},
		{`{"fitness": NaN, "note": "report"}`, false, "", Progress{}},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			t.Parallel()
			p, isReport, err := reportLine(tt.line)
			if isReport != tt.isReport {
				t.Fatalf("isReport %v, want %v", isReport, tt.isReport)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Step != tt.want.Step || p.Fitness != tt.want.Fitness || p.Last != tt.want.Last || len(p.Metrics) != len(tt.want.Metrics) {
				t.Errorf("got %+v, want %+v", p, tt.want)
			}
		})
	}
}

// fakeReporter records the reports it gets and stops at the first at
// stopAt (0: never), answering that one after delay.
type fakeReporter struct {
	mu      sync.Mutex
	steps   []int64
	stopAt  int64
	delay   time.Duration
	stopped bool
	end     int64 // the design's own end (endKnower); 0: none known
}

func (f *fakeReporter) AtEnd(step int64) bool { return f.end > 0 && step >= f.end }

func (f *fakeReporter) Report(_ context.Context, p Progress) (bool, string) {
	f.mu.Lock()
	f.steps = append(f.steps, p.Step)
	stop := f.stopAt > 0 && p.Step == f.stopAt && !f.stopped
	f.stopped = f.stopped || stop
	f.mu.Unlock()
	if stop {
		time.Sleep(f.delay)
		return true, "fake rule"
	}
	return false, ""
}

func (f *fakeReporter) seen() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.steps)
}

// reportingScript prints ten reports, fitness 0.<step>, then its result;
// on SIGTERM it notes the signal in $MARK and, unless told to ignore it,
// exits.
const reportingScript = `trap 'echo term >> "$MARK"; [ -n "$IGNORE" ] || exit 0' TERM
for s in 1 2 3 4 5 6 7 8 9; do echo "{\"report\": {\"step\": $s, \"fitness\": 0.$s, \"metrics\": {\"s\": $s}}}"; echo "log $s"; sleep 0.05; done
echo '{"fitness": 0.99}'`

func oneShotTask(rep Reporter) Task {
	t := persistentTask(1, 0)
	t.Reports = rep
	return t
}

func TestCommandReports(t *testing.T) {
	t.Parallel()
	t.Run("full training", func(t *testing.T) {
		t.Parallel()
		ctx := testutil.Context(t, 30*time.Second)
		rep := &fakeReporter{}
		out := Command{Cmd: reportingScript, Env: []string{"MARK=" + filepath.Join(t.TempDir(), "mark")}}.Evaluate(ctx, oneShotTask(rep))
		if out.Status != schema.StatusOK || out.Fitness != 0.99 {
			t.Fatalf("outcome %+v, want ok 0.99: report lines are not the result", out)
		}
		if got := rep.seen(); !slices.Equal(got, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Errorf("reports at steps %v, want 1..9", got)
		}
	})
	for _, tc := range []struct {
		name   string
		ignore bool
		signal string
	}{{"stopped", false, ""}, {"stopped, SIGTERM ignored", true, "SIGKILL"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testutil.Context(t, 30*time.Second)
			mark := filepath.Join(t.TempDir(), "mark")
			env := []string{"MARK=" + mark}
			if tc.ignore {
				env = append(env, "IGNORE=1")
			}
			rep := &fakeReporter{stopAt: 3}
			out := Command{Cmd: reportingScript, Env: env, StopGrace: 300 * time.Millisecond}.Evaluate(ctx, oneShotTask(rep))
			if out.Status != schema.StatusStopped || out.Fitness != 0.3 || out.Error != "fake rule" || out.Metrics["stopped_at"] != int64(3) {
				t.Fatalf("outcome %+v, want stopped at step 3 with its fitness 0.3 and the rule's reason", out)
			}
			if got := rep.seen(); !slices.Equal(got, []int64{1, 2, 3}) {
				t.Errorf("reports at steps %v, want 1..3: none is asked about after the stop", got)
			}
			if b, err := os.ReadFile(mark); err != nil || !strings.Contains(string(b), "term") {
				t.Errorf("the evaluator got no SIGTERM (mark %q, %v)", b, err)
			}
			if out.Signal != tc.signal {
				t.Errorf("signal %q, want %q", out.Signal, tc.signal)
			}
		})
	}
}

// persistentReporting serves designs: it reports steps 1..5 and reads one
// answer per report; after a stop answer it prints a result at once.
const persistentReporting = `while read -r line; do
  for s in 1 2 3 4 5; do
    echo "{\"report\": {\"step\": $s, \"fitness\": 0.$s}}"
    read -r answer
    case "$answer" in *'"continue":false'*) [ -n "$MUTE" ] && sleep 1000; break;; esac
  done
  echo "{\"fitness\": 0.9, \"metrics\": {\"pid\": $$}}"
done`

func TestPersistentReports(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &Persistent{Cmd: persistentReporting}
	defer p.Close()
	rep := &fakeReporter{stopAt: 2}
	task := persistentTask(1, 0)
	task.Reports = rep
	out := p.Evaluate(ctx, task)
	if out.Status != schema.StatusStopped || out.Fitness != 0.2 || out.Exit != nil {
		t.Fatalf("outcome %+v, want stopped at 0.2, the process living on", out)
	}
	if out.Metrics["pid"] == nil || out.Metrics["stopped_at"] != int64(2) {
		t.Errorf("stopped design's metrics %v, want the result line's pid kept beside stopped_at 2", out.Metrics)
	}
	rep2 := &fakeReporter{}
	task2 := persistentTask(2, 0)
	task2.Reports = rep2
	if out := p.Evaluate(ctx, task2); out.Status != schema.StatusOK || out.Fitness != 0.9 {
		t.Fatalf("next design: %+v, want ok 0.9 from the same process", out)
	}
	if got := rep2.seen(); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("next design reported %v, want 1..5", got)
	}
}

// An evaluator that prints nothing after its stop answer is killed when
// its grace ends; the next design gets a fresh process.
func TestPersistentStopGrace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &Persistent{Cmd: persistentReporting, Env: []string{"MUTE=1"}, StopGrace: 300 * time.Millisecond}
	defer p.Close()
	task := persistentTask(1, 0)
	task.Reports = &fakeReporter{stopAt: 1}
	out := p.Evaluate(ctx, task)
	if out.Status != schema.StatusStopped || out.Fitness != 0.1 || out.Signal != "SIGKILL" {
		t.Fatalf("outcome %+v, want stopped at 0.1, its process killed", out)
	}
	task2 := persistentTask(2, 0)
	task2.Reports = &fakeReporter{stopAt: 1}
	if out := p.Evaluate(ctx, task2); out.Status != schema.StatusStopped {
		t.Fatalf("next design: %+v, want a fresh process that reports and stops", out)
	}
}

// A worker stores every report on the reports stream, and asks at the
// run's rungs; the answer stops the design there, and a question nobody
// answers lets it go on.
func TestWorkerReportsAndAsks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		answer    bool
		want      schema.Status
		reports   uint64
		askedRung []int64
	}{
		{"controller stops at rung 3", true, schema.StatusStopped, 3, []int64{1, 3}},
		{"no controller", false, schema.StatusOK, 9, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			run := "rep" + map[bool]string{true: "a", false: "b"}[tc.answer]
			b.declare(t, run, broker.ConsumerConfig{Slots: 1})
			b.putRunRule(t, run, &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, MaxStep: 9, Eta: 3})
			var mu sync.Mutex
			var asked []int64
			if tc.answer {
				sub, err := b.NC.Subscribe(schema.AskSubject(run), func(m *nats.Msg) {
					a, err := schema.DecodeAsk(m.Data)
					if err != nil {
						t.Errorf("ask: %v", err)
						return
					}
					mu.Lock()
					asked = append(asked, a.Step)
					mu.Unlock()
					d, _ := schema.EncodeDecision(&schema.Decision{Run: run, DesignID: a.DesignID, Step: a.Step, Rung: a.Step, Stop: a.Step == 3, Reason: "test"})
					_ = m.Respond(d)
				})
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe()
			}
			b.publish(t, run, 1, 1)
			b.start(t, Config{Run: run, ID: "w", Evaluator: Command{Cmd: reportingScript, Env: []string{"MARK=" + filepath.Join(t.TempDir(), "m")}, StopGrace: time.Second}})
			res := b.results(t, run, 1)[0]
			if res.Status != tc.want {
				t.Fatalf("result %s (%s), want %s", res.Status, res.Error, tc.want)
			}
			if n := b.count(t, schema.ReportStream, schema.ReportSubject(run)); n != tc.reports {
				t.Errorf("%d reports stored, want %d", n, tc.reports)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(asked, tc.askedRung) {
				t.Errorf("asked at steps %v, want the rungs %v", asked, tc.askedRung)
			}
			cons, err := b.JS.OrderedConsumer(b.ctx, schema.ReportStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{schema.ReportSubject(run)}})
			if err != nil {
				t.Fatal(err)
			}
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			r, err := schema.DecodeReport(m.Data())
			if err != nil || r.Step != 1 || r.Fitness != 0.1 || r.Worker != "w" || r.Attempt != 1 || r.Metrics["s"] != 1.0 {
				t.Errorf("first report %+v (%v), want step 1, fitness 0.1, worker w, attempt 1, metrics s=1", r, err)
			}
		})
	}
}

// putRunRule records run with an early-stopping rule and a search space
// that takes any genome the tests publish.
func (b *bundle) putRunRule(t *testing.T, run string, rule *schema.EarlyStop) {
	t.Helper()
	kv, err := b.JS.KeyValue(b.ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := schema.EncodeRun(&schema.Run{Run: run, Phase: schema.PhaseRunning, Budget: 10, EarlyStop: rule,
		SpaceYAML: []byte("name: t\nparams:\n  x: {type: float, min: 0, max: 1000}\n"), Created: time.Now(), Updated: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(b.ctx, run, data); err != nil {
		t.Fatal(err)
	}
}
