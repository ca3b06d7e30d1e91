package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// Deleted counts what DeleteRun removed.
type Deleted struct {
	Results, Designs, Presence, Reports uint64
	// Checkpoints is whether the run's checkpoint bucket was deleted.
	Checkpoints bool
}

// DeleteRun removes one run from the broker: its work-queue consumer, the
// designs still queued, its results and reports, its workers' heartbeats, its
// checkpoint bucket (a run's own) and its record. A shared checkpoint
// directory is the user's file system: it is left alone. Other runs share the streams and buckets and are untouched: each
// of run's subjects is purged, nothing is deleted whole. Deleting a run
// that is gone removes nothing and is no error.
func DeleteRun(ctx context.Context, js jetstream.JetStream, run string) (Deleted, error) {
	var n Deleted
	if err := js.DeleteConsumer(ctx, schema.DesignStream, schema.ConsumerName(run)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return n, fmt.Errorf("delete consumer %s: %w", schema.ConsumerName(run), err)
	}
	var err error
	if n.Designs, err = purgeSubject(ctx, js, schema.DesignStream, schema.DesignSubject(run)); err != nil {
		return n, err
	}
	if n.Results, err = purgeSubject(ctx, js, schema.ResultStream, schema.ResultSubject(run)); err != nil {
		return n, err
	}
	if n.Reports, err = purgeSubject(ctx, js, schema.ReportStream, schema.ReportSubject(run)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return n, err
	}
	// A bucket is a stream named KV_<bucket>, a key the subject $KV.<bucket>.<key>.
	if n.Presence, err = purgeSubject(ctx, js, "KV_"+schema.PresenceBucket, "$KV."+schema.PresenceBucket+"."+schema.PresenceKey(run, "*")); err != nil {
		return n, err
	}
	switch err := js.DeleteObjectStore(ctx, schema.CheckpointBucket(run)); {
	case err == nil:
		n.Checkpoints = true
	case !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound):
		return n, fmt.Errorf("delete checkpoint bucket %s: %w", schema.CheckpointBucket(run), err)
	}
	if _, err = purgeSubject(ctx, js, "KV_"+schema.RunBucket, "$KV."+schema.RunBucket+"."+run); err != nil {
		return n, err
	}
	return n, nil
}

// purgeSubject removes the messages of subject, which may hold a
// wildcard, from stream and says how many there were.
func purgeSubject(ctx context.Context, js jetstream.JetStream, stream, subject string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("open stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		return 0, fmt.Errorf("purge %s from %s: %w", subject, stream, err)
	}
	// The counts are per matching subject: a wildcard has no entry of its
	// own.
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}
