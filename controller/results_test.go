package controller

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/schema"
)

// A consumer of the results stream that stops delivering (its node died
// and the client waits for it) is replaced once results wait unread: the
// new one reads from the result after the last one read, and what the old
// one delivers late is dropped, so every result is applied once.
func TestCheckResultsRestartsAStalledConsumer(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	c, err := New(bu.js, bu.config("t"))
	if err != nil {
		t.Fatal(err)
	}
	resolveNew(t, c)
	if err := c.consumeResults(bu.ctx); err != nil {
		t.Fatal(err)
	}
	publish := func(seqs ...uint64) {
		t.Helper()
		for _, seq := range seqs {
			data, err := schema.EncodeResult(result(seq, schema.StatusOK, float64(seq)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bu.js.Publish(bu.ctx, schema.ResultSubject("t"), data); err != nil {
				t.Fatal(err)
			}
		}
	}
	receive := func() resultMsg {
		t.Helper()
		select {
		case m := <-c.results:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no result read")
			return resultMsg{}
		}
	}
	c.published = 10
	publish(1, 2)
	for range 2 {
		c.apply(receive())
	}

	// The consumer stalls: it delivers nothing more, results pile up.
	c.stopResults()
	publish(3, 4, 5)
	stale := resultMsg{res: result(3, schema.StatusOK, 3), seq: 3, gen: c.resultsGen} // delivered late by the old consumer
	c.resultsCheck = time.Time{}
	c.checkResults(bu.ctx) // results were read a moment ago: nothing to do yet
	if c.resultsGen != 0 {
		t.Fatal("restarted the consumer although results were read less than ResultsStall ago")
	}
	c.resultsAt = c.resultsAt.Add(-ResultsStall)
	// The check asks the broker, which a loaded machine may answer late:
	// ask again until it restarts the consumer, as the next tick would.
	// A stopped consumer is not quite a stalled one: what the broker had
	// sent it before the stop may still arrive, and a result waiting in
	// the controller's queue rightly holds the check back. Those late
	// ones are taken out and applied after the restart, when they must
	// count for nothing.
	var late []resultMsg
	takeLate := func() {
		for len(c.results) > 0 {
			late = append(late, <-c.results)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.resultsGen == 0 && time.Now().Before(deadline) {
		takeLate()
		c.checkResults(bu.ctx)
		c.resultsCheck = time.Time{}
	}
	if c.resultsGen != 1 {
		t.Fatalf("consumer generation %d after results waited unread, want 1 (restarted)", c.resultsGen)
	}
	for _, m := range late {
		if m.gen != 0 {
			t.Fatalf("the restarted consumer's result %d was taken as a late one", m.seq)
		}
		c.apply(m)
	}
	c.apply(stale)
	for range 3 {
		c.apply(receive())
	}
	if c.fold.Terminal() != 5 || c.resultsSeq != 5 {
		t.Errorf("%d results applied, read up to stream sequence %d; want 5 and 5", c.fold.Terminal(), c.resultsSeq)
	}
	select {
	case m := <-c.results:
		t.Errorf("read result %d twice", m.seq)
	case <-time.After(200 * time.Millisecond):
	}

	// Nothing unread: no restart, however quiet.
	c.resultsAt, c.resultsCheck = c.resultsAt.Add(-time.Minute), time.Time{}
	c.checkResults(bu.ctx)
	if c.resultsGen != 1 {
		t.Errorf("restarted the consumer with every result read")
	}
}

// A controller run to the end stops reading the results stream before it
// reports the run done: its caller closes the connection next (here at
// once, from the log line itself), and that is no failure to warn about.
func TestNoWarningAfterRunDone(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run = "quiet"
	closed := make(chan struct{})
	nc, err := nats.Connect(bu.b.ClientURL(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rec := &closeOnDone{nc: nc}
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.SetLevel(logrus.InfoLevel)
	log.AddHook(rec)
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool, cfg.Logger = 20, 5, 5, log
	c, err := New(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() {
		_, err := c.Run(bu.ctx)
		ran <- err
	}()
	bu.worker(t, run, "w1", 2, evaluators.Noop{}, 0)
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case <-closed:
	case <-bu.ctx.Done():
		t.Fatal("the connection was never closed: no run done line")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.after) > 0 {
		t.Errorf("logged after run done:\n%s", strings.Join(rec.after, "\n"))
	}
}

// closeOnDone closes nc when the controller logs "run done", as its
// caller does once Run returns, and keeps every warning logged after.
type closeOnDone struct {
	nc    *nats.Conn
	mu    sync.Mutex
	done  bool
	after []string
}

func (h *closeOnDone) Levels() []logrus.Level { return logrus.AllLevels }

func (h *closeOnDone) Fire(e *logrus.Entry) error {
	if e.Message == "run done" {
		h.mu.Lock()
		h.done = true
		h.mu.Unlock()
		h.nc.Close()
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done && e.Level <= logrus.WarnLevel {
		msg, _ := e.String()
		h.after = append(h.after, msg)
	}
	return nil
}
