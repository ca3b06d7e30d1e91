package inspect

import (
	"context"
	"fmt"

	"github.com/evoq/evoq/internal/cmdbase"
	"github.com/evoq/evoq/internal/dashboard"
	"github.com/sirupsen/logrus"
)

// DashboardAddrDefault is where evoq dashboard listens unless told.
const DashboardAddrDefault = "127.0.0.1:8765"

// Dashboard serves a run's live dashboard from a broker or a store.
func Dashboard(env cmdbase.Env) Command { return &dashboardCmd{env: env} }

// dashboardCmd serves the live page of a run that runs elsewhere, or of a
// stopped run's store. It reads as any reader does: a reader's credential
// suffices, and the consumers it follows the streams with are removed by
// the broker once it is gone.
type dashboardCmd struct {
	env  cmdbase.Env
	src  sourceFlags
	dash cmdbase.DashboardFlags
}

func (c *dashboardCmd) Run(ctx context.Context, args []string) error {
	fs := cmdbase.NewFlagSet("dashboard", "Serves a live dashboard of a run in the browser, read-only, until interrupted: its evaluations, slots, best fitness,\n"+
		"pool, front, learning curves, warnings and hosts, updated as its results arrive.", c.env.Stderr)
	c.src.register(fs)
	c.dash.Register(fs, DashboardAddrDefault)
	if err := cmdbase.Parse(fs, args); err != nil {
		return err
	}
	if c.dash.Addr == "" {
		return cmdbase.UsageErr("--dashboard: empty; give host:port, such as %s", DashboardAddrDefault)
	}
	if err := c.dash.Validate(); err != nil {
		return err
	}
	r, ri, err := c.src.open(ctx, fs, c.env.Stderr)
	if err != nil {
		return err
	}
	defer r.Close()
	log := logrus.New()
	log.SetOutput(c.env.Stderr)
	log.SetLevel(logrus.WarnLevel)
	db, err := c.dash.Start(ctx, r.JS(), ri.ID, dashboard.Options{}, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.env.Stderr, "evoq dashboard: run %s at %s (interrupt to stop)\n", ri.ID, db.URL())
	<-db.Done()
	return nil
}
