package inspect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/internal/mlp"
	"github.com/evoq/evoq/internal/report"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/evoq/evoq/worker"
)

// agreeRun is the run of TestCountingAgreement.
const agreeRun = "agree"

// tally is what one reader of a run's results says of them.
type tally struct {
	counted    int
	byStatus   map[schema.Status]int
	duplicates int
	foreign    int
	malformed  int
	retried    int
	digest     string // the pool digest, from the readers that compute one
}

// stream is a results stream under construction, with the verdict each
// stored message should get and the results that should count.
type stream struct {
	t        *testing.T
	b        *testutil.Broker
	ctx      context.Context
	rng      *rand.Rand
	space    *space.Space
	verdicts []runstate.Verdict
	counted  []*schema.Result
}

// own makes a result of design seq of agreeRun.
func (s *stream) own(seq uint64, status schema.Status, fitness float64, attempt int) *schema.Result {
	d := schema.Design{Run: agreeRun, ID: schema.DesignID(agreeRun, seq), Seq: seq,
		Genome: s.space.Random(s.rng), Origin: schema.OriginRandom, Created: time.Now()}
	r := &schema.Result{Run: agreeRun, DesignID: d.ID, Design: d, Status: status, Fitness: fitness,
		Worker: "w1", Slot: int(seq % 2), Attempt: attempt, Start: time.Now(), Stop: time.Now()}
	switch status {
	case schema.StatusLost:
		r.Worker, r.Slot, r.Start, r.Stop = "", 0, time.Time{}, time.Time{}
		fallthrough
	case schema.StatusInfeasible, schema.StatusError, schema.StatusTimeout:
		r.Fitness = schema.InfeasibleFitness
	}
	return r
}

// store stores r, which should get verdict v.
func (s *stream) store(r *schema.Result, v runstate.Verdict) {
	s.t.Helper()
	data, err := schema.EncodeResult(r)
	if err != nil {
		s.t.Fatal(err)
	}
	s.raw(data, v)
	if v == runstate.Counted {
		s.counted = append(s.counted, r)
	}
}

// raw stores bytes as a result, which should get verdict v.
func (s *stream) raw(data []byte, v runstate.Verdict) {
	s.t.Helper()
	if _, err := s.b.JS.Publish(s.ctx, schema.ResultSubject(agreeRun), data); err != nil {
		s.t.Fatalf("store a result: %v", err)
	}
	s.verdicts = append(s.verdicts, v)
}

// want is what every reader should say: the verdicts counted from the
// stream as built, and the pool the counted results make.
func (s *stream) want(budget int) tally {
	w := tally{byStatus: map[schema.Status]int{}}
	for _, v := range s.verdicts {
		switch v {
		case runstate.Duplicate:
			w.duplicates++
		case runstate.Foreign:
			w.foreign++
		case runstate.Malformed:
			w.malformed++
		case runstate.Retried:
			w.retried++
		}
	}
	// The counted results alone, each the first of its design: no rule
	// but the budget decides.
	f := runstate.NewFold(runstate.NewTally(agreeRun, budget, runstate.Rules{}), agreeInit, agreePool, runstate.ReplaceWorst)
	for _, r := range s.counted {
		w.counted++
		w.byStatus[r.Status]++
		if v := f.Apply(r, nil); v != runstate.Counted {
			s.t.Fatalf("design %d, built to count: %s", r.Design.Seq, v)
		}
	}
	w.digest = f.Pool().Digest()
	return w
}

const agreeBudget, agreeInit, agreePool = 12, 4, 3

// TestCountingAgreement builds one results stream on a real broker holding
// the run's results, a redelivered design's second result, a lost record
// and a frozen worker's late result after it, a result beyond the budget,
// one of another run's design, failed attempts retried (one that fails
// again, one that succeeds on retry), and messages that do not decode or
// validate. A controller restarted on the stream, evoq status, export,
// report and replay must each count the same results, with the same status
// counts, and the controller and replay the same pool. A restart that
// raises the budget then counts the result that was beyond it, and every
// reader agrees with it again.
func TestCountingAgreement(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	sp, err := space.Parse(mlp.DefaultSpace)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{t: t, b: b, ctx: testutil.Context(t, 90*time.Second), rng: rand.New(rand.NewPCG(5, 6)), space: sp}
	statuses := []schema.Status{schema.StatusOK, schema.StatusOK, schema.StatusInfeasible, schema.StatusOK,
		schema.StatusError, schema.StatusLost, schema.StatusOK, schema.StatusTimeout, schema.StatusOK,
		schema.StatusInfeasible, schema.StatusOK, schema.StatusOK}
	var four, six *schema.Result
	for i, st := range statuses {
		seq := uint64(i + 1)
		r := s.own(seq, st, float64(i)/10, 1)
		if st == schema.StatusError || st == schema.StatusTimeout {
			// The run retries a failure once, on another worker: the
			// error fails again and counts; the timeout's retry is ok.
			s.store(r, runstate.Retried)
			retry := *r
			retry.Design.Retry, retry.Design.AvoidWorkers, retry.Worker = 1, []string{r.Worker}, "w2"
			if st == schema.StatusTimeout {
				retry.Status, retry.Fitness, retry.Error = schema.StatusOK, 0.75, ""
			}
			r = &retry
		}
		s.store(r, runstate.Counted)
		switch seq {
		case 4:
			four = r
			s.raw([]byte("not a result"), runstate.Malformed)
		case 5:
			again := *four // design 4 redelivered and evaluated a second time
			again.Attempt, again.Worker, again.Fitness = 2, "w2", 99
			s.store(&again, runstate.Duplicate)
		case 6:
			six = r
			s.store(s.own(agreeBudget+1, schema.StatusOK, 50, 1), runstate.Foreign)
			other := s.own(3, schema.StatusOK, 60, 1)
			other.Run, other.Design.Run = "other", "other"
			other.DesignID, other.Design.ID = schema.DesignID("other", 3), schema.DesignID("other", 3)
			s.store(other, runstate.Foreign)
		case 8:
			late := *six // the worker the lost design was taken from stores its result after all
			late.Status, late.Fitness, late.Worker, late.Attempt = schema.StatusOK, 98, "w3", 1
			late.Start, late.Stop = time.Now(), time.Now()
			s.store(&late, runstate.Duplicate)
			invalid := s.own(9, "exploded", 0, 1) // decodes, does not validate
			invalid.V, invalid.Design.V = schema.Version, schema.Version
			data, err := schema.Marshal(invalid)
			if err != nil {
				t.Fatal(err)
			}
			s.raw(data, runstate.Malformed)
		}
	}

	cfg := controller.Config{Run: agreeRun, Space: sp, Budget: agreeBudget, Init: agreeInit, Pool: agreePool,
		Replace: runstate.ReplaceWorst, Seed: new(uint64(1)), ErrorRetries: new(1), Logger: testutil.Logger(t)}
	want := s.want(agreeBudget)
	// The first controller finds the run's results without a record; the
	// second continues the run from the record the first wrote.
	for _, name := range []string{"controller", "restarted controller"} {
		sum := controllerOn(t, b, cfg)
		agree(t, name, summaryTally(sum), want)
	}
	readersAgree(t, b, want)

	// Raising the budget counts the result that was beyond the old one;
	// the new design 14 is evaluated by a worker, started once the run is
	// no longer done (a worker leaves a done run).
	cfg.Budget = agreeBudget + 2
	done := make(chan *runstate.Summary, 1)
	go func() { done <- controllerOn(t, b, cfg) }()
	testutil.WaitFor(t, 30*time.Second, "the run continued with the raised budget", func() bool {
		ri, err := history.FromJS(b.JS).Pick(s.ctx, agreeRun)
		return err == nil && ri.Budget == cfg.Budget && ri.Phase != schema.PhaseDone
	})
	w, err := worker.New(b.JS, worker.Config{Run: agreeRun, ID: "w9", Slots: 1, Evaluator: evaluators.Noop{},
		FetchWait: time.Second, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(s.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	var sum *runstate.Summary
	select {
	case sum = <-done:
	case <-s.ctx.Done():
		t.Fatal("the controller with the raised budget did not finish")
	}
	raised := summaryTally(sum)
	if raised.counted != agreeBudget+2 || raised.byStatus[schema.StatusOK] != want.byStatus[schema.StatusOK]+2 {
		t.Errorf("after raising the budget to %d: %+v, want the result beyond the old budget and design %d counted",
			cfg.Budget, raised, cfg.Budget)
	}
	raised.duplicates, raised.foreign, raised.malformed, raised.retried = want.duplicates, want.foreign-1, want.malformed, want.retried
	readersAgree(t, b, raised)
}

// controllerOn runs a controller on b until it has spent its budget.
func controllerOn(t *testing.T, b *testutil.Broker, cfg controller.Config) *runstate.Summary {
	t.Helper()
	c, err := controller.New(b.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, err := c.Run(ctx)
	if err != nil {
		t.Errorf("controller: %v", err)
		return &runstate.Summary{}
	}
	return sum
}

// summaryTally is what a controller's summary says; it gives no figures
// of what did not count (-1: not compared).
func summaryTally(s *runstate.Summary) tally {
	by := map[schema.Status]int{schema.StatusOK: s.OK, schema.StatusInfeasible: s.Infeasible,
		schema.StatusError: s.Error, schema.StatusTimeout: s.Timeout, schema.StatusLost: s.Lost}
	return tally{counted: s.Evaluations, byStatus: by, duplicates: -1, foreign: -1, malformed: -1, retried: s.Retried, digest: s.PoolDigest}
}

// agree compares what reader says with what every reader should say. A
// figure the reader does not give (-1, or an empty digest) is not
// compared.
func agree(t *testing.T, reader string, got, want tally) {
	t.Helper()
	if got.counted != want.counted {
		t.Errorf("%s counts %d results, want %d", reader, got.counted, want.counted)
	}
	for _, st := range schema.Statuses {
		if got.byStatus[st] != want.byStatus[st] {
			t.Errorf("%s counts %d %s, want %d", reader, got.byStatus[st], st, want.byStatus[st])
		}
	}
	for _, f := range []struct {
		name      string
		got, want int
	}{{"duplicate", got.duplicates, want.duplicates}, {"foreign", got.foreign, want.foreign}, {"malformed", got.malformed, want.malformed},
		{"retried", got.retried, want.retried}} {
		if f.got >= 0 && f.got != f.want {
			t.Errorf("%s finds %d %s results, want %d", reader, f.got, f.name, f.want)
		}
	}
	if got.digest != "" && got.digest != want.digest {
		t.Errorf("%s has pool digest %s, want %s", reader, got.digest, want.digest)
	}
}

// readersAgree runs each tool that reads the run's results on b and
// checks that it says what want says.
func readersAgree(t *testing.T, b *testutil.Broker, want tally) {
	t.Helper()
	url := b.ClientURL()
	src := []string{"--nats", url, "--run", agreeRun}

	var st runStatus
	decodeJSON(t, "status", cliOut(t, 0, append([]string{"status", "--json"}, src...)...), &st)
	agree(t, "evoq status", tally{counted: st.Done, byStatus: st.ByStatus, duplicates: st.Duplicates,
		foreign: st.Foreign, malformed: st.Malformed, retried: st.Retried}, want)

	agree(t, "evoq export", exportTally(t, cliOut(t, 0, append([]string{"export", "--format", "jsonl"}, src...)...)), want)

	// The replay's integrity check fails on the malformed results: exit 1.
	var rep replayReport
	decodeJSON(t, "replay", cliOut(t, 1, append([]string{"replay", "--json"}, src...)...), &rep)
	by := map[schema.Status]int{}
	for k, n := range rep.Counts {
		by[schema.Status(k)] = n
	}
	agree(t, "evoq replay", tally{counted: rep.Evaluations, byStatus: by, duplicates: rep.Duplicates,
		foreign: len(rep.Foreign), malformed: len(rep.Malformed), retried: rep.Retried, digest: rep.PoolDigest}, want)

	r := history.FromJS(b.JS)
	ri, err := r.Pick(context.Background(), agreeRun)
	if err != nil {
		t.Fatal(err)
	}
	in, err := (&reportCmd{env: Env{Stderr: io.Discard}, top: report.TopDefault}).input(context.Background(), r, ri)
	if err != nil {
		t.Fatal(err)
	}
	a := report.Analyze(in)
	agree(t, "evoq report", tally{counted: a.Evaluations, byStatus: a.Counts, duplicates: a.Duplicates,
		foreign: a.Foreign, malformed: a.Malformed, retried: a.Retried}, want)
}

// exportTally counts the rows of a JSON lines export by their verdict; a
// row's counted field must say whether its verdict is counted.
func exportTally(t *testing.T, out []byte) tally {
	t.Helper()
	got := tally{byStatus: map[schema.Status]int{}, malformed: -1} // malformed results have no row
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var row struct {
			Counted bool          `json:"counted"`
			Verdict string        `json:"verdict"`
			Status  schema.Status `json:"status"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("export row %q: %v", sc.Text(), err)
		}
		if row.Counted != (row.Verdict == runstate.Counted.String()) {
			t.Errorf("export row counted %v with verdict %s", row.Counted, row.Verdict)
		}
		switch row.Verdict {
		case runstate.Counted.String():
			got.counted++
			got.byStatus[row.Status]++
		case runstate.Duplicate.String():
			got.duplicates++
		case runstate.Foreign.String():
			got.foreign++
		case runstate.Retried.String():
			got.retried++
		default:
			t.Errorf("export row with verdict %q", row.Verdict)
		}
	}
	return got
}

// cliOut runs evoq args through Main and returns its standard output; the
// exit code must be code.
func cliOut(t *testing.T, code int, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got := Main(ctx, args, &stdout, &stderr); got != code {
		t.Fatalf("evoq %s: exit %d, want %d\n%s", strings.Join(args, " "), got, code, stderr.String())
	}
	return stdout.Bytes()
}

func decodeJSON(t *testing.T, what string, out []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("%s --json: %v\n%s", what, err, out)
	}
	if reflect.ValueOf(v).Elem().IsZero() {
		t.Fatalf("%s --json printed nothing useful:\n%s", what, out)
	}
}
