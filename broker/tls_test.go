package broker_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
)

// pki is a CA and the certificate files it signed, in a temporary
// directory.
type pki struct {
	dir                   string
	ca                    string
	serverCert, serverKey string
	clientCert, clientKey string
	caCert                *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.caKey = newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "evoq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.ca = p.write(t, "ca.pem", "CERTIFICATE", der)
	p.serverCert, p.serverKey = p.issue(t, "server", x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = p.issue(t, "client", x509.ExtKeyUsageClientAuth)
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// issue makes a certificate for 127.0.0.1 and localhost signed by the CA
// and returns its certificate and key files.
func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

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
	p := newPKI(t)
	other := newPKI(t) // a CA the broker does not know
	e := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TLSCert: p.serverCert, TLSKey: p.serverKey})
	url := e.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Errorf("ClientURL %s, want tls://", url)
	}
	c := dial(t, url, nil, tlsOptions(t, p.ca, "", "")...)
	if cs, err := c.nc.TLSConnectionState(); err != nil || !cs.HandshakeComplete {
		t.Fatalf("not over TLS: %v", err)
	}
	if err := broker.Declare(testutil.Context(t, time.Minute), c.js); err != nil {
		t.Fatalf("Declare over TLS: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	for name, opts := range map[string][]nats.Option{
		"no CA":      nil,
		"another CA": tlsOptions(t, other.ca, "", ""),
	} {
		if err := tlsConnect(strings.Replace(url, "tls://", "nats://", 1), opts...); !errors.As(err, &unknown) {
			t.Errorf("client with %s: %v, want an unknown authority", name, err)
		}
	}
}

func TestTLSVerify(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	other := newPKI(t)
	e := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Auth: true,
		TLSCert: p.serverCert, TLSKey: p.serverKey, TLSCA: p.ca, TLSVerify: true})
	url := e.ClientURL()
	admin := e.AdminCredential().Options()
	for name, opts := range map[string][]nats.Option{
		"no certificate":              tlsOptions(t, p.ca, "", ""),
		"a certificate of another CA": tlsOptions(t, p.ca, other.clientCert, other.clientKey),
	} {
		err := tlsConnect(url, append(opts, admin...)...)
		if err == nil || !strings.Contains(err.Error(), "tls") {
			t.Errorf("a client with %s: %v, want refused in the TLS handshake", name, err)
		}
	}
	if err := tlsConnect(url, tlsOptions(t, p.ca, p.clientCert, p.clientKey)...); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("a certificate without a credential: %v, want an authorization violation", err)
	}
	c := dial(t, url, nil, append(tlsOptions(t, p.ca, p.clientCert, p.clientKey), admin...)...)
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
	cf := broker.ConnectFile{URLs: e.ClientURLs(), TLSCA: p.ca}
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
	w := dial(t, strings.Join(cf.URLs, ","), nil, append(opts, tlsOptions(t, "", p.clientCert, p.clientKey)...)...)
	if _, err := w.js.Consumer(ctx, schema.DesignStream, schema.ConsumerName(cf.Run)); err != nil {
		t.Errorf("worker over mutual TLS binds its consumer: %v", err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	other := newPKI(t)
	missing := filepath.Join(p.dir, "missing.pem")
	for _, tc := range []struct {
		name   string
		cfg    broker.Config
		errHas []string
	}{
		{"missing cert", broker.Config{TLSCert: missing, TLSKey: p.serverKey}, []string{"--tls-cert " + missing + ": no such file"}},
		{"missing key", broker.Config{TLSCert: p.serverCert, TLSKey: missing}, []string{"--tls-key " + missing + ": no such file"}},
		{"key without cert", broker.Config{TLSKey: p.serverKey}, []string{"--tls-key", "needs --tls-cert"}},
		{"cert without key", broker.Config{TLSCert: p.serverCert}, []string{"--tls-cert", "needs --tls-key"}},
		{"cert and key of two pairs", broker.Config{TLSCert: p.serverCert, TLSKey: other.serverKey}, []string{"--tls-cert " + p.serverCert, "--tls-key " + other.serverKey}},
		{"verify without CA", broker.Config{TLSCert: p.serverCert, TLSKey: p.serverKey, TLSVerify: true}, []string{"--tls-verify needs --tls-ca"}},
		{"CA without cert", broker.Config{TLSCA: p.ca}, []string{"--tls-ca", "need --tls-cert"}},
		{"missing CA", broker.Config{TLSCert: p.serverCert, TLSKey: p.serverKey, TLSCA: missing}, []string{"--tls-ca " + missing + ": no such file"}},
		{"CA that is a key", broker.Config{TLSCert: p.serverCert, TLSKey: p.serverKey, TLSCA: p.serverKey}, []string{"--tls-ca " + p.serverKey, "no PEM certificate"}},
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
		{"cert without key", "", p.clientCert, "", "--tls-cert " + p.clientCert + " needs --tls-key"},
		{"missing cert", p.ca, missing, p.clientKey, "--tls-cert " + missing + ": no such file"},
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
