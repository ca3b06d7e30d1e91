package broker_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// The runs a worker can join are the run bucket's entries that decode and
// are neither done nor failed; a controller may continue a failed one too.
// A broker no controller ever used has none.
func TestRunsInProgress(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t, time.Minute)
	e := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	nc, err := broker.Connect(e.ClientURL(), t.Name(), e, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if runs, err := broker.RunsInProgress(ctx, js); err != nil || runs != nil {
		t.Fatalf("before any bucket: %v, %v; want none", runs, err)
	}
	if err := broker.Declare(ctx, js); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	put := func(run string, phase schema.Phase) {
		data, err := schema.EncodeRun(&schema.Run{Run: run, Phase: phase, Budget: 5, Created: time.Now(), Updated: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, run, data); err != nil {
			t.Fatal(err)
		}
	}
	put("zeta", schema.PhaseRunning)
	put("alpha", schema.PhaseStarting)
	put("old", schema.PhaseDone)
	put("gone", schema.PhaseRunning)
	put("drain", schema.PhaseDraining)
	put("drain", schema.PhaseDone) // only the last value counts
	put("broken", schema.PhaseFailed)
	if err := kv.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "garbage", []byte("not a run")); err != nil {
		t.Fatal(err)
	}
	runs, err := broker.RunsInProgress(ctx, js)
	if want := []string{"alpha", "zeta"}; err != nil || !reflect.DeepEqual(runs, want) {
		t.Fatalf("RunsInProgress = %v, %v; want %v", runs, err, want)
	}
	runs, err = broker.RunsUnfinished(ctx, js)
	if want := []string{"alpha", "broken", "zeta"}; err != nil || !reflect.DeepEqual(runs, want) {
		t.Fatalf("RunsUnfinished = %v, %v; want %v", runs, err, want)
	}
}
