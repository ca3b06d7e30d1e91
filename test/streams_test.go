package test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/evoq/evoq/controller"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// verdict is what verifyRun checked, for the test log and the soak report.
type verdict struct {
	results, terminal, duplicates, digests int
	designsStored                          uint64
}

func (v verdict) String() string {
	return fmt.Sprintf("%d results stored for %d designs (%d duplicate evaluations counted once), %d designs ever queued, %d logged pool digests equal to the replay",
		v.results, v.terminal, v.duplicates, v.designsStored, v.digests)
}

// verifyRun opens a finished run's store and checks the invariants: every
// design 1..budget has exactly one counted terminal result and was
// published once with one genome, nothing else was ever queued, and every
// pool digest a controller logged equals the replay of the results stream
// up to that point.
func verifyRun(t *testing.T, dir, run string, budget int, replace runstate.Replace, init, pool int, logs string) verdict {
	t.Helper()
	results := readResults(t, dir, run)
	v := verdict{results: len(results)}
	checkDesigns(t, results, budget)
	f := fold(results, run, budget, init, pool, replace)
	v.terminal = f.Terminal()
	v.duplicates = len(results) - f.Terminal()
	if f.Terminal() != budget {
		t.Errorf("%d designs have a terminal result, want exactly %d", f.Terminal(), budget)
	}
	v.designsStored = designsEverQueued(t, dir)
	if v.designsStored != uint64(budget) {
		t.Errorf("the design queue stored %d designs, want %d: a design was published twice or skipped", v.designsStored, budget)
	}
	v.digests = checkDigests(t, results, logs, run, budget, init, pool, replace)
	return v
}

// checkDesigns: seqs 1..budget all present, each with a single genome.
func checkDesigns(t *testing.T, results []*schema.Result, budget int) {
	t.Helper()
	genome := map[uint64]string{}
	for _, r := range results {
		g := fmt.Sprint(r.Design.Genome, r.Design.Created.UnixNano())
		if old, ok := genome[r.Design.Seq]; ok && old != g {
			t.Errorf("design %s has results for two different designs: published twice", r.DesignID)
		}
		genome[r.Design.Seq] = g
	}
	for seq := uint64(1); seq <= uint64(budget); seq++ {
		if _, ok := genome[seq]; !ok {
			t.Errorf("design seq %d has no result", seq)
		}
	}
	if len(genome) != budget {
		t.Errorf("results for %d distinct designs, want %d", len(genome), budget)
	}
}

// designsEverQueued is the design stream's last sequence: how many designs
// were ever stored on the queue (the test's broker holds one run).
func designsEverQueued(t *testing.T, dir string) uint64 {
	t.Helper()
	b := openStore(t, dir)
	ctx := testutil.Context(t, 10*time.Second)
	st, err := b.JS.Stream(ctx, schema.DesignStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

var digestLine = regexp.MustCompile(`(?:evaluations|results)=(\d+)[^\n]*pool_digest=([0-9a-f]{16})|pool_digest=([0-9a-f]{16})[^\n]*(?:evaluations|results)=(\d+)`)

// checkDigests replays the results and checks every (count, digest) pair
// the controllers logged: the live pool at each point, before every kill
// and after every restart, equals the pool rebuilt from the stream.
func checkDigests(t *testing.T, results []*schema.Result, logs, run string, budget, init, pool int, replace runstate.Replace) int {
	t.Helper()
	want := map[int]map[string]bool{}
	for _, m := range digestLine.FindAllStringSubmatch(logs, -1) {
		n, d := m[1], m[2]
		if n == "" {
			n, d = m[4], m[3]
		}
		k, _ := strconv.Atoi(n)
		if want[k] == nil {
			want[k] = map[string]bool{}
		}
		want[k][d] = true
	}
	f := runstate.NewFold(runstate.NewTally(run, budget, defaultRules), init, pool, replace)
	checked := 0
	check := func() {
		for d := range want[f.Terminal()] {
			if d != f.Pool().Digest() {
				t.Errorf("after %d results a controller logged pool digest %s; replaying the stream gives %s", f.Terminal(), d, f.Pool().Digest())
			}
			checked++
		}
		delete(want, f.Terminal())
	}
	check()
	for _, r := range results {
		if f.Apply(r, nil) == runstate.Counted {
			check()
		}
	}
	if checked == 0 {
		t.Error("no pool digest was logged to compare")
	}
	return checked
}

// connectJS connects a plain client to a running broker.
func connectJS(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// storedResults reads every result of run stored so far on a running
// broker, in stream order.
func storedResults(t *testing.T, js jetstream.JetStream, run string) []*schema.Result {
	t.Helper()
	want := subjectCount(t, js, run)
	if want == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, schema.ResultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schema.ResultSubject(run)}})
	if err != nil {
		t.Fatalf("results consumer: %v", err)
	}
	var out []*schema.Result
	// A fetch that brings nothing is tried again until a minute has passed
	// without one that brings something: on a loaded machine the ordered
	// consumer's first delivery took over 2 s (it failed "read 0 of 8001").
	quiet := time.Now()
	for len(out) < want {
		msgs, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("fetch results: %v", err)
		}
		n := 0
		for m := range msgs.Messages() {
			r, err := schema.DecodeResult(m.Data())
			if err != nil {
				t.Fatalf("stored result does not decode: %v", err)
			}
			out = append(out, r)
			n++
		}
		if n > 0 {
			quiet = time.Now()
		} else if time.Since(quiet) > time.Minute {
			t.Fatalf("read %d of %d results, then nothing for a minute", len(out), want)
		}
	}
	return out
}

// bySeq groups results by design sequence, in stream order.
func bySeq(results []*schema.Result) map[uint64][]*schema.Result {
	m := map[uint64][]*schema.Result{}
	for _, r := range results {
		m[r.Design.Seq] = append(m[r.Design.Seq], r)
	}
	return m
}

// ackPending is the number of designs of run delivered to a slot and not
// yet acked.
func ackPending(t *testing.T, js jetstream.JetStream, run string) int {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	cons, err := js.Consumer(ctx, schema.DesignStream, schema.ConsumerName(run))
	if err != nil {
		return 0 // not declared yet
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info.NumAckPending
}

// resultsOf keeps the results of one worker.
func resultsOf(results []*schema.Result, worker string) []*schema.Result {
	var out []*schema.Result
	for _, r := range results {
		if r.Worker == worker {
			out = append(out, r)
		}
	}
	return out
}

// checkOneResultEach: designs 1..budget each have exactly one result, and
// nothing else has one.
func checkOneResultEach(t *testing.T, results []*schema.Result, budget int) {
	t.Helper()
	seqs := bySeq(results)
	for seq := uint64(1); seq <= uint64(budget); seq++ {
		if n := len(seqs[seq]); n != 1 {
			t.Errorf("design %d has %d results, want 1", seq, n)
		}
	}
	if len(seqs) != budget || len(results) != budget {
		t.Errorf("%d results for %d designs, want %d for %d", len(results), len(seqs), budget, budget)
	}
}

// readRecord reads a stopped run's record from its store.
func readRecord(t *testing.T, dir, run string) *schema.Run {
	t.Helper()
	rec, err := controller.LoadRun(testutil.Context(t, 30*time.Second), openStore(t, dir).JS, run, nil)
	if err != nil || rec == nil {
		t.Fatalf("record of run %s: %v, %v", run, rec, err)
	}
	return rec
}
