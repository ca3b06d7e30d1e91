package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// ConnectFile is what a controller writes for its workers to find it, like
// Dask's scheduler file: the broker's URLs and the run, and what it takes
// to connect to a broker with auth or TLS. It is written with mode 0600,
// since it may hold a credential.
type ConnectFile struct {
	Version int       `json:"version"`
	URLs    []string  `json:"urls"`
	Run     string    `json:"run,omitempty"`
	Created time.Time `json:"created"`
	// Role and NkeySeed are the credential to connect with (see
	// Credential); a worker or reader credential is for Run. Empty for a
	// broker without auth.
	Role     Role   `json:"role,omitempty"`
	NkeySeed string `json:"nkey_seed,omitempty"`
	// JWT is the credential's user JWT, on a broker in operator mode
	// (see Trust); NkeySeed is then its seed, and the two together are
	// NATS's .creds.
	JWT string `json:"jwt,omitempty"`
	// Creds is the file beside it that holds the same credential as
	// NATS's .creds (the JWT and the seed), mode 0600, for the nats CLI
	// and clients in other languages; WriteConnectFile writes it.
	Creds string `json:"creds,omitempty"`
	// Trust is the trust root's file (TrustFile), in an admin's connect
	// file of a broker in operator mode: its holder makes runs' accounts
	// and mints their credentials, so it is given as a path on the shared
	// file system rather than copied into the file.
	Trust string `json:"trust,omitempty"`
	// InboxPrefix is the credential's InboxPrefix, for clients in other
	// languages; WriteConnectFile fills it in.
	InboxPrefix string `json:"inbox_prefix,omitempty"`
	// TLSCA is the file of the CA certificates that signed the broker's
	// certificate. Empty for a broker without TLS.
	TLSCA string `json:"tls_ca,omitempty"`
}

// SetCredential puts c in the file; a run credential sets Run too.
func (cf *ConnectFile) SetCredential(c Credential) {
	cf.Role, cf.NkeySeed, cf.JWT = c.Role, c.Seed, c.JWT
	if c.Run != "" {
		cf.Run = c.Run
	}
}

// Credential is the file's credential; ok is false when it holds none.
func (cf ConnectFile) Credential() (c Credential, ok bool) {
	if cf.NkeySeed == "" {
		return Credential{}, false
	}
	c = Credential{Role: cf.Role, Seed: cf.NkeySeed, JWT: cf.JWT}
	if cf.Role == RoleWorker || cf.Role == RoleReader || (cf.Role == RoleAdmin && cf.JWT != "") {
		c.Run = cf.Run
	}
	return c, true
}

// Options are the client options the file asks for: its credential and
// its CA.
func (cf ConnectFile) Options() ([]nats.Option, error) {
	opts, err := TLSOptions(cf.TLSCA, "", "")
	if err != nil {
		return nil, err
	}
	if c, ok := cf.Credential(); ok {
		opts = append(opts, c.Options()...)
	}
	return opts, nil
}

// checkCredential reports a credential that cannot connect.
func (cf ConnectFile) checkCredential() error {
	if cf.Trust != "" {
		if cf.Role != RoleAdmin || cf.NkeySeed != "" {
			return fmt.Errorf("%w: a trust root is an admin's, with no credential of its own", ErrCredential)
		}
		return nil
	}
	c, ok := cf.Credential()
	if !ok {
		if cf.Role != "" {
			return fmt.Errorf("%w: role %s without an nkey seed", ErrCredential, cf.Role)
		}
		return nil
	}
	return c.Check()
}

// ErrConnectFile means a connect file is missing, unreadable or invalid.
var ErrConnectFile = errors.New("invalid connect file")

// WriteConnectFile writes cf to path atomically (a temporary file renamed
// into place) with mode 0600.
func WriteConnectFile(path string, cf ConnectFile) error {
	cf.Version = 1
	if err := cf.checkCredential(); err != nil {
		return fmt.Errorf("--connect-file %s: %w", path, err)
	}
	cf.InboxPrefix, cf.Creds = "", ""
	if c, ok := cf.Credential(); ok {
		cf.InboxPrefix = InboxPrefix(c.Role, c.Run)
		if c.JWT != "" {
			creds := strings.TrimSuffix(path, filepath.Ext(path)) + ".creds"
			if err := writeCreds(creds, c); err != nil {
				return fmt.Errorf("--connect-file %s: %w", path, err)
			}
			if abs, err := filepath.Abs(creds); err == nil {
				creds = abs
			}
			cf.Creds = creds
		}
	}
	if cf.Created.IsZero() {
		cf.Created = time.Now().UTC()
	}
	data, err := json.MarshalIndent(cf, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".evoq-connect-*")
	if err != nil {
		return fmt.Errorf("--connect-file %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("--connect-file %s: %w", path, err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ReadConnectFile reads and checks a connect file.
func ReadConnectFile(path string) (ConnectFile, error) {
	var cf ConnectFile
	data, err := os.ReadFile(path)
	if err != nil {
		return cf, fmt.Errorf("%w: --connect %s: %v", ErrConnectFile, path, err)
	}
	if err := json.Unmarshal(data, &cf); err != nil {
		return cf, fmt.Errorf("%w: --connect %s: %v", ErrConnectFile, path, err)
	}
	if cf.Version != 1 || len(cf.URLs) == 0 {
		return cf, fmt.Errorf("%w: --connect %s: want version 1 and at least one URL", ErrConnectFile, path)
	}
	if err := cf.checkCredential(); err != nil {
		return cf, fmt.Errorf("%w: --connect %s: %w", ErrConnectFile, path, err)
	}
	return cf, nil
}

// ClientURLs are the URLs clients on other hosts use to reach a broker
// listening on host:port: every non-loopback IPv4 address of this host and
// its name when host is a wildcard, else host itself.
func ClientURLs(host string, port int) []string {
	if host != "" && host != "0.0.0.0" && host != "::" {
		return []string{"nats://" + net.JoinHostPort(host, strconv.Itoa(port))}
	}
	var urls []string
	if name, err := os.Hostname(); err == nil {
		urls = append(urls, "nats://"+net.JoinHostPort(name, strconv.Itoa(port)))
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			urls = append(urls, "nats://"+net.JoinHostPort(ip.IP.String(), strconv.Itoa(port)))
		}
	}
	return append(urls, "nats://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// resolveHost turns an interface name (ib0, eth0) into its first IPv4
// address, as HPC nodes need; other hosts are returned as they are.
func resolveHost(host string) (string, error) {
	if host == "" || net.ParseIP(host) != nil {
		return host, nil
	}
	iface, err := net.InterfaceByName(host)
	if err != nil {
		return host, nil // a host name, resolved by the listener
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return "", fmt.Errorf("interface %s: %w", host, err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
			return ip.IP.String(), nil
		}
	}
	return "", fmt.Errorf("interface %s has no IPv4 address", host)
}

// writeCreds writes c as a .creds file, atomically, mode 0600.
func writeCreds(path string, c Credential) error {
	data, err := jwt.FormatUserConfig(c.JWT, []byte(c.Seed))
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".evoq-creds-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
