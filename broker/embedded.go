// Package broker starts evoq's embedded NATS JetStream server, connects to
// an embedded or external one, and declares the streams, the durable pull
// consumer and the key-value buckets a run needs, idempotently.
package broker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/sirupsen/logrus"
)

// Defaults of Config.
const (
	DirDefault          = "./evoq-data"
	ListenDefault       = "127.0.0.1:4222"
	StartTimeoutDefault = 15 * time.Second
)

// ErrStart means the embedded broker could not start; the message says why.
var ErrStart = errors.New("embedded broker did not start")

// Config configures an embedded broker.
type Config struct {
	// Dir is the JetStream store directory. Defaults to DirDefault.
	Dir string
	// Listen is host:port for clients. Port 0 or -1 picks a free port.
	// Defaults to ListenDefault.
	Listen string
	// SyncAlways fsyncs every write. When false the store hands each write
	// to the OS and fsyncs every SyncInterval: a process crash loses
	// nothing, a machine crash may lose up to SyncInterval of writes.
	SyncAlways bool
	// SyncInterval is the fsync period when SyncAlways is false. Defaults
	// to the server's (2 minutes).
	SyncInterval time.Duration
	// MaxStore caps the store's disk use in bytes. Defaults to the
	// server's (most of the free disk).
	MaxStore int64
	// StartTimeout bounds the wait for the server to accept clients.
	// Defaults to StartTimeoutDefault.
	StartTimeout time.Duration
	// Logger receives the server's log. Defaults to logrus.StandardLogger().
	Logger logrus.FieldLogger
	// OnStoreError is called once when the server reports that it cannot
	// write its store (disk full, I/O error); from then on it stops
	// answering writes. Defaults to nothing.
	OnStoreError func(msg string)
	// Auth makes every client authenticate, in-process ones too: an admin
	// credential is generated at start (AdminCredential) and run
	// credentials are added with Mint. Defaults to false: whoever reaches
	// the port may do anything.
	Auth bool
	// TLSCert and TLSKey are the files of the server's certificate and
	// key; with them clients must connect over TLS (in-process ones
	// excepted). Defaults to none, plain TCP.
	TLSCert, TLSKey string
	// TLSCA is the file of the CA certificates that client certificates
	// are checked against when TLSVerify is set. Defaults to none.
	TLSCA string
	// TLSVerify makes every client present a certificate signed by TLSCA
	// (mutual TLS); in-process clients are exempt. Defaults to false.
	TLSVerify bool
	// Cluster makes the broker one node of a JetStream cluster. Defaults
	// to none: a single server.
	Cluster ClusterConfig
	// Trust puts the broker in operator mode (see Trust): every client
	// presents a user JWT of a run's account, and the routes of a
	// cluster authenticate with the trust's password. Not with Auth.
	// Defaults to none.
	Trust *Trust
}

func (c Config) withDefaults() Config {
	if c.Dir == "" {
		c.Dir = DirDefault
	}
	if c.Listen == "" {
		c.Listen = ListenDefault
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = StartTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = logrus.StandardLogger()
	}
	return c
}

// SplitListen parses host:port; port 0 or -1 means a free port. The host
// may be an interface name such as ib0, for its first IPv4 address. A host
// that does not resolve, or is not an address of this machine, is an
// error naming it (see CheckListenHost).
func SplitListen(listen string) (string, int, error) {
	host, ps, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("--listen %q: want host:port or interface:port: %w", listen, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("--listen %q: port %q is not a number in -1..65535", listen, ps)
	}
	if host, err = resolveHost(host); err != nil {
		return "", 0, fmt.Errorf("--listen %q: %w", listen, err)
	}
	if err := CheckListenHost(host); err != nil {
		return "", 0, fmt.Errorf("--listen %q: %w", listen, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// Embedded is a running embedded broker.
type Embedded struct {
	srv   *server.Server
	log   *serverLog
	dir   string
	host  string   // the listen host, resolved
	lock  *os.File // holds the store's lock while the server runs
	auth  bool
	admin Credential
	trust *Trust // operator mode; nil otherwise

	mu    sync.Mutex      // serializes Mint
	users authState       // the credentials kept in the store's auth file
	opts  *server.Options // what the server runs with, never handed to it (Mint hands copies)
}

// Start starts an embedded NATS server with JetStream on cfg.Dir and waits
// until it accepts clients.
func Start(cfg Config) (*Embedded, error) {
	cfg = cfg.withDefaults()
	opts, err := serverOptions(cfg)
	if err != nil {
		return nil, err
	}
	lock, err := lockStore(opts.StoreDir)
	if err != nil {
		return nil, err
	}
	var admin Credential
	var users authState
	if cfg.Auth {
		// The store's credentials outlive the process: a restarted broker
		// lets its clients back in.
		if users, admin, err = loadAuth(opts.StoreDir); err == nil {
			opts.Nkeys, err = nkeyUsers(users, admin)
		}
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	srv, err := server.NewServer(opts.Clone())
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	slog := &serverLog{log: cfg.Logger.WithField("component", "broker"), onStore: cfg.OnStoreError}
	srv.SetLoggerV2(slog, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(cfg.StartTimeout) {
		srv.Shutdown()
		lock.Close()
		return nil, fmt.Errorf("%w on %s within %s: %s", ErrStart, cfg.Listen, cfg.StartTimeout, slog.lastError())
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		lock.Close()
		return nil, fmt.Errorf("%w: JetStream failed on store %s: %s", ErrStart, opts.StoreDir, slog.lastError())
	}
	return &Embedded{srv: srv, log: slog, dir: opts.StoreDir, host: opts.Host, lock: lock,
		auth: cfg.Auth, admin: admin, users: users, opts: opts, trust: cfg.Trust}, nil
}

func serverOptions(cfg Config) (*server.Options, error) {
	host, port, err := SplitListen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	if err := checkPort(host, port); err != nil {
		return nil, err
	}
	tlsConfig, err := serverTLS(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := prepareDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:            "evoq",
		Host:                  host,
		Port:                  port,
		JetStream:             true,
		StoreDir:              dir,
		SyncAlways:            cfg.SyncAlways,
		SyncInterval:          cfg.SyncInterval,
		JetStreamMaxStore:     cfg.MaxStore,
		NoSigs:                true,
		NoSystemAccount:       false,
		DisableShortFirstPing: true,
		TLSConfig:             tlsConfig,
		TLSVerify:             cfg.TLSVerify,
		MaxPayload:            schema.MaxMessageSize, // the NATS default, named: broker, streams and codec share one limit
	}
	if err := cfg.Cluster.apply(opts); err != nil {
		return nil, err
	}
	if err := routeTLS(cfg, opts); err != nil {
		return nil, err
	}
	if cfg.Trust != nil {
		if cfg.Auth {
			return nil, fmt.Errorf("%w: a broker in operator mode (a trust root) takes no nkey users: not with Auth", ErrStart)
		}
		return opts, cfg.Trust.apply(opts)
	}
	if _, err := os.Stat(filepath.Join(dir, "jwt")); err == nil {
		// Its runs are in accounts of their own, which only operator
		// mode serves: without it they would seem gone.
		return nil, fmt.Errorf("%w: --dir %s was made by a broker in operator mode, each run in an account of its own: give --trust and its trust root "+
			"(to evoq broker, controller and run, and to evoq status, export, report and replay with --dir), or read a run through its live broker with --connect and the run's reader connect file", ErrStart, dir)
	}
	return opts, nil
}

// checkPort fails fast, with a hint, when the listen address is taken;
// the server itself would only report it after its start timeout.
func checkPort(host string, port int) error {
	if port <= 0 {
		return nil
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: --listen %s: %v%s", ErrStart, addr, err,
			listenHint(err, "is another evoq or NATS server running? use another port, or port 0 for any free one"))
	}
	return l.Close()
}

// prepareDir creates the store directory and checks that it is writable,
// so that the error names the directory rather than a JetStream internal.
func prepareDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--dir %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return "", fmt.Errorf("--dir %q: cannot create the store directory: %w", dir, err)
	}
	probe, err := os.CreateTemp(abs, ".evoq-probe-*")
	if err != nil {
		return "", fmt.Errorf("--dir %q: store directory is not writable: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return abs, nil
}

// Trust is the broker's trust root in operator mode, else nil.
func (e *Embedded) Trust() *Trust { return e.trust }

// Server is the running nats-server, for in-process connections.
func (e *Embedded) Server() *server.Server { return e.srv }

// ClientURL is the URL clients on this host connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// ClientURLs are the URLs clients on other hosts can use.
func (e *Embedded) ClientURLs() []string {
	addr, ok := e.srv.Addr().(*net.TCPAddr)
	if !ok {
		return []string{e.ClientURL()}
	}
	return ClientURLs(e.host, addr.Port)
}

// Dir is the absolute store directory.
func (e *Embedded) Dir() string { return e.dir }

// Shutdown stops the server and waits until it is down. The store is
// flushed to the OS on the way.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.lock.Close()
}

// ErrStoreInUse means another evoq process has the store open: two
// servers on one store would corrupt it.
var ErrStoreInUse = errors.New("store directory in use")

// lockStore takes an exclusive lock on dir/evoq.lock, held until the file
// is closed (by Shutdown, or by the process's end, even a crash).
func lockStore(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "evoq.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(f.Name())
		f.Close()
		return nil, fmt.Errorf("%w: --dir %s is open in another evoq process (pid %s); stop it, or reach that run through its broker with --nats or --connect",
			ErrStoreInUse, dir, strings.TrimSpace(string(owner)))
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// serverLog adapts the nats-server logger to logrus and keeps the last
// error, so that a failed start can say why.
type serverLog struct {
	log     logrus.FieldLogger
	mu      sync.Mutex
	last    string
	onStore func(string)
	once    sync.Once
}

// storeFailure reports whether a server error says the store cannot be
// written.
func storeFailure(msg string) bool {
	for _, s := range []string{"no space left on device", "Critical write error", "disk quota exceeded", "read-only file system"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (l *serverLog) keep(msg string) {
	l.mu.Lock()
	l.last = msg
	l.mu.Unlock()
}

func (l *serverLog) lastError() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == "" {
		return "no error was logged"
	}
	return l.last
}

func (l *serverLog) Noticef(format string, v ...any) { l.log.Debugf(format, v...) }
func (l *serverLog) Warnf(format string, v ...any)   { l.log.Warnf(format, v...) }
func (l *serverLog) Debugf(format string, v ...any)  {}
func (l *serverLog) Tracef(format string, v ...any)  {}

func (l *serverLog) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.keep(msg)
	l.log.Error(msg)
	if l.onStore != nil && storeFailure(msg) {
		l.once.Do(func() { go l.onStore(msg) })
	}
}

func (l *serverLog) Fatalf(format string, v ...any) {
	l.keep(fmt.Sprintf(format, v...))
	l.log.Errorf(format, v...)
}
