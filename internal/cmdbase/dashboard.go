package cmdbase

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/evoq/evoq/internal/dashboard"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// DashboardFlags are --dashboard and --dashboard-token-file, shared by
// evoq run, evoq controller and evoq dashboard.
type DashboardFlags struct {
	Addr      string
	TokenFile string
	token     string
}

// Register adds the flags; def is --dashboard's default (empty: off).
func (d *DashboardFlags) Register(fs *flag.FlagSet, def string) {
	fs.StringVar(&d.Addr, "dashboard", def, "serve a live dashboard of the run on this host:port (read-only; 127.0.0.1:0 picks a free port; "+
		"an address that is not loopback needs --dashboard-token-file)")
	fs.StringVar(&d.TokenFile, "dashboard-token-file", "", "a file holding the token the dashboard asks of every browser (open the page as /?token=...); "+
		"needed when --dashboard is not a loopback address")
}

// Validate reads the token file and refuses a dashboard that other hosts
// could reach without a token, naming the flag that is missing.
func (d *DashboardFlags) Validate() error {
	if d.Addr == "" {
		if d.TokenFile != "" {
			return UsageErr("--dashboard-token-file without --dashboard: there is no dashboard to protect")
		}
		return nil
	}
	if d.TokenFile != "" {
		data, err := os.ReadFile(d.TokenFile)
		if err != nil {
			return UsageErr("--dashboard-token-file: %v", err)
		}
		d.token = strings.TrimSpace(string(data))
		if len(d.token) < 16 {
			return UsageErr("--dashboard-token-file %s: the token has %d characters; use at least 16 (openssl rand -hex 16 > FILE)", d.TokenFile, len(d.token))
		}
	}
	err := d.config().Validate()
	switch {
	case errors.Is(err, dashboard.ErrTokenNeeded):
		return UsageErr("--dashboard %s is not a loopback address, so anyone who can reach this host could read the run: "+
			"give --dashboard-token-file FILE, or listen on 127.0.0.1 and reach it through an SSH tunnel (see docs/OPERATING.md, Dashboard)", d.Addr)
	case err != nil:
		return UsageErr("--dashboard %v", err)
	}
	return nil
}

func (d *DashboardFlags) config() dashboard.Config {
	return dashboard.Config{Addr: d.Addr, Token: d.token}
}

// Start starts the dashboard of run, when --dashboard is given, and says
// where it is. A port in use is an error naming the flag.
func (d *DashboardFlags) Start(ctx context.Context, js jetstream.JetStream, run string, opt dashboard.Options, log logrus.FieldLogger) (*dashboard.Dashboard, error) {
	if d.Addr == "" {
		return nil, nil
	}
	db, err := dashboard.Start(ctx, js, run, d.config(), opt, log)
	if errors.Is(err, dashboard.ErrAddrInUse) {
		return nil, UsageErr("--dashboard %s: %v; choose another port (127.0.0.1:0 picks a free one)", d.Addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("--dashboard %s: %w", d.Addr, err)
	}
	return db, nil
}
