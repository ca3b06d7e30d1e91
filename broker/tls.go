package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ErrTLS means a TLS setting is incomplete or a TLS file unusable; the
// message names the setting and the file.
var ErrTLS = errors.New("invalid TLS setting")

// serverTLS builds the server's TLS configuration from cfg, nil without
// TLS. The server ignores the certificate fields of its Options, so the
// configuration is built here; the files are checked first, so that the
// error names the setting.
func serverTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" {
		if cfg.TLSCA != "" || cfg.TLSVerify {
			return nil, fmt.Errorf("%w: --tls-ca and --tls-verify need --tls-cert and --tls-key", ErrTLS)
		}
		return nil, nil
	}
	if err := checkKeyPair(cfg.TLSCert, cfg.TLSKey); err != nil {
		return nil, err
	}
	if cfg.TLSVerify && cfg.TLSCA == "" {
		return nil, fmt.Errorf("%w: --tls-verify needs --tls-ca, the CA that signs the client certificates", ErrTLS)
	}
	if cfg.TLSCA != "" {
		if err := checkCA(cfg.TLSCA); err != nil {
			return nil, err
		}
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CaFile: cfg.TLSCA, Verify: cfg.TLSVerify,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTLS, err)
	}
	return tc, nil
}

// TLSOptions are the client options that reach a broker over TLS: ca is
// the file of the CA certificates that signed the broker's certificate,
// cert and key the files of the client's own certificate and key, for a
// broker that verifies clients. Empty ones are left out; with all three
// empty there are no options.
func TLSOptions(ca, cert, key string) ([]nats.Option, error) {
	var opts []nats.Option
	if ca != "" {
		if err := checkCA(ca); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(ca))
	}
	if cert != "" || key != "" {
		if err := checkKeyPair(cert, key); err != nil {
			return nil, err
		}
		opts = append(opts, nats.ClientCert(cert, key))
	}
	return opts, nil
}

// checkKeyPair checks that the certificate and key files are both given,
// readable and match.
func checkKeyPair(cert, key string) error {
	switch {
	case cert == "":
		return fmt.Errorf("%w: --tls-key %s needs --tls-cert", ErrTLS, key)
	case key == "":
		return fmt.Errorf("%w: --tls-cert %s needs --tls-key", ErrTLS, cert)
	}
	if err := readable("--tls-cert", cert); err != nil {
		return err
	}
	if err := readable("--tls-key", key); err != nil {
		return err
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return fmt.Errorf("%w: --tls-cert %s, --tls-key %s: %v", ErrTLS, cert, key, err)
	}
	return nil
}

// checkCA checks that path holds PEM CA certificates.
func checkCA(path string) error {
	if err := readable("--tls-ca", path); err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: --tls-ca %s: %v", ErrTLS, path, err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return fmt.Errorf("%w: --tls-ca %s: no PEM certificate in it", ErrTLS, path)
	}
	return nil
}

// readable reports a file that cannot be read, naming the setting.
func readable(setting, path string) error {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%w: %s %s: %v", ErrTLS, setting, path, err)
	}
	return f.Close()
}

// routeTLS puts the routes of a cluster node with a certificate on TLS:
// each node presents its certificate to the others and checks theirs
// against --tls-ca, both ways, so the certificate must serve as a client's
// and a server's (extended key usages clientAuth and serverAuth).
func routeTLS(cfg Config, opts *server.Options) error {
	if opts.Cluster.Port == 0 || cfg.TLSCert == "" {
		return nil
	}
	if cfg.TLSCA == "" {
		return fmt.Errorf("%w: a cluster node with --tls-cert needs --tls-ca, the CA its routes check the other nodes' certificates against", ErrTLS)
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CaFile: cfg.TLSCA, Verify: true})
	if err != nil {
		return fmt.Errorf("%w: routes: %v", ErrTLS, err)
	}
	// The CA checks the nodes it dials too, not only those dialing it.
	tc.RootCAs = tc.ClientCAs
	opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, 5
	return nil
}
