package worker

import (
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

// A one-shot evaluator that a stop reaches as its training ends keeps the
// result it finished with: one that says, after the stop, that its report
// was its last; one that had printed its result when the stop was decided
// and exits 0; one whose last report said so and that was killed before
// its result. One that dies of the stop after a line that looks like a
// result (a JSON log line) is stopped.
// A design really stopped keeps the metrics of the result line it printed
// besides its report's.
func TestCommandStopReachesFinished(t *testing.T) {
	t.Parallel()
	reports := `for s in 1 2 3; do echo "{\"report\": {\"step\": $s, \"fitness\": 0.$s, \"metrics\": {\"s\": $s}}}"; done; `
	// Short sleeps, not one long one: sh runs a trap only between
	// commands, and a SIGTERM that comes before a sleep starts reaches
	// the shell alone.
	const wait = `i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done`
	tests := []struct {
		name    string
		script  string
		delay   time.Duration
		want    schema.Status
		fitness float64
		metrics map[string]any
		steps   []int64
	}{
		{"marked last after the stop",
			`trap 'echo "{\"report\": {\"step\": 3, \"fitness\": 0.3, \"last\": true}}"; echo "{\"fitness\": 0.3, \"metrics\": {\"done\": 1}}"; exit 0' TERM; ` +
				reports + wait,
			0, schema.StatusOK, 0.3, map[string]any{"done": 1.0}, []int64{1, 2, 3, 3}},
		{"result printed before the stop",
			`trap 'exit 0' TERM; ` + reports + `echo '{"fitness": 0.35}'; ` + wait,
			300 * time.Millisecond, schema.StatusOK, 0.35, nil, []int64{1, 2, 3}},
		{"a result-like line, then killed by the stop",
			reports + `echo '{"fitness": 0.9}'; ` + wait,
			300 * time.Millisecond, schema.StatusStopped, 0.3, map[string]any{"stopped_at": int64(3)}, []int64{1, 2, 3}},
		{"last report, killed before its result",
			`trap '' TERM; for s in 1 2; do echo "{\"report\": {\"step\": $s, \"fitness\": 0.$s}}"; done; ` +
				`echo '{"report": {"step": 3, "fitness": 0.3, "metrics": {"s": 3}, "last": true}}'; ` + wait,
			0, schema.StatusOK, 0.3, map[string]any{"s": 3.0}, []int64{1, 2, 3}},
		{"its end's report after the stop, unmarked (the run's max-step-gene)",
			`trap 'exit 0' TERM; ` + `echo '{"report": {"step": 1, "fitness": 0.1}}'; echo '{"report": {"step": 2, "fitness": 0.2}}'; ` +
				`echo '{"fitness": 0.2}'; ` + wait,
			300 * time.Millisecond, schema.StatusOK, 0.2, nil, []int64{1, 2}},
		{"stopped, its result line's metrics kept",
			`trap 'echo "{\"fitness\": 0.3, \"metrics\": {\"inherited\": true, \"s\": 99}}"; exit 0' TERM; ` + reports + wait,
			0, schema.StatusStopped, 0.3, map[string]any{"inherited": true, "s": 3.0, "stopped_at": int64(3)}, []int64{1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testutil.Context(t, 30*time.Second)
			rep := &fakeReporter{stopAt: 3, delay: tt.delay}
			if strings.Contains(tt.name, "max-step-gene") {
				rep.stopAt, rep.end = 1, 2
			}
			out := Command{Cmd: tt.script, StopGrace: 2 * time.Second}.Evaluate(ctx, oneShotTask(rep))
			if out.Status != tt.want || out.Fitness != tt.fitness {
				t.Fatalf("outcome %+v, want %s with fitness %v", out, tt.want, tt.fitness)
			}
			for k, v := range tt.metrics {
				if out.Metrics[k] != v {
					t.Errorf("metrics %v, want %s = %v", out.Metrics, k, v)
				}
			}
			if got := rep.seen(); !slices.Equal(got, tt.steps) {
				t.Errorf("reports at steps %v, want %v", got, tt.steps)
			}
		})
	}
}

// A report at the design's own end (the run's MaxStepGene), or one the
// evaluator marks last, is stored marked last and never asked about, so
// the design is not stopped there; reports after it are not stored.
func TestWorkerLastReports(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		gene   string
		script string
		want   float64
	}{
		// Design 3's gene x is 3: its report at step 3 is its last, and the
		// evaluator's reports past it are ignored.
		{"the design's gene", "x", reportingScript, 0.99},
		{"the evaluator's mark", "",
			`for s in 1 2; do echo "{\"report\": {\"step\": $s, \"fitness\": 0.$s}}"; done
echo '{"report": {"step": 3, "fitness": 0.3, "last": true}}'; echo '{"fitness": 0.5}'`, 0.5},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			run := "last" + string(rune('a'+i))
			b.declare(t, run, broker.ConsumerConfig{Slots: 1})
			b.putRunRule(t, run, &schema.EarlyStop{Rule: schema.RuleASHA, MinStep: 1, Eta: 3, MaxStepGene: tt.gene})
			var mu sync.Mutex
			var asked []int64
			sub, err := b.NC.Subscribe(schema.AskSubject(run), func(m *nats.Msg) {
				a, err := schema.DecodeAsk(m.Data)
				if err != nil {
					t.Errorf("ask: %v", err)
					return
				}
				mu.Lock()
				asked = append(asked, a.Step)
				mu.Unlock()
				// Every question at rung 3 is answered stop: none may come.
				d, _ := schema.EncodeDecision(&schema.Decision{Run: run, DesignID: a.DesignID, Step: a.Step, Rung: a.Step, Stop: a.Step == 3, Reason: "test"})
				_ = m.Respond(d)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			b.publish(t, run, 3, 3)
			b.start(t, Config{Run: run, ID: "w", Evaluator: Command{Cmd: tt.script, Env: []string{"MARK=/dev/null"}, StopGrace: time.Second}})
			res := b.results(t, run, 1)[0]
			if res.Status != schema.StatusOK || res.Fitness != tt.want {
				t.Fatalf("result %s %v (%s), want ok %v: a design at its end is not stopped", res.Status, res.Fitness, res.Error, tt.want)
			}
			mu.Lock()
			if !slices.Equal(asked, []int64{1}) {
				t.Errorf("asked at steps %v, want rung 1 only: the last report is not asked about", asked)
			}
			mu.Unlock()
			var got []*schema.Report
			cons, err := b.JS.OrderedConsumer(b.ctx, schema.ReportStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{schema.ReportSubject(run)}})
			if err != nil {
				t.Fatal(err)
			}
			for len(got) < 3 {
				m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
				if err != nil {
					t.Fatalf("after %d reports: %v", len(got), err)
				}
				r, err := schema.DecodeReport(m.Data())
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, r)
			}
			if n := b.count(t, schema.ReportStream, schema.ReportSubject(run)); n != 3 {
				t.Errorf("%d reports stored, want 3: none after the last", n)
			}
			if l := got[2]; l.Step != 3 || !l.Last || got[0].Last || got[1].Last {
				t.Errorf("reports %+v %+v %+v, want the one at step 3, and it alone, marked last", got[0], got[1], got[2])
			}
		})
	}
}
