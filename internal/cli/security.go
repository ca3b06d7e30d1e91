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
	if ca != "" || s.tlsCert != "" {
		opts, err := broker.TLSOptions(ca, s.tlsCert, s.tlsKey)
		if err != nil {
			return "", "", usageErr("%v", err)
		}
		s.clientOpts = append(s.clientOpts, opts...)
	}
	return urls, run, nil
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
	if s.credential == nil {
		return c, false, nil // an open broker
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
func (s *session) connectFile(ctx context.Context, role broker.Role, run string) (broker.ConnectFile, error) {
	cf := broker.ConnectFile{URLs: s.urls(), Run: run, TLSCA: s.sec.caForClients()}
	c, ok, err := s.credentialFor(ctx, role, run)
	if err != nil {
		return cf, err
	}
	if ok {
		cf.SetCredential(c)
	}
	return cf, nil
}

// readerFile names the reader's connect file beside path: run.json →
// run-reader.json.
func readerFile(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-reader" + ext
}
