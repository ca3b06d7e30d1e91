package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// brokerCmd runs the embedded broker alone, for controllers and workers on
// other hosts.
type brokerCmd struct {
	env         Env
	b           brokerFlags
	l           logFlags
	cl          clusterFlags
	connectFile string
	trust       string
}

func (c *brokerCmd) Run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "init" {
		return c.init(args[1:])
	}
	fs := newFlagSet("broker", "Runs the embedded NATS JetStream broker alone and declares evoq's streams and buckets.\n"+
		"'evoq broker init --dir DIR' makes a trust root for a cluster with auth (see --trust).", c.env.Stderr)
	c.b.register(fs, false)
	c.l.register(fs)
	c.cl.register(fs)
	fs.StringVar(&c.connectFile, "connect-file", "", "write the broker URLs here (mode 0600) for controllers and workers")
	fs.StringVar(&c.trust, "trust", "", "operator mode: the trust root file every node of the cluster shares (made by 'evoq broker init', or here if absent); each run gets an account of its own and credentials are user JWTs")
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
	if err := c.cl.check(); err != nil {
		return err // before a trust root is made
	}
	c.trust = defaultTrust(&c.b, c.trust, c.cl.routes == "")
	if c.trust != "" {
		if err := c.useTrust(log); err != nil {
			return err
		}
	}
	if err := c.cl.apply(&c.b.cfg); err != nil {
		return err
	}
	s, err := open(&c.b, "evoq-broker", log)
	if err != nil {
		return err
	}
	defer s.close()
	if c.b.cfg.Trust == nil {
		// In operator mode each run's streams are in its own account,
		// declared by its controller.
		if err := c.cl.declare(ctx, s.js, log); err != nil {
			return err
		}
	}
	if c.connectFile != "" {
		if err := c.writeAdminFile(ctx, s, log); err != nil {
			return err
		}
	}
	fmt.Fprintln(c.env.Stdout, strings.Join(s.urls(), ","))
	log.WithField("url", s.url).Info("broker serving; SIGTERM or SIGINT stops it")
	<-ctx.Done()
	log.Info("broker stopping")
	return nil
}

// writeAdminFile writes the admin's connect file, for controllers (`evoq
// controller --connect`). A cluster's node lists every node's client URL
// it has learned, so that a controller given the file fails over to the
// other nodes when this one goes: the nodes tell their clients each
// other's URLs once their routes connect, which may be after this node
// starts, so the file is written again each time the list grows. URLs are
// only added: a node that is down now is one to fail over to later. The
// node's own list (what it tells its clients) is read again every second
// until ctx ends as well: a client hears of a change only with its next
// INFO, which a loaded node may send late.
func (c *brokerCmd) writeAdminFile(ctx context.Context, s *session, log logrus.FieldLogger) error {
	cf := broker.ConnectFile{URLs: s.urls(), TLSCA: c.b.sec.caForClients()}
	if s.embedded.AdminCredential().Seed != "" {
		cf.SetCredential(s.embedded.AdminCredential())
	}
	if c.b.cfg.Trust != nil {
		cf.Role, cf.Trust = broker.RoleAdmin, c.trust
	}
	if !c.cl.clustered() {
		return broker.WriteConnectFile(c.connectFile, cf)
	}
	var (
		mu      sync.Mutex
		written bool
	)
	write := func(known []string) error {
		mu.Lock()
		defer mu.Unlock()
		urls := addURLs(cf.URLs, known)
		if written && len(urls) == len(cf.URLs) {
			return nil
		}
		cf.URLs, written = urls, true
		if err := broker.WriteConnectFile(c.connectFile, cf); err != nil {
			return err
		}
		log.WithFields(logrus.Fields{"file": c.connectFile, "urls": len(urls)}).Info("admin connect file written with the cluster's client URLs known so far")
		return nil
	}
	again := func(known []string) {
		if err := write(known); err != nil {
			log.WithError(err).Warn("the admin connect file could not be written again with the cluster's new client URLs")
		}
	}
	s.nc.SetDiscoveredServersHandler(func(nc *nats.Conn) { again(nc.DiscoveredServers()) })
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if v, err := s.embedded.Server().Varz(nil); err == nil {
					again(v.ClientConnectURLs)
				}
			}
		}
	}()
	return write(s.nc.DiscoveredServers())
}

// addURLs adds to own the URLs of other nodes not among them, with own's
// scheme: the nodes announce host:port only.
func addURLs(own, others []string) []string {
	scheme := "nats://"
	if len(own) > 0 {
		if i := strings.Index(own[0], "://"); i >= 0 {
			scheme = own[0][:i+3]
		}
	}
	seen := map[string]bool{}
	for _, u := range own {
		seen[hostPort(u)] = true
	}
	out := slices.Clone(own)
	for _, u := range others {
		if hp := hostPort(u); !seen[hp] {
			seen[hp] = true
			out = append(out, scheme+hp)
		}
	}
	return out
}

// hostPort is a URL without its scheme and user info.
func hostPort(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	if i := strings.LastIndex(u, "@"); i >= 0 {
		u = u[i+1:]
	}
	return u
}

// useTrust puts the broker in operator mode with the trust root --trust
// names, made in its directory if there is none yet.
func (c *brokerCmd) useTrust(log logrus.FieldLogger) error {
	abs, _, err := serveTrust(&c.b, c.trust, log)
	c.trust = abs
	return err
}

// serveTrust puts b's embedded broker in operator mode with the trust
// root at path, made in its directory if there is none yet; it returns
// path made absolute.
func serveTrust(b *brokerFlags, path string, log logrus.FieldLogger) (string, *broker.Trust, error) {
	if b.sec.insecure {
		return path, nil, usageErr("--trust and --insecure: give one or the other")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path, nil, usageErr("--trust %s: %v", path, err)
	}
	var trust *broker.Trust
	if _, err := os.Stat(abs); err == nil {
		trust, err = broker.LoadTrust(abs)
		if err != nil {
			return abs, nil, usageErr("--trust: %v", err)
		}
	} else {
		var created bool
		if trust, created, err = broker.InitTrustAt(abs); err != nil {
			return abs, nil, usageErr("--trust: %v", err)
		}
		if created {
			log.WithField("trust", abs).Warn("made a new trust root (mode 0600): give it to every node of a cluster, and to the tools that read the store, with --trust")
		}
	}
	b.cfg.Auth, b.cfg.Trust = false, trust
	return abs, trust, nil
}

// init makes a trust root: `evoq broker init --dir DIR`.
func (c *brokerCmd) init(args []string) error {
	fs := newFlagSet("broker init", "Makes a trust root for brokers in operator mode: "+broker.TrustFile+" (mode 0600) in --dir, shared\n"+
		"by every node of a cluster (a shared file system, or copied) and given to each with --trust.", c.env.Stderr)
	dir := fs.String("dir", "", "directory of the trust root (created 0700 if absent)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usageErr("--dir: give the directory of the trust root")
	}
	_, created, err := broker.InitTrust(*dir)
	if err != nil {
		return err
	}
	path, _ := filepath.Abs(filepath.Join(*dir, broker.TrustFile))
	if !created {
		fmt.Fprintf(c.env.Stdout, "%s exists: a trust root is made once; every node keeps using it\n", path)
		return nil
	}
	fmt.Fprintf(c.env.Stdout, "%s\n", path)
	fmt.Fprintf(c.env.Stderr, "evoq broker init: made the trust root %s (mode 0600): it holds the keys to every run; give every node --trust %s\n", path, path)
	return nil
}

// defaultTrust is the trust root a broker serving b's store runs with:
// the one given; else the store's own (a store made in operator mode);
// else, for a single `evoq broker` with auth (solo) on a store that does
// not keep the nkey users of before, a new one in the store. A cluster's
// nodes must share one, so it is never made per node; "" is none.
func defaultTrust(b *brokerFlags, given string, solo bool) string {
	own := broker.StoreTrustFile(b.dir)
	switch {
	case given != "":
		return given
	case fileExists(own):
		return own
	case solo && b.cfg.Auth && !broker.KeepsNkeyUsers(b.dir):
		return own
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
