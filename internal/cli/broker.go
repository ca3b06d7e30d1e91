package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/evoq/evoq/broker"
)

// brokerCmd runs the embedded broker alone, for controllers and workers on
// other hosts.
type brokerCmd struct {
	env         Env
	b           brokerFlags
	l           logFlags
	cl          clusterFlags
	connectFile string
}

func (c *brokerCmd) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("broker", "Runs the embedded NATS JetStream broker alone and declares evoq's streams and buckets.", c.env.Stderr)
	c.b.register(fs, false)
	c.l.register(fs)
	c.cl.register(fs)
	fs.StringVar(&c.connectFile, "connect-file", "", "write the broker URLs here (mode 0600) for controllers and workers")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := c.l.logger(c.env.Stderr)
	if err != nil {
		return err
	}
	if err := c.b.validate(); err != nil {
		return err
	}
	if err := c.cl.apply(&c.b.cfg); err != nil {
		return err
	}
	s, err := open(&c.b, "evoq-broker", log)
	if err != nil {
		return err
	}
	defer s.close()
	if err := c.cl.declare(ctx, s.js, log); err != nil {
		return err
	}
	if c.connectFile != "" {
		// The admin's file: for controllers (`evoq controller --connect`).
		cf := broker.ConnectFile{URLs: s.urls(), TLSCA: c.b.sec.caForClients()}
		if s.embedded.AdminCredential().Seed != "" {
			cf.SetCredential(s.embedded.AdminCredential())
		}
		if err := broker.WriteConnectFile(c.connectFile, cf); err != nil {
			return err
		}
	}
	fmt.Fprintln(c.env.Stdout, strings.Join(s.urls(), ","))
	log.WithField("url", s.url).Info("broker serving; SIGTERM or SIGINT stops it")
	<-ctx.Done()
	log.Info("broker stopping")
	return nil
}
