package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/evoq/evoq/space"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// ErrNoSeeds means an earlier run has no design evaluated ok that fits the
// new run's search space: there is nothing to seed it with.
var ErrNoSeeds = errors.New("no design evaluated ok that fits this search space")

// SeedsFrom takes the best n designs of the earlier run as the first
// designs (Config.Seeds) of a new run in sp, best first. n defaults to
// InitDefault: the seeds stand in for the random initial designs. A
// design that does not fit sp is logged and left out, so fewer than n may
// come back; none at all is ErrNoSeeds.
func SeedsFrom(ctx context.Context, js jetstream.JetStream, run string, sp *space.Space, n int, log logrus.FieldLogger) ([]map[string]any, error) {
	if sp == nil {
		return nil, &schema.FieldError{Err: ErrConfig, Field: "Space", Reason: "no search space to check the seeds of run " + run + " against"}
	}
	if n <= 0 {
		n = InitDefault
	}
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	// The run's own fold, with a pool of n that replaces its worst member:
	// what is left is the n best designs evaluated ok, each counted once
	// however often it was evaluated.
	// The earlier run's budget and rules, from its record, say which of
	// its results count.
	rec, err := LoadRun(ctx, js, run, log)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("run %s: no such run on this broker: %w", run, ErrNoSeeds)
	}
	fold := runstate.NewFold(runstate.NewTally(run, rec.Budget, runstate.RulesOf(rec)), 1, n, runstate.ReplaceWorst)
	err = broker.ReadResults(ctx, js, run, func(_ uint64, _ time.Time, r *schema.Result, err error) error {
		fold.Apply(r, err)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the results of run %s: %w", run, err)
	}
	members := append([]runstate.Member(nil), fold.Pool().Members()...)
	sort.SliceStable(members, func(i, j int) bool { return members[i].Fitness > members[j].Fitness })
	var seeds []map[string]any
	for _, m := range members {
		g, err := sp.Validate(m.Design.Genome)
		if err != nil {
			log.WithError(err).WithFields(logrus.Fields{"from_run": run, "design": m.Design.ID}).
				Warn("a design outside this search space is not used as a seed")
			continue
		}
		seeds = append(seeds, g)
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("run %s: %w", run, ErrNoSeeds)
	}
	log.WithFields(logrus.Fields{"from_run": run, "seeds": len(seeds), "best": members[0].Fitness}).Info("seeding the initial population")
	return seeds, nil
}
