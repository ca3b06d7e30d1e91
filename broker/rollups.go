package broker

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// DenyRollups turns roll-ups off on stream, after edit (which may be
// nil) changed its config. A message with the header "Nats-Rollup: all"
// purges every message of its stream, and the server asks of its
// publisher nothing but the right to publish that one message on one of
// the stream's subjects: on a stream with roll-ups on, a worker's right
// to store a heartbeat or a checkpoint's chunk is the right to purge
// every run's heartbeats or the whole checkpoint store. So the streams
// that run credentials write to a key or a chunk of take no roll-up:
// the presence bucket, whose keys are only put and deleted, and the
// checkpoint buckets, whose metadata the controller replaces by a
// publish and a purge of the older message instead.
func DenyRollups(ctx context.Context, js jetstream.JetStream, stream string, edit func(*jetstream.StreamConfig)) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowRollup && edit == nil {
		return nil
	}
	if edit != nil {
		edit(&cfg)
	}
	cfg.AllowRollup = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("turn roll-ups off on stream %s: %w", stream, accountErr(js, err))
	}
	return nil
}

// Answerable reports whether an answer of run's controller may go to
// reply: the inbox of a worker credential of run (InboxPrefix), or a
// plain inbox of a client without auth. An answer never goes where a
// request's sender names, or a worker could make the controller publish
// into another subject, or into another run's inboxes.
func Answerable(reply, run string) bool {
	if strings.HasPrefix(reply, InboxPrefix(RoleWorker, run)+".") {
		return true
	}
	return strings.HasPrefix(reply, "_INBOX.") && !strings.HasPrefix(reply, "_INBOX.evoq-")
}
