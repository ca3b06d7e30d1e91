package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/evoq/evoq/broker"
	"github.com/nats-io/nats.go"
)

// runRevokeCmd revokes a run's credential on a broker cluster in operator
// mode: every node closes its connections and refuses it from then on.
type runRevokeCmd struct {
	env                     Env
	nats, trust, credential string
}

func (c *runRevokeCmd) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("run revoke", "Revokes a credential of a run on a broker cluster in operator mode (evoq broker --trust): every node\n"+
		"closes its connections and refuses it from then on. The credential is named by the connect file that holds it.", c.env.Stderr)
	fs.StringVar(&c.nats, "nats", "", "the brokers' URLs, comma-separated")
	fs.StringVar(&c.trust, "trust", "", "the cluster's trust root (evoq broker init)")
	fs.StringVar(&c.credential, "credential", "", "the connect file whose credential is revoked (a worker's or a reader's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.nats == "" || c.trust == "" || c.credential == "" {
		return usageErr("--nats, --trust and --credential: give all three")
	}
	trust, err := broker.LoadTrust(c.trust)
	if err != nil {
		return usageErr("--trust: %v", err)
	}
	cf, err := broker.ReadConnectFile(c.credential)
	if err != nil {
		return usageErr("--credential: %v", err)
	}
	cred, ok := cf.Credential()
	if !ok || cred.JWT == "" {
		return usageErr("--credential %s: the file holds no credential of a broker in operator mode", c.credential)
	}
	pub, err := cred.PublicKey()
	if err != nil {
		return usageErr("--credential %s: %v", c.credential, err)
	}
	opts, err := broker.TLSOptions(cf.TLSCA, "", "")
	if err != nil {
		return err
	}
	opts = append(opts, func(o *nats.Options) error { o.Servers = strings.Split(c.nats, ","); return nil })
	if err := trust.Revoke(ctx, opts, cred.Run, pub); err != nil {
		return fmt.Errorf("revoke the %s credential of run %s: %w", cred.Role, cred.Run, err)
	}
	fmt.Fprintf(c.env.Stderr, "evoq run revoke: the %s credential %s of run %s is revoked on every node\n", cred.Role, pub, cred.Run)
	return nil
}
