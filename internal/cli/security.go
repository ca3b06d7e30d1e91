package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/cmdbase"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// securityFlags are auth and TLS: for the embedded broker the server's
// side, for an external one (--nats, --connect) the client's.
type securityFlags struct {
	insecure, auth         bool
	tlsCert, tlsKey, tlsCA string
	tlsVerify              bool
	connect                string // a connect file with the URLs and credential of an external broker
	clientOpts             []nats.Option
	credential             *broker.Credential // from --connect
	fileCA                 string             // the CA named in --connect
	trust                  *broker.Trust      // the trust root an admin's --connect names (operator mode)
	expires                time.Time          // when the credentials minted with trust expire; zero: never
	serverTLS              bool
	listenHost             string
	// creds and nkey are a credential of an external broker, a site's
	// NATS: a .creds file or an nkey seed file (NATS_CREDS, NATS_NKEY
	// when not given).
	creds, nkey string
	// workerCreds and readerCreds are the credentials a controller on a
	// site's NATS hands its workers and readers in their connect files.
	workerCreds, readerCreds string
	// sharedCredential is set when a connect file written for workers or
	// readers carries the controller's own credential (see connectFile).
	sharedCredential bool
}

// registerCreds registers the flags of a credential of an external
// broker, as the nats CLI names them.
func (s *securityFlags) registerCreds(fs *flag.FlagSet) { cmdbase.RegisterCreds(fs, &s.creds, &s.nkey) }

// registerHandOn registers the credentials a controller on a site's NATS
// writes into its workers' and readers' connect files.
func (s *securityFlags) registerHandOn(fs *flag.FlagSet) {
	fs.StringVar(&s.workerCreds, "worker-creds", "", "NATS .creds file for the workers, written into the --connect-file (default: the controller's own credential, with a warning: the workers then hold the controller's rights)")
	fs.StringVar(&s.readerCreds, "reader-creds", "", "NATS .creds file for readers (evoq status, export), written into the reader's connect file beside --connect-file (default: as --worker-creds)")
}

func (s *securityFlags) register(fs *flag.FlagSet, server, withConnect bool) {
	if server {
		fs.BoolVar(&s.insecure, "insecure", false, "let clients connect without credentials although the broker listens beyond loopback (logged as a warning)")
		fs.BoolVar(&s.auth, "auth", false, "require credentials on a loopback listen address too (beyond loopback they are required unless --insecure)")
		fs.BoolVar(&s.tlsVerify, "tls-verify", false, "mutual TLS: clients must present a certificate signed by --tls-ca")
	}
	fs.StringVar(&s.tlsCert, "tls-cert", "", "TLS certificate (PEM): the embedded broker's, or this client's for mutual TLS")
	fs.StringVar(&s.tlsKey, "tls-key", "", "key of --tls-cert (PEM)")
	fs.StringVar(&s.tlsCA, "tls-ca", "", "CA certificates (PEM): that sign clients' certificates (broker) or the broker's (client)")
	if withConnect {
		fs.StringVar(&s.connect, "connect", "", "connect file of an external broker (written by 'evoq broker --connect-file'): URLs and credential")
		s.registerCreds(fs)
	}
}

// isLoopback reports whether host only accepts connections from this
// machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// server checks the flags of an embedded broker listening on host and sets
// cfg's auth and TLS.
func (s *securityFlags) server(host string, cfg *broker.Config) error {
	if s.insecure && s.auth {
		return usageErr("--insecure and --auth: give one or the other")
	}
	if s.workerCreds != "" || s.readerCreds != "" {
		return usageErr("--worker-creds and --reader-creds hand on a site's credentials (with --nats or --connect); evoq's own broker mints its workers' and readers'")
	}
	if s.creds != "" || s.nkey != "" {
		return usageErr("--creds and --nkey are credentials of an external broker: give its URL with --nats (or $NATS_URL)")
	}
	s.listenHost = host
	cfg.Auth = s.auth || (!isLoopback(host) && !s.insecure)
	if (s.tlsCert == "") != (s.tlsKey == "") {
		return usageErr("--tls-cert and --tls-key: give both or neither")
	}
	if s.tlsVerify && s.tlsCA == "" {
		return usageErr("--tls-verify: needs --tls-ca, the CA that signs the clients' certificates")
	}
	if s.tlsCA != "" && s.tlsCert == "" {
		return usageErr("--tls-ca: the broker needs --tls-cert and --tls-key to serve TLS")
	}
	cfg.TLSCert, cfg.TLSKey, cfg.TLSCA, cfg.TLSVerify = s.tlsCert, s.tlsKey, s.tlsCA, s.tlsVerify
	s.serverTLS = s.tlsCert != ""
	return nil
}

// client checks the flags of a client of an external broker and builds its
// options; it returns the URLs of --connect, if given.
func (s *securityFlags) client() (urls string, run string, err error) {
	if s.insecure || s.auth || s.tlsVerify {
		return "", "", usageErr("--insecure, --auth and --tls-verify set up the embedded broker; with --nats or --connect the broker is external")
	}
	if (s.tlsCert == "") != (s.tlsKey == "") {
		return "", "", usageErr("--tls-cert and --tls-key: give both or neither")
	}
	ca := s.tlsCA
	if s.connect != "" {
		cf, err := broker.ReadConnectFile(s.connect)
		if err != nil {
			return "", "", usageErr("--connect: %v", err)
		}
		opts, err := cf.Options()
		if err != nil {
			return "", "", usageErr("--connect %s: %v", s.connect, err)
		}
		s.clientOpts = append(s.clientOpts, opts...)
		if c, ok := cf.Credential(); ok {
			s.credential = &c
		}
		if cf.Trust != "" {
			if s.trust, err = broker.LoadTrust(cf.Trust); err != nil {
				return "", "", usageErr("--connect %s: %v", s.connect, err)
			}
		}
		s.fileCA = cf.TLSCA
		urls, run = strings.Join(cf.URLs, ","), cf.Run
	}
	if err := s.siteCredential(); err != nil {
		return "", "", err
	}
	if ca != "" || s.tlsCert != "" {
		opts, err := broker.TLSOptions(ca, s.tlsCert, s.tlsKey)
		if err != nil {
			return "", "", usageErr("%v", err)
		}
		s.clientOpts = append(s.clientOpts, opts...)
	}
	return urls, run, nil
}

// siteCredential reads --creds or --nkey (else $NATS_CREDS or
// $NATS_NKEY, unless a connect file carries a credential) into the
// client's options.
func (s *securityFlags) siteCredential() error {
	sc := cmdbase.SiteCreds{Creds: s.creds, Nkey: s.nkey}
	if err := sc.Load(s.connect, s.credential != nil); err != nil {
		return err
	}
	s.creds, s.nkey = sc.Creds, sc.Nkey
	if sc.Credential != nil {
		s.credential = sc.Credential
		s.clientOpts = append(s.clientOpts, sc.Credential.Options()...)
	}
	return nil
}

// credentialName says which credential a client presented, for an
// error: never the secret, only where it came from.
func (s *securityFlags) credentialName(url string) string {
	switch {
	case s.credential != nil && s.connect != "":
		c := s.credential
		if c.Role == broker.RoleSite {
			return "the credential in --connect " + s.connect
		}
		return fmt.Sprintf("the %s credential of run %q in --connect %s", c.Role, c.Run, s.connect)
	case s.creds != "":
		return "the credentials in " + s.creds
	case s.nkey != "":
		return "the nkey in " + s.nkey
	case broker.HasUserInfo(url):
		return "the user and password (or token) in the URL"
	case s.connect != "":
		return "the client: --connect " + s.connect + " carries no credential,"
	}
	return "a client without credentials"
}

// refusedHint says what to do when the broker refused the credential
// credentialName names.
func (s *securityFlags) refusedHint(url string) string {
	switch {
	case s.credential != nil && s.connect != "" && s.credential.Role != broker.RoleSite:
		return "it may have expired (a batch job's end), been revoked (evoq run revoke), or be of another broker or trust root: have the controller write a new connect file"
	case s.credential != nil && s.connect != "":
		return "the site's NATS refused it: it may have expired or been revoked; ask the site for a new one and give it to the controller with --worker-creds"
	case s.creds != "" || s.nkey != "":
		return "it may have expired, been revoked, or be for another server or account: check it with 'nats --creds FILE account info'"
	case broker.HasUserInfo(url):
		return "check the user and password in --nats"
	case s.connect != "":
		return "the controller that wrote it connected with nothing it could hand on: give the controller --worker-creds FILE, or this client --creds FILE"
	}
	return "give --creds FILE (a NATS .creds file), --nkey FILE, a user and password in the --nats URL, or the connect file the controller or broker wrote (--connect FILE)"
}

// warn logs what an operator must know: a broker open beyond loopback.
func (s *securityFlags) warn(log logrus.FieldLogger, cfg broker.Config) {
	if s.insecure && !isLoopback(s.listenHost) {
		log.WithField("listen", cfg.Listen).Warn("--insecure: the broker takes clients without credentials; anyone who reaches it can read, change or delete runs")
	}
}

// caForClients is the CA file that clients of this broker need, absolute,
// for connect files; "" without TLS.
func (s *securityFlags) caForClients() string {
	ca := s.fileCA
	if s.serverTLS {
		// The broker's certificate is signed by --tls-ca when given; a
		// self-signed certificate is its own CA.
		ca = s.tlsCA
		if ca == "" {
			ca = s.tlsCert
		}
	}
	if ca == "" {
		return ""
	}
	if abs, err := filepath.Abs(ca); err == nil {
		return abs
	}
	return ca
}

// credentialFor returns a credential of role for run from the session's
// broker: minted by the embedded broker, or asked of an external one with
// the admin credential. ok is false for a broker without auth.
func (s *session) credentialFor(ctx context.Context, role broker.Role, run string) (c broker.Credential, ok bool, err error) {
	if s.sec.trust != nil {
		c, err = s.sec.trust.UserJWT(role, run, s.sec.expires)
		return c, err == nil, err
	}
	if s.embedded != nil {
		c, err = s.embedded.Mint(role, run)
		if errors.Is(err, broker.ErrNoAuth) {
			return c, false, nil
		}
		return c, err == nil, err
	}
	if hand := s.sec.handOn(role); hand != "" {
		c, err = broker.ReadCredsFile(hand)
		return c, err == nil, err
	}
	if s.credential == nil || s.credential.Role == broker.RoleSite {
		// An open broker, or a site's NATS: evoq cannot mint there, so
		// the file carries the controller's own credential (a user and
		// password in the URL, or --creds), if any.
		if s.credential != nil || broker.HasUserInfo(s.url) {
			s.sec.sharedCredential = true
		}
		if s.credential == nil {
			return c, false, nil
		}
		return *s.credential, true, nil
	}
	if s.credential.Role != broker.RoleAdmin {
		return c, false, fmt.Errorf("the credential in --connect is a %s credential; a controller needs the admin one that `evoq broker --connect-file` writes", s.credential.Role)
	}
	c, err = broker.RequestCredential(ctx, s.nc, role, run)
	if errors.Is(err, broker.ErrNoAuth) {
		return c, false, nil
	}
	return c, err == nil, err
}

// connectFile is the connect file for role's clients of run: URLs, run,
// their credential and the CA.
//
// On a broker that is not evoq's (a site's NATS) evoq cannot mint: the
// file carries --worker-creds or --reader-creds when given, else the
// controller's own credential, and sharedCredential is set for the
// caller to warn of it.
func (s *session) connectFile(ctx context.Context, role broker.Role, run string) (broker.ConnectFile, error) {
	cf := broker.ConnectFile{URLs: s.urls(), Run: run, TLSCA: s.sec.caForClients()}
	c, ok, err := s.credentialFor(ctx, role, run)
	if err != nil {
		return cf, err
	}
	if s.sec.handOn(role) != "" {
		// The file's credential is the workers' own: the controller's
		// user and password stay out of it.
		cf.URLs = strings.Split(broker.StripUserInfo(strings.Join(cf.URLs, ",")), ",")
	}
	if ok {
		cf.SetCredential(c)
	}
	return cf, nil
}

// handOn is the .creds file to hand role's clients: --worker-creds, or
// --reader-creds (else --worker-creds) for readers; "" when none.
func (s *securityFlags) handOn(role broker.Role) string {
	switch role {
	case broker.RoleWorker:
		return s.workerCreds
	case broker.RoleReader:
		if s.readerCreds != "" {
			return s.readerCreds
		}
		return s.workerCreds
	}
	return ""
}
