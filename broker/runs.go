package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// LastValues returns the last value of every key of bucket, deletions
// left out; a bucket that does not exist yet holds none. One consumer
// delivers them all: a Get per key would cost a round trip per worker of
// a large presence bucket.
func LastValues(ctx context.Context, js jetstream.JetStream, bucket string) ([]jetstream.KeyValueEntry, error) {
	return LastValuesOf(ctx, js, bucket, jetstream.AllKeys)
}

// LastValuesOf is LastValues for the keys that match keys, a subject
// filter such as "run.*". It reads with ReadStored rather than a key
// watcher, which a reader's credential could not stop without waiting.
func LastValuesOf(ctx context.Context, js jetstream.JetStream, bucket, keys string) ([]jetstream.KeyValueEntry, error) {
	stream := kvStream + bucket
	// A key put again while the read goes on comes twice: its last value
	// then, and its new one. The later wins, as a deletion does.
	last := map[string]*lastValue{}
	var order []string
	err := ReadStored(ctx, js, stream, kvKey(bucket, keys), true, func(m jetstream.Msg) error {
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		key := strings.TrimPrefix(m.Subject(), kvPrefix+bucket+".")
		if _, seen := last[key]; !seen {
			order = append(order, key)
		}
		last[key] = nil
		if op := m.Headers().Get(kvOperationHdr); op != "DEL" && op != "PURGE" {
			last[key] = &lastValue{bucket: bucket, key: key, value: m.Data(), revision: meta.Sequence.Stream, created: meta.Timestamp}
		}
		return nil
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", bucket, err)
	}
	var out []jetstream.KeyValueEntry
	for _, key := range order {
		if e := last[key]; e != nil {
			out = append(out, *e)
		}
	}
	return out, nil
}

// kvOperationHdr is the header that marks a key's deletion or purge.
const kvOperationHdr = "KV-Operation"

// lastValue is a key's last value, as LastValuesOf read it.
type lastValue struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
}

func (e lastValue) Bucket() string                  { return e.bucket }
func (e lastValue) Key() string                     { return e.key }
func (e lastValue) Value() []byte                   { return e.value }
func (e lastValue) Revision() uint64                { return e.revision }
func (e lastValue) Created() time.Time              { return e.created }
func (e lastValue) Delta() uint64                   { return 0 }
func (e lastValue) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

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
