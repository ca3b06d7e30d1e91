package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// LastValues returns the last value of every key of bucket, deletions
// left out; a bucket that does not exist yet holds none. One watch
// delivers them all: a Get per key would cost a round trip per worker
// of a large presence bucket.
func LastValues(ctx context.Context, js jetstream.JetStream, bucket string) ([]jetstream.KeyValueEntry, error) {
	return LastValuesOf(ctx, js, bucket, jetstream.AllKeys)
}

// LastValuesOf is LastValues for the keys that match keys, a subject
// filter such as "run.*".
func LastValuesOf(ctx context.Context, js jetstream.JetStream, bucket, keys string) ([]jetstream.KeyValueEntry, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	w, err := kv.Watch(ctx, keys, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", bucket, err)
	}
	defer func() { _ = w.Stop() }()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read bucket %s: the watch ended early", bucket)
			}
			if e == nil { // every value there was when the watch began
				return out, nil
			}
			out = append(out, e)
		case <-ctx.Done():
			return nil, fmt.Errorf("read bucket %s: %w", bucket, ctx.Err())
		}
	}
}

// RunsInProgress lists, sorted, the runs in the run bucket that are
// neither done nor failed: the runs a worker can join. Entries that do not
// decode are left out. Listing needs more than a worker or reader
// credential allows: they read their own run's entry only.
func RunsInProgress(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	return runsWhere(ctx, js, func(p schema.Phase) bool { return p != schema.PhaseDone && p != schema.PhaseFailed })
}

// RunsUnfinished lists, sorted, the runs in the run bucket that are not
// done: those in progress and those failed, which a controller may
// continue.
func RunsUnfinished(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	return runsWhere(ctx, js, func(p schema.Phase) bool { return p != schema.PhaseDone })
}

func runsWhere(ctx context.Context, js jetstream.JetStream, keep func(schema.Phase) bool) ([]string, error) {
	entries, err := LastValues(ctx, js, schema.RunBucket)
	if err != nil {
		return nil, err
	}
	var runs []string
	for _, e := range entries {
		if r, err := schema.DecodeRun(e.Value()); err == nil && keep(r.Phase) {
			runs = append(runs, e.Key())
		}
	}
	sort.Strings(runs)
	return runs, nil
}
