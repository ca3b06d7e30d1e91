package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// fillRun gives run a consumer, queued designs, results, two workers'
// heartbeats and a record.
func fillRun(t *testing.T, ctx context.Context, js jetstream.JetStream, run string, designs, results int) {
	t.Helper()
	if _, err := broker.DeclareConsumer(ctx, js, run, broker.ConsumerConfig{Slots: 1}); err != nil {
		t.Fatal(err)
	}
	for range designs {
		if _, err := js.Publish(ctx, schema.DesignSubject(run), []byte("design")); err != nil {
			t.Fatal(err)
		}
	}
	storeResults(t, js, run, results)
	for _, name := range []string{schema.PresenceBucket, schema.RunBucket} {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{run}
		if name == schema.PresenceBucket {
			keys = []string{schema.PresenceKey(run, "w1"), schema.PresenceKey(run, "w2")}
		}
		for _, k := range keys {
			if _, err := kv.Put(ctx, k, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestDeleteRun(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, 30*time.Second)
	fillRun(t, ctx, b.JS, "drop", 3, 5)
	fillRun(t, ctx, b.JS, "keep", 4, 6)
	for _, run := range []string{"drop", "keep"} {
		if _, err := b.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: schema.CheckpointBucket(run)}); err != nil {
			t.Fatal(err)
		}
	}

	n, err := broker.DeleteRun(ctx, b.JS, "drop")
	if err != nil || n != (broker.Deleted{Results: 5, Designs: 3, Presence: 2, Checkpoints: true}) {
		t.Fatalf("DeleteRun: %+v, %v; want 5 results, 3 designs, 2 heartbeats, the checkpoint bucket", n, err)
	}
	if _, err := b.JS.ObjectStore(ctx, schema.CheckpointBucket("drop")); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("the deleted run's checkpoint bucket: %v, want not found", err)
	}
	if _, err := b.JS.ObjectStore(ctx, schema.CheckpointBucket("keep")); err != nil {
		t.Errorf("the other run's checkpoint bucket: %v", err)
	}
	if _, err := b.JS.Consumer(ctx, schema.DesignStream, schema.ConsumerName("drop")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the deleted run's consumer: %v, want not found", err)
	}
	runs, _ := b.JS.KeyValue(ctx, schema.RunBucket)
	if _, err := runs.Get(ctx, "drop"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the deleted run's record: %v, want not found", err)
	}
	if _, err := runs.Get(ctx, "keep"); err != nil {
		t.Errorf("the other run's record: %v", err)
	}
	if _, err := b.JS.Consumer(ctx, schema.DesignStream, schema.ConsumerName("keep")); err != nil {
		t.Errorf("the other run's consumer: %v", err)
	}

	// Deleting it again finds nothing; the other run still has everything.
	if n, err := broker.DeleteRun(ctx, b.JS, "drop"); err != nil || n != (broker.Deleted{}) {
		t.Fatalf("DeleteRun again: %+v, %v; want nothing deleted", n, err)
	}
	if n, err := broker.DeleteRun(ctx, b.JS, "keep"); err != nil || n != (broker.Deleted{Results: 6, Designs: 4, Presence: 2, Checkpoints: true}) {
		t.Fatalf("DeleteRun of the other run: %+v, %v; want 6 results, 4 designs, 2 heartbeats", n, err)
	}
}
