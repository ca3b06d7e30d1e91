package broker_test

import (
	"crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
)

func tlsOptions(t *testing.T, ca, cert, key string) []nats.Option {
	t.Helper()
	opts, err := broker.TLSOptions(ca, cert, key)
	if err != nil {
		t.Fatalf("TLSOptions: %v", err)
	}
	return opts
}

// tlsConnect connects without retries, so that a refusal is an error.
func tlsConnect(url string, opts ...nats.Option) error {
	nc, err := nats.Connect(url, append(opts, nats.Timeout(5*time.Second))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := nc.TLSConnectionState(); err != nil {
		return err
	}
	return nc.Flush()
}

func TestTLS(t *testing.T) {
	t.Parallel()
	p := testutil.NewPKI(t)
	other := testutil.NewPKI(t) // a CA the broker does not know
	e := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TLSCert: p.ServerCert, TLSKey: p.ServerKey})
	url := e.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Errorf("ClientURL %s, want tls://", url)
	}
	c := dial(t, url, nil, tlsOptions(t, p.CA, "", "")...)
	if cs, err := c.nc.TLSConnectionState(); err != nil || !cs.HandshakeComplete {
		t.Fatalf("not over TLS: %v", err)
	}
	if err := broker.Declare(testutil.Context(t, time.Minute), c.js); err != nil {
		t.Fatalf("Declare over TLS: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	for name, opts := range map[string][]nats.Option{
		"no CA":      nil,
		"another CA": tlsOptions(t, other.CA, "", ""),
	} {
		if err := tlsConnect(strings.Replace(url, "tls://", "nats://", 1), opts...); !errors.As(err, &unknown) {
			t.Errorf("client with %s: %v, want an unknown authority", name, err)
		}
	}
}

func TestTLSVerify(t *testing.T) {
	t.Parallel()
	p := testutil.NewPKI(t)
	other := testutil.NewPKI(t)
	e := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Auth: true,
		TLSCert: p.ServerCert, TLSKey: p.ServerKey, TLSCA: p.CA, TLSVerify: true})
	url := e.ClientURL()
	admin := e.AdminCredential().Options()
	for name, opts := range map[string][]nats.Option{
		"no certificate":              tlsOptions(t, p.CA, "", ""),
		"a certificate of another CA": tlsOptions(t, p.CA, other.ClientCert, other.ClientKey),
	} {
		err := tlsConnect(url, append(opts, admin...)...)
		if err == nil || !strings.Contains(err.Error(), "tls") {
			t.Errorf("a client with %s: %v, want refused in the TLS handshake", name, err)
		}
	}
	if err := tlsConnect(url, tlsOptions(t, p.CA, p.ClientCert, p.ClientKey)...); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("a certificate without a credential: %v, want an authorization violation", err)
	}
	c := dial(t, url, nil, append(tlsOptions(t, p.CA, p.ClientCert, p.ClientKey), admin...)...)
	ctx := testutil.Context(t, time.Minute)
	if err := broker.Declare(ctx, c.js); err != nil {
		t.Fatalf("Declare over mutual TLS: %v", err)
	}
	// In-process clients skip TLS, not auth.
	if err := broker.Declare(ctx, dial(t, url, e).js); err != nil {
		t.Errorf("in-process admin: %v", err)
	}

	// A worker given the connect file and a client certificate.
	if _, err := broker.DeclareConsumer(ctx, c.js, "a", broker.ConsumerConfig{}); err != nil {
		t.Fatal(err)
	}
	cred, err := e.Mint(broker.RoleWorker, "a")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "connect.json")
	cf := broker.ConnectFile{URLs: e.ClientURLs(), TLSCA: p.CA}
	cf.SetCredential(cred)
	if err := broker.WriteConnectFile(path, cf); err != nil {
		t.Fatal(err)
	}
	if cf, err = broker.ReadConnectFile(path); err != nil {
		t.Fatal(err)
	}
	opts, err := cf.Options()
	if err != nil {
		t.Fatal(err)
	}
	w := dial(t, strings.Join(cf.URLs, ","), nil, append(opts, tlsOptions(t, "", p.ClientCert, p.ClientKey)...)...)
	if _, err := w.js.Consumer(ctx, schema.DesignStream, schema.ConsumerName(cf.Run)); err != nil {
		t.Errorf("worker over mutual TLS binds its consumer: %v", err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	t.Parallel()
	p := testutil.NewPKI(t)
	other := testutil.NewPKI(t)
	missing := filepath.Join(p.Dir, "missing.pem")
	for _, tc := range []struct {
		name   string
		cfg    broker.Config
		errHas []string
	}{
		{"missing cert", broker.Config{TLSCert: missing, TLSKey: p.ServerKey}, []string{"--tls-cert " + missing + ": no such file"}},
		{"missing key", broker.Config{TLSCert: p.ServerCert, TLSKey: missing}, []string{"--tls-key " + missing + ": no such file"}},
		{"key without cert", broker.Config{TLSKey: p.ServerKey}, []string{"--tls-key", "needs --tls-cert"}},
		{"cert without key", broker.Config{TLSCert: p.ServerCert}, []string{"--tls-cert", "needs --tls-key"}},
		{"cert and key of two pairs", broker.Config{TLSCert: p.ServerCert, TLSKey: other.ServerKey}, []string{"--tls-cert " + p.ServerCert, "--tls-key " + other.ServerKey}},
		{"verify without CA", broker.Config{TLSCert: p.ServerCert, TLSKey: p.ServerKey, TLSVerify: true}, []string{"--tls-verify needs --tls-ca"}},
		{"CA without cert", broker.Config{TLSCA: p.CA}, []string{"--tls-ca", "need --tls-cert"}},
		{"missing CA", broker.Config{TLSCert: p.ServerCert, TLSKey: p.ServerKey, TLSCA: missing}, []string{"--tls-ca " + missing + ": no such file"}},
		{"CA that is a key", broker.Config{TLSCert: p.ServerCert, TLSKey: p.ServerKey, TLSCA: p.ServerKey}, []string{"--tls-ca " + p.ServerKey, "no PEM certificate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Dir, cfg.Listen = t.TempDir(), "127.0.0.1:0"
			e, err := broker.Start(cfg)
			if err == nil {
				e.Shutdown()
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, broker.ErrTLS) {
				t.Errorf("Start = %v, want ErrTLS", err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
	for _, tc := range []struct {
		name          string
		ca, cert, key string
		errHas        string
	}{
		{"missing CA", missing, "", "", "--tls-ca " + missing + ": no such file"},
		{"cert without key", "", p.ClientCert, "", "--tls-cert " + p.ClientCert + " needs --tls-key"},
		{"missing cert", p.CA, missing, p.ClientKey, "--tls-cert " + missing + ": no such file"},
	} {
		t.Run("client "+tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := broker.TLSOptions(tc.ca, tc.cert, tc.key); !errors.Is(err, broker.ErrTLS) || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("TLSOptions = %v, want ErrTLS naming %q", err, tc.errHas)
			}
		})
	}
	if opts, err := broker.TLSOptions("", "", ""); err != nil || len(opts) != 0 {
		t.Errorf("TLSOptions without files = %d options, %v", len(opts), err)
	}
}
