package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/evoq/evoq/internal/history"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// runDeleteCmd removes one run from a store or broker: its designs, its
// results, its work-queue consumer, its state and its workers' heartbeats.
// Other runs are untouched.
type runDeleteCmd struct {
	env   Env
	b     brokerFlags
	force bool
}

func (c *runDeleteCmd) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("run delete", "Deletes one run: its designs, results, consumer, state and heartbeats (evoq run delete [flags] RUN).\n"+
		"A running run is refused unless --force. On a broker with auth it needs the admin's connect file (--connect).", c.env.Stderr)
	c.b.register(fs, true)
	fs.BoolVar(&c.force, "force", false, "delete a run that is still starting or running")
	// The run ID may come before, between or after the flags.
	var id string
	var ids []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return err
			}
			return usageErr("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		ids = append(ids, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(ids) != 1 {
		return usageErr("want one run ID: evoq run delete [flags] RUN")
	}
	id = ids[0]
	if err := schema.ValidToken(id); err != nil {
		return usageErr("run %q: %v", id, err)
	}
	if err := c.b.validate(); err != nil {
		return err
	}
	log, err := (&logFlags{format: "text", level: "error"}).logger(c.env.Stderr)
	if err != nil {
		return err
	}
	s, err := open(&c.b, "evoq-run-delete", log)
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.waitConnected(ctx, log); err != nil {
		return err
	}
	ri, err := history.FromJS(s.js).Pick(ctx, id)
	if err != nil {
		return err
	}
	if !c.force && (ri.Phase == schema.PhaseRunning || ri.Phase == schema.PhaseStarting) {
		return usageErr("run %s is %s: stop its controller first, or give --force", id, ri.Phase)
	}
	n, err := deleteRun(ctx, s.js, id)
	if err != nil {
		return fmt.Errorf("delete run %s: %w", id, err)
	}
	fmt.Fprintf(c.env.Stdout, "deleted run %s: %d results, %d queued designs, %d heartbeats\n", id, n.results, n.designs, n.presence)
	return nil
}

type deleted struct{ results, designs, presence uint64 }

// deleteRun purges run's subjects from the streams, deletes its consumer
// and purges its keys from the buckets.
func deleteRun(ctx context.Context, js jetstream.JetStream, run string) (deleted, error) {
	var n deleted
	purge := func(stream, subject string, count *uint64) error {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("open stream %s: %w", stream, err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		*count = info.State.Subjects[subject]
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			return fmt.Errorf("purge %s from %s: %w", subject, stream, err)
		}
		return nil
	}
	if err := js.DeleteConsumer(ctx, schema.DesignStream, schema.ConsumerName(run)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return n, fmt.Errorf("delete consumer %s: %w", schema.ConsumerName(run), err)
	}
	if err := purge(schema.DesignStream, schema.DesignSubject(run), &n.designs); err != nil {
		return n, err
	}
	if err := purge(schema.ResultStream, schema.ResultSubject(run), &n.results); err != nil {
		return n, err
	}
	if err := purge("KV_"+schema.PresenceBucket, "$KV."+schema.PresenceBucket+"."+schema.PresenceKey(run, "*"), &n.presence); err != nil {
		return n, err
	}
	var state uint64
	if err := purge("KV_"+schema.RunBucket, "$KV."+schema.RunBucket+"."+run, &state); err != nil {
		return n, err
	}
	return n, nil
}
