package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ResultsFetchWait bounds the wait for one batch of results.
const ResultsFetchWait = 5 * time.Second

// resultsBatch is the number of results fetched at once.
const resultsBatch = 512

// ErrStopReading, returned by a ResultFunc, ends ReadResults early
// without an error.
var ErrStopReading = errors.New("stop reading results")

// ResultFunc receives one stored result: its stream sequence and time, and
// the decoded result or why it did not decode. Returning ErrStopReading
// ends the read; any other error ends it with that error.
type ResultFunc func(seq uint64, t time.Time, r *schema.Result, err error) error

// ReadResults hands fn the results of run in stream order, read with an
// ordered consumer, and returns when it has caught up with the results
// stored when it began. Every reader of a run's whole history (the
// controller seeding a run from an earlier one, the tools that look at a
// run) reads it here, so they agree on where the history ends.
func ReadResults(ctx context.Context, js jetstream.JetStream, run string, fn ResultFunc) error {
	want, err := countResults(ctx, js, run)
	if err != nil || want == 0 {
		return err
	}
	cons, err := js.OrderedConsumer(ctx, schema.ResultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schema.ResultSubject(run)}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("results consumer: %w", err)
	}
	var got uint64
	for got < want {
		n, done, err := resultsBatchOf(cons, int(min(resultsBatch, want-got)), fn, &got)
		switch {
		case errors.Is(err, ErrStopReading):
			return nil
		case err != nil:
			return err
		case done:
			return nil
		case n == 0:
			return fmt.Errorf("results of %s: read %d of %d, then none came within %s", run, got, want, ResultsFetchWait)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// resultsBatchOf fetches and hands on up to size results, no more than
// are left to read, so that the fetch need not wait out its expiry; done
// reports that the consumer has caught up with the stream.
func resultsBatchOf(cons jetstream.Consumer, size int, fn ResultFunc, got *uint64) (n int, done bool, err error) {
	msgs, err := cons.Fetch(size, jetstream.FetchMaxWait(ResultsFetchWait))
	if err != nil {
		return 0, false, fmt.Errorf("fetch results: %w", err)
	}
	for m := range msgs.Messages() {
		n++
		*got++
		meta, merr := m.Metadata()
		if merr != nil {
			return n, false, fmt.Errorf("result metadata: %w", merr)
		}
		res, derr := schema.DecodeResult(m.Data())
		if err = fn(meta.Sequence.Stream, meta.Timestamp, res, derr); err != nil {
			for range msgs.Messages() { // drain the rest of the batch
			}
			return n, false, err
		}
		done = meta.NumPending == 0
	}
	if err := msgs.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return n, false, fmt.Errorf("fetch results: %w", err)
	}
	return n, done, nil
}

// countResults is the number of stored results of run.
func countResults(ctx context.Context, js jetstream.JetStream, run string) (uint64, error) {
	st, err := js.Stream(ctx, schema.ResultStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("results stream: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(schema.ResultSubject(run)))
	if err != nil {
		return 0, fmt.Errorf("results stream info: %w", err)
	}
	return info.State.Subjects[schema.ResultSubject(run)], nil
}
