package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// storeResults publishes n ok results of run, design sequences 1..n, and
// waits for the broker to store them.
func storeResults(t *testing.T, js jetstream.JetStream, run string, n int) {
	t.Helper()
	for seq := 1; seq <= n; seq++ {
		d := schema.Design{V: schema.Version, Run: run, ID: schema.DesignID(run, uint64(seq)), Seq: uint64(seq),
			Genome: map[string]any{"x": int64(seq)}, Origin: schema.OriginRandom, Created: time.Now()}
		r := &schema.Result{V: schema.Version, Run: run, DesignID: d.ID, Design: d, Status: schema.StatusOK,
			Fitness: float64(seq), Worker: "w", Attempt: 1, Start: time.Now(), Stop: time.Now(), Gap: -1}
		data, err := schema.EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishAsync(schema.ResultSubject(run), data); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("results not stored within 10s")
	}
}

func TestReadResults(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, 30*time.Second)
	// More than one fetch batch, another run's results between them, and
	// one result that does not decode.
	storeResults(t, b.JS, "a", 300)
	storeResults(t, b.JS, "b", 5)
	if _, err := b.JS.Publish(ctx, schema.ResultSubject("a"), []byte("not msgpack")); err != nil {
		t.Fatal(err)
	}
	storeResults(t, b.JS, "a", 300)

	t.Run("whole history in stream order", func(t *testing.T) {
		var n, malformed int
		var last uint64
		err := broker.ReadResults(ctx, b.JS, "a", func(seq uint64, _ time.Time, r *schema.Result, err error) error {
			n++
			if seq <= last {
				t.Errorf("stream sequence %d after %d", seq, last)
			}
			last = seq
			switch {
			case err != nil:
				malformed++
			case r.Run != "a":
				t.Errorf("result of run %s", r.Run)
			}
			return nil
		})
		if err != nil || n != 601 || malformed != 1 {
			t.Fatalf("ReadResults: %v, %d results, %d malformed; want nil, 601, 1", err, n, malformed)
		}
	})
	t.Run("stopped early", func(t *testing.T) {
		n := 0
		err := broker.ReadResults(ctx, b.JS, "a", func(uint64, time.Time, *schema.Result, error) error {
			if n++; n == 3 {
				return broker.ErrStopReading
			}
			return nil
		})
		if err != nil || n != 3 {
			t.Fatalf("ReadResults: %v after %d results; want nil after 3", err, n)
		}
	})
	t.Run("callback error", func(t *testing.T) {
		boom := errors.New("boom")
		err := broker.ReadResults(ctx, b.JS, "b", func(uint64, time.Time, *schema.Result, error) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("ReadResults: %v, want %v", err, boom)
		}
	})
	t.Run("run without results", func(t *testing.T) {
		err := broker.ReadResults(ctx, b.JS, "none", func(uint64, time.Time, *schema.Result, error) error {
			t.Error("called for a run without results")
			return nil
		})
		if err != nil {
			t.Fatalf("ReadResults: %v", err)
		}
	})
}

// TestReadResultsNoStream reads a broker where nothing was declared yet.
func TestReadResultsNoStream(t *testing.T) {
	t.Parallel()
	e := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	_, js := connect(t, e.ClientURL(), e)
	err := broker.ReadResults(testutil.Context(t, 10*time.Second), js, "a", func(uint64, time.Time, *schema.Result, error) error {
		t.Error("called without a results stream")
		return nil
	})
	if err != nil {
		t.Fatalf("ReadResults: %v", err)
	}
}
