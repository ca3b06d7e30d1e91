package broker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// trustCluster starts n brokers in operator mode on one trust root (n 1:
// a single server), each on a store of its own.
func trustCluster(t *testing.T, n int) (*broker.Trust, []*node) {
	t.Helper()
	return trustClusterWith(t, n, func(*broker.Config) {})
}

func trustClusterWith(t *testing.T, n int, edit func(*broker.Config)) (*broker.Trust, []*node) {
	t.Helper()
	trust, created, err := broker.InitTrust(t.TempDir())
	if err != nil || !created {
		t.Fatalf("InitTrust = %v, created %t", err, created)
	}
	if n == 1 {
		cfg := broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:" + strconv.Itoa(freePort(t)), Trust: trust}
		edit(&cfg)
		return trust, []*node{{cfg: cfg, e: start(t, cfg)}}
	}
	var routes []string
	nodes := make([]*node, n)
	for i := range nodes {
		rp := freePort(t)
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(rp))
		nodes[i] = &node{cfg: broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:" + strconv.Itoa(freePort(t)), Trust: trust,
			Cluster: broker.ClusterConfig{Name: "trust", ServerName: fmt.Sprintf("n%d", i+1), Listen: "127.0.0.1:" + strconv.Itoa(rp)}}}
	}
	for _, nd := range nodes {
		nd.cfg.Cluster.Routes = routes
		edit(&nd.cfg)
		nd.e = start(t, nd.cfg)
	}
	return trust, nodes
}

func nodeURL(nd *node) string { return "nats://" + nd.cfg.Listen }

// dialJWT connects to url with c, failing fast.
func dialJWT(url string, c broker.Credential) (*nats.Conn, error) {
	return nats.Connect(url, append(c.Options(), nats.Timeout(5*time.Second), nats.MaxReconnects(0))...)
}

func mustDial(t *testing.T, url string, c broker.Credential) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := dialJWT(url, c)
	if err != nil {
		t.Fatalf("connect to %s as %s of %s: %v", url, c.Role, c.Run, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// short bounds a publish that the broker refuses: its acknowledgement
// never comes.
func short(ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	_ = cancel // ends with the timeout
	return c
}

func mint(t *testing.T, trust *broker.Trust, role broker.Role, run string) broker.Credential {
	t.Helper()
	c, err := trust.UserJWT(role, run, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Fatalf("minted credential: %v", err)
	}
	return c
}

// The trust root is one file, mode 0600, made once and read after.
func TestTrustFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, created, err := broker.InitTrust(dir)
	if err != nil || !created {
		t.Fatalf("InitTrust = %v, %t", err, created)
	}
	st, err := os.Stat(filepath.Join(dir, broker.TrustFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("trust file: %v, mode %v; want 0600", err, st.Mode())
	}
	b, created, err := broker.InitTrust(dir)
	if err != nil || created || *a != *b {
		t.Errorf("InitTrust again = %v, created %t, same root %t; want the file read back", err, created, *a == *b)
	}
	if err := os.Chmod(filepath.Join(dir, broker.TrustFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.LoadTrust(filepath.Join(dir, broker.TrustFile)); !errors.Is(err, broker.ErrTrust) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a trust file others can read: %v; want ErrTrust saying chmod 600", err)
	}
	pa, _ := a.RunAccount("r1")
	pb, _ := b.RunAccount("r1")
	pc, _ := a.RunAccount("r2")
	if pa != pb || pa == pc || !strings.HasPrefix(pa, "A") {
		t.Errorf("run accounts %s %s %s: want one per run, the same from the same root", pa, pb, pc)
	}
}

// One broker in operator mode: each run is an account of its own. A
// worker of run A stores its results and pulls its designs; it sees
// nothing of run B, cannot make the server answer into run B, and an
// anonymous client is refused. A revoked credential is cut off.
func TestTrustRunsApart(t *testing.T) {
	t.Parallel()
	trust, nodes := trustCluster(t, 1)
	url := nodeURL(nodes[0])
	ctx := testutil.Context(t, time.Minute)
	if _, err := nats.Connect(url, nats.Timeout(5*time.Second)); err == nil {
		t.Error("an anonymous client connected")
	}
	sys := []nats.Option{nats.Timeout(5 * time.Second)}
	for _, run := range []string{"ra", "rb"} {
		if err := trust.CreateRun(ctx, append(sys, func(o *nats.Options) error { o.Url = url; return nil }), run); err != nil {
			t.Fatalf("CreateRun %s: %v", run, err)
		}
		_, js := mustDial(t, url, mint(t, trust, broker.RoleAdmin, run))
		if err := broker.Declare(ctx, js); err != nil {
			t.Fatalf("declare run %s: %v", run, err)
		}
		if _, err := broker.DeclareConsumer(ctx, js, run, broker.ConsumerConfig{}); err != nil {
			t.Fatalf("consumer of run %s: %v", run, err)
		}
	}
	// The same stream names in both accounts are two streams.
	_, jsA := mustDial(t, url, mint(t, trust, broker.RoleAdmin, "ra"))
	_, jsB := mustDial(t, url, mint(t, trust, broker.RoleAdmin, "rb"))
	if _, err := jsA.Publish(ctx, schema.ResultSubject("ra"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n := streamInfo(t, ctx, jsB, schema.ResultStream).State.Msgs; n != 0 {
		t.Errorf("run B's results stream holds %d messages after run A stored one", n)
	}

	worker := mint(t, trust, broker.RoleWorker, "ra")
	wnc, wjs := mustDial(t, url, worker)
	if _, err := wjs.Publish(ctx, schema.ResultSubject("ra"), []byte("y")); err != nil {
		t.Errorf("a worker of run A stores a result: %v", err)
	}
	// Run B's subjects do not exist in run A's account: a publish there
	// reaches no stream (and is refused by the worker's permissions).
	if _, err := wjs.Publish(short(ctx), schema.ResultSubject("rb"), []byte("z")); err == nil {
		t.Error("a worker of run A stored a result on run B's subject")
	}
	// The reply-subject trick: a request whose reply names run B's
	// result subject. The answer stays in run A's account.
	if err := wnc.PublishRequest("$JS.API.STREAM.INFO.KV_"+schema.PresenceBucket, schema.ResultSubject("rb"), nil); err != nil {
		t.Fatal(err)
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := streamInfo(t, ctx, jsB, schema.ResultStream).State.Msgs; n != 0 {
		t.Errorf("run B's results stream holds %d messages after run A's worker aimed a reply at it", n)
	}
	// The answer lands in run A's own account, on its own results
	// stream, which takes every evoq.result subject: what the worker
	// could store there itself, and a result of no design of run A,
	// which no count takes.
	if n := streamInfo(t, ctx, jsA, schema.ResultStream).State.Msgs; n != 3 {
		t.Errorf("run A's results stream holds %d messages, want 3 (2 results and the answer aimed at run B)", n)
	}
	// A worker of run B's credentials connects to run B alone.
	_, wjsB := mustDial(t, url, mint(t, trust, broker.RoleWorker, "rb"))
	if _, err := wjsB.Publish(short(ctx), schema.ResultSubject("ra"), []byte("w")); err == nil {
		t.Error("a worker of run B stored a result on run A's subject")
	}

	// Revocation: the worker's connection is closed, and it cannot
	// connect again.
	closed := make(chan struct{})
	wnc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	pub, err := worker.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := trust.Revoke(ctx, append(sys, func(o *nats.Options) error { o.Url = url; return nil }), "ra", pub); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Error("the revoked worker's connection is still open 10 s later")
	}
	if nc, err := dialJWT(url, worker); err == nil {
		nc.Close()
		t.Error("a revoked credential connected")
	}
	if nc, err := dialJWT(url, mint(t, trust, broker.RoleWorker, "ra")); err != nil {
		t.Errorf("a new worker credential of the run after a revocation: %v", err)
	} else {
		nc.Close()
	}
}

// A cluster of three on one trust root: anonymous clients are refused by
// every node; a run created and a credential minted through one node
// work on the others; a revoked credential is refused everywhere within
// seconds.
func TestTrustCluster(t *testing.T) {
	t.Parallel()
	trust, nodes := trustCluster(t, 3)
	ctx := testutil.Context(t, 2*time.Minute)
	for _, nd := range nodes {
		if nc, err := nats.Connect(nodeURL(nd), nats.Timeout(5*time.Second)); err == nil {
			nc.Close()
			t.Errorf("an anonymous client connected to %s", nd.cfg.Cluster.ServerName)
		}
	}
	via := []nats.Option{nats.Timeout(5 * time.Second), func(o *nats.Options) error { o.Url = nodeURL(nodes[0]); return nil }}
	testutil.WaitFor(t, 30*time.Second, "the cluster to take the run's account", func() bool {
		return trust.CreateRun(ctx, via, "rc") == nil
	})
	_, adminJS := mustDial(t, clusterURLs(nodes), mint(t, trust, broker.RoleAdmin, "rc"))
	declareWhenReady(t, ctx, adminJS, broker.WithReplicas(3))
	worker := mint(t, trust, broker.RoleWorker, "rc")
	for _, nd := range nodes[1:] {
		var nc *nats.Conn
		var err error
		testutil.WaitFor(t, 30*time.Second, "the account on "+nd.cfg.Cluster.ServerName, func() bool {
			nc, err = dialJWT(nodeURL(nd), worker)
			return err == nil
		})
		js, _ := jetstream.New(nc)
		if _, err := js.Publish(ctx, schema.ResultSubject("rc"), []byte(nd.cfg.Cluster.ServerName)); err != nil {
			t.Errorf("a worker connected to %s stores a result: %v", nd.cfg.Cluster.ServerName, err)
		}
		nc.Close()
	}
	pub, _ := worker.PublicKey()
	if err := trust.Revoke(ctx, via, "rc", pub); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	began := time.Now()
	for _, nd := range nodes {
		testutil.WaitFor(t, 10*time.Second, "the revocation on "+nd.cfg.Cluster.ServerName, func() bool {
			nc, err := dialJWT(nodeURL(nd), worker)
			if err == nil {
				nc.Close()
			}
			return err != nil
		})
	}
	t.Logf("revoked on every node within %s", time.Since(began).Round(time.Millisecond))
}

// A store made without operator mode (its runs in the global account) is
// refused in operator mode, with what to do; it still starts without.
func TestTrustRefusesOlderStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := start(t, broker.Config{Dir: dir, Listen: "127.0.0.1:0"})
	_, js := connect(t, e.ClientURL(), e)
	if err := broker.Declare(testutil.Context(t, 30*time.Second), js); err != nil {
		t.Fatal(err)
	}
	e.Shutdown()
	trust, _, err := broker.InitTrust(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = broker.Start(broker.Config{Dir: dir, Listen: "127.0.0.1:0", Trust: trust, Logger: testutil.Logger(t)})
	if !errors.Is(err, broker.ErrNotOperatorStore) || !strings.Contains(err.Error(), "without --trust") {
		t.Fatalf("Start in operator mode on an older store = %v; want ErrNotOperatorStore saying what to do", err)
	}
	start(t, broker.Config{Dir: dir, Listen: "127.0.0.1:0"})
}

// A store of a broker in operator mode is refused without it, saying so:
// its runs are in accounts only operator mode serves.
func TestTrustStoreNeedsTrust(t *testing.T) {
	t.Parallel()
	trust, _, err := broker.InitTrust(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := start(t, broker.Config{Dir: dir, Listen: "127.0.0.1:0", Trust: trust})
	e.Shutdown()
	_, err = broker.Start(broker.Config{Dir: dir, Listen: "127.0.0.1:0", Logger: testutil.Logger(t)})
	if !errors.Is(err, broker.ErrStart) || !strings.Contains(err.Error(), "operator mode") || !strings.Contains(err.Error(), "--trust") {
		t.Fatalf("Start without the trust on an operator-mode store = %v; want an error naming --trust", err)
	}
	start(t, broker.Config{Dir: dir, Listen: "127.0.0.1:0", Trust: trust})
}

// A credential with an expiry connects until then, and is refused after.
func TestTrustExpiry(t *testing.T) {
	t.Parallel()
	trust, nodes := trustCluster(t, 1)
	url := nodeURL(nodes[0])
	ctx := testutil.Context(t, time.Minute)
	if err := trust.CreateRun(ctx, []nats.Option{func(o *nats.Options) error { o.Url = url; return nil }}, "re"); err != nil {
		t.Fatal(err)
	}
	c, err := trust.UserJWT(broker.RoleWorker, "re", time.Now().Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := dialJWT(url, c)
	if err != nil {
		t.Fatalf("before its expiry: %v", err)
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Error("the connection of an expired credential is still open")
	}
	// The brokers compare whole seconds: past the second of the expiry.
	time.Sleep(1100 * time.Millisecond)
	if nc, err := dialJWT(url, c); err == nil {
		nc.Close()
		t.Error("an expired credential connected")
	}
}

// With --tls-cert, --tls-key and --tls-ca, a cluster's routes are TLS
// too, each node checking the others' certificates: the cluster forms
// (a run created through one node works on another), and a route port
// answers with a TLS handshake.
func TestTrustClusterTLS(t *testing.T) {
	t.Parallel()
	p := testutil.NewPKI(t)
	cert, key := p.Issue(t, "node", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	trust, nodes := trustClusterWith(t, 3, func(c *broker.Config) { c.TLSCert, c.TLSKey, c.TLSCA = cert, key, p.CA })
	ctx := testutil.Context(t, time.Minute)
	tlsOpts, err := broker.TLSOptions(p.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	via := append(tlsOpts, nats.Timeout(5*time.Second), func(o *nats.Options) error { o.Url = "tls://" + nodes[0].cfg.Listen; return nil })
	testutil.WaitFor(t, 30*time.Second, "the cluster to take the run's account", func() bool { return trust.CreateRun(ctx, via, "rt") == nil })
	worker := mint(t, trust, broker.RoleWorker, "rt")
	testutil.WaitFor(t, 30*time.Second, "the account on n3", func() bool {
		nc, err := nats.Connect("tls://"+nodes[2].cfg.Listen, append(append(tlsOpts, worker.Options()...), nats.Timeout(5*time.Second))...)
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(p.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	c, err := tls.Dial("tcp", nodes[1].cfg.Cluster.Listen, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("a TLS handshake with a route port: %v", err)
	}
	c.Close()
	// A node with a certificate but no CA to check the others with is
	// refused at start.
	bad := nodes[0].cfg
	bad.Dir, bad.TLSCA, bad.Listen = t.TempDir(), "", "127.0.0.1:0"
	bad.Cluster.Listen = "127.0.0.1:" + strconv.Itoa(freePort(t))
	if _, err := broker.Start(bad); !errors.Is(err, broker.ErrTLS) || !strings.Contains(err.Error(), "--tls-ca") {
		t.Errorf("a cluster node with a certificate and no CA: %v; want ErrTLS naming --tls-ca", err)
	}
}
