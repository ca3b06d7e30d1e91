package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

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
	return readRun(ctx, js, schema.ResultStream, schema.ResultSubject(run), "results", func(seq uint64, t time.Time, data []byte) error {
		res, err := schema.DecodeResult(data)
		return fn(seq, t, res, err)
	})
}

// rawFunc receives one stored message of a run: its stream sequence, time
// and body.
type rawFunc func(seq uint64, t time.Time, data []byte) error

// readRun hands fn the messages of subject on stream in stream order,
// read with ReadStored, until it has caught up with those stored when it
// began. what names them in errors. ReadStored's consumer is never
// deleted by its client, which a reader's credential may not do: nats.go's
// ordered consumers delete the one they replace on every fetch.
func readRun(ctx context.Context, js jetstream.JetStream, stream, subject, what string, fn rawFunc) error {
	want, err := countSubject(ctx, js, stream, subject)
	if err != nil || want == 0 {
		return err
	}
	var got uint64
	err = ReadStored(ctx, js, stream, subject, false, func(m jetstream.Msg) error {
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("%s metadata: %w", what, err)
		}
		got++
		if err := fn(meta.Sequence.Stream, meta.Timestamp, m.Data()); err != nil {
			return err
		}
		if got >= want {
			return ErrStopReading
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s on %s: read %d of %d: %w", what, subject, got, want, err)
	}
	return nil
}

// countResults is the number of stored results of run.
func countResults(ctx context.Context, js jetstream.JetStream, run string) (uint64, error) {
	return countSubject(ctx, js, schema.ResultStream, schema.ResultSubject(run))
}

// countSubject is the number of messages of subject stored on stream; 0
// when the stream does not exist (a store from before it).
func countSubject(ctx context.Context, js jetstream.JetStream, stream, subject string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("stream %s info: %w", stream, err)
	}
	return info.State.Subjects[subject], nil
}
