package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/schema"
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
	runFlag := fs.String("run", "", "the run to delete (or give it as the argument)")
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
	if *runFlag != "" {
		ids = append(ids, *runFlag)
	}
	if len(ids) != 1 {
		return usageErr("want one run ID: evoq run delete [flags] RUN (or --run RUN)")
	}
	id = ids[0]
	if err := schema.ValidToken(id); err != nil {
		return usageErr("run %q: %v", id, err)
	}
	if err := c.b.validate(); err != nil {
		return err
	}
	if cr := c.b.sec.credential; cr != nil && cr.Role != broker.RoleAdmin && cr.Role != broker.RoleSite {
		return usageErr("--connect %s holds a %s credential, which may not delete a run: give the admin's connect file ('evoq broker --connect-file', or one naming the trust root)", c.b.sec.connect, cr.Role)
	}
	// In operator mode the run is an account of its own: its admin
	// deletes it.
	c.b.run = id
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
	if !c.force {
		if l, _ := broker.LeaseHolder(ctx, s.js, id); l != nil {
			return usageErr("run %s has a live controller (pid %d on %s): stop it first, or give --force", id, l.PID, l.Host)
		}
		if ri.Phase == schema.PhaseRunning || ri.Phase == schema.PhaseStarting || ri.Phase == schema.PhaseDraining {
			return usageErr("run %s is %s: stop its controller first, or give --force", id, ri.Phase)
		}
	}
	n, err := broker.DeleteRun(ctx, s.js, id)
	if err != nil {
		return fmt.Errorf("delete run %s: %w", id, err)
	}
	fmt.Fprintf(c.env.Stdout, "deleted run %s: %d results, %d queued designs, %d heartbeats", id, n.Results, n.Designs, n.Presence)
	if n.Checkpoints {
		fmt.Fprint(c.env.Stdout, ", its checkpoint bucket")
	}
	fmt.Fprintln(c.env.Stdout)
	if ri.Run != nil && ri.Run.Checkpoints != nil && ri.Run.Checkpoints.Store == schema.CheckpointDir {
		fmt.Fprintf(c.env.Stdout, "its checkpoints in %s are left as they are\n", filepath.Join(ri.Run.Checkpoints.Dir, id))
	}
	return nil
}
