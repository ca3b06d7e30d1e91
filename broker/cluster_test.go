package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

func TestClusterConfigValidate(t *testing.T) {
	t.Parallel()
	ok := broker.ClusterConfig{Name: "c", ServerName: "n1", Listen: "127.0.0.1:6222",
		Routes: []string{"nats-route://127.0.0.1:6222", "nats://10.0.0.2:6222"}}
	for _, tc := range []struct {
		name   string
		edit   func(*broker.ClusterConfig)
		errHas string
	}{
		{"valid", func(*broker.ClusterConfig) {}, ""},
		{"no cluster", func(c *broker.ClusterConfig) { *c = broker.ClusterConfig{} }, ""},
		{"a named single server", func(c *broker.ClusterConfig) { *c = broker.ClusterConfig{ServerName: "solo"} }, ""},
		{"cluster of one", func(c *broker.ClusterConfig) { c.Routes, c.Listen = nil, "" }, ""},
		{"route port in a cluster of one", func(c *broker.ClusterConfig) { c.Routes = nil }, "--cluster-listen 127.0.0.1:6222 without --routes"},
		{"routes without a cluster name", func(c *broker.ClusterConfig) { c.Name = "" }, "--routes given without --cluster-name"},
		{"route port without a cluster name", func(c *broker.ClusterConfig) { c.Name, c.Routes = "", nil }, "--cluster-listen given without --cluster-name"},
		{"cluster without a server name", func(c *broker.ClusterConfig) { c.ServerName = "" }, "--cluster-name c needs --server-name"},
		{"server name with a space", func(c *broker.ClusterConfig) { c.ServerName = "node 1" }, `--server-name "node 1"`},
		{"cluster name with a dot star", func(c *broker.ClusterConfig) { c.Name = "a*" }, `--cluster-name "a*"`},
		{"route port 0", func(c *broker.ClusterConfig) { c.Listen = "127.0.0.1:0" }, `--cluster-listen "127.0.0.1:0": port "0"`},
		{"route listen without a port", func(c *broker.ClusterConfig) { c.Listen = "127.0.0.1" }, `--cluster-listen "127.0.0.1": want host:port`},
		{"client URL scheme", func(c *broker.ClusterConfig) { c.Routes = []string{"http://a:6222"} }, `--routes: "http://a:6222"`},
		{"route without a port", func(c *broker.ClusterConfig) { c.Routes = []string{"nats-route://a"} }, `--routes: "nats-route://a"`},
		{"route with a path", func(c *broker.ClusterConfig) { c.Routes = []string{"nats-route://a:1/x"} }, `--routes: "nats-route://a:1/x"`},
		{"route port out of range", func(c *broker.ClusterConfig) { c.Routes = []string{"nats-route://a:70000"} }, `port "70000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if tc.errHas == "" {
				if err != nil {
					t.Errorf("Validate = %v", err)
				}
				return
			}
			if !errors.Is(err, broker.ErrCluster) || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Validate = %v, want ErrCluster naming %q", err, tc.errHas)
			}
		})
	}
}

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	got, err := broker.ParseRoutes(" nats-route://a:6222, ,nats-route://b:6223,")
	if err != nil || strings.Join(got, " ") != "nats-route://a:6222 nats-route://b:6223" {
		t.Errorf("ParseRoutes = %q, %v", got, err)
	}
	if _, err := broker.ParseRoutes("nats-route://a:6222,a:6223"); !errors.Is(err, broker.ErrCluster) || !strings.Contains(err.Error(), `"a:6223"`) {
		t.Errorf("ParseRoutes of a bare host:port = %v, want ErrCluster naming it", err)
	}
}

func TestStartClusterFails(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	port := freePort(t)
	for _, tc := range []struct {
		name   string
		cfg    broker.Config
		errHas string
	}{
		{"route port taken", broker.Config{Listen: "127.0.0.1:0",
			Cluster: broker.ClusterConfig{Name: "c", ServerName: "n", Listen: busy.Addr().String(), Routes: []string{"nats-route://" + busy.Addr().String()}}}, "--cluster-listen " + busy.Addr().String() + ": listen"},
		{"route port is the client port", broker.Config{Listen: "127.0.0.1:" + strconv.Itoa(port),
			Cluster: broker.ClusterConfig{Name: "c", ServerName: "n", Listen: "127.0.0.1:" + strconv.Itoa(port), Routes: []string{"nats-route://a:6222"}}}, "the route port is the client port"},
		{"no server name", broker.Config{Listen: "127.0.0.1:0", Cluster: broker.ClusterConfig{Name: "c"}}, "needs --server-name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Dir, cfg.Logger = t.TempDir(), testutil.Logger(t)
			e, err := broker.Start(cfg)
			if err == nil {
				e.Shutdown()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Start = %v, want it to name %q", err, tc.errHas)
			}
		})
	}
}

// node is one broker of a test cluster, restartable on its store.
type node struct {
	cfg broker.Config
	e   *broker.Embedded
}

// startCluster starts n embedded brokers that route to each other, each
// on a store of its own.
func startCluster(t *testing.T, n int) []*node {
	t.Helper()
	var routes []string
	nodes := make([]*node, n)
	for i := range nodes {
		rp := freePort(t)
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(rp))
		nodes[i] = &node{cfg: broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:" + strconv.Itoa(freePort(t)),
			Cluster: broker.ClusterConfig{Name: "test", ServerName: fmt.Sprintf("n%d", i+1),
				Listen: "127.0.0.1:" + strconv.Itoa(rp)}}}
	}
	for _, nd := range nodes {
		nd.cfg.Cluster.Routes = routes
		nd.e = start(t, nd.cfg)
	}
	return nodes
}

func clusterURLs(nodes []*node) string {
	var urls []string
	for _, nd := range nodes {
		urls = append(urls, "nats://"+nd.cfg.Listen)
	}
	return strings.Join(urls, ",")
}

// declareWhenReady declares until the cluster has elected its leaders.
func declareWhenReady(t *testing.T, ctx context.Context, js jetstream.JetStream, opts ...broker.DeclareOption) {
	t.Helper()
	var err error
	testutil.WaitFor(t, 30*time.Second, "the cluster to take the declarations", func() bool {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err = broker.Declare(c, js, opts...)
		return err == nil || errors.Is(err, broker.ErrReplicas)
	})
	if err != nil {
		t.Fatalf("Declare: %v", err)
	}
}

func streamInfo(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return info
}

// A cluster of three keeps every stream and bucket on three nodes; when
// the results stream's leader dies a result is still stored (after a
// leader election), nothing stored before is lost, and the node, started
// again on its store, catches up.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	_, js := connect(t, clusterURLs(nodes), nil)
	ctx := testutil.Context(t, 2*time.Minute)
	declareWhenReady(t, ctx, js, broker.WithReplicas(3))
	for _, name := range []string{schema.DesignStream, schema.ResultStream, "KV_" + schema.PresenceBucket, "KV_" + schema.RunBucket} {
		info := streamInfo(t, ctx, js, name)
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 || info.Cluster.Leader == "" {
			t.Errorf("stream %s: %d replicas configured, cluster %+v; want 3, a leader and 2 followers", name, info.Config.Replicas, info.Cluster)
		}
	}
	if _, err := broker.DeclareConsumer(ctx, js, "r", broker.ConsumerConfig{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if info := consumerInfo(t, ctx, js, "r"); info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Errorf("consumer cluster %+v, want a leader and 2 followers", info.Cluster)
	}
	// Lowering the replicas would lower them for every run: refused.
	if err := broker.Declare(ctx, js); !errors.Is(err, broker.ErrReplicas) || !strings.Contains(err.Error(), "give --replicas 3") {
		t.Errorf("Declare with 1 replica over 3 = %v, want ErrReplicas saying to give --replicas 3", err)
	}

	const before = 20
	for i := range before {
		if _, err := js.Publish(ctx, schema.ResultSubject("r"), []byte("x"), jetstream.WithMsgID(fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
	}
	leader := streamInfo(t, ctx, js, schema.ResultStream).Cluster.Leader
	var dead *node
	for _, nd := range nodes {
		if nd.e.ServerName() == leader {
			dead = nd
		}
	}
	if dead == nil {
		t.Fatalf("no node is named %q, the results stream's leader", leader)
	}
	dead.e.Shutdown()
	testutil.WaitFor(t, 30*time.Second, "a result stored without the old leader", func() bool {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(c, schema.ResultSubject("r"), []byte("after"), jetstream.WithMsgID("b"))
		return err == nil
	})
	info := streamInfo(t, ctx, js, schema.ResultStream)
	if info.Cluster.Leader == leader || info.State.Msgs != before+1 {
		t.Errorf("after the leader died: leader %q, %d results; want another leader and %d results", info.Cluster.Leader, info.State.Msgs, before+1)
	}

	dead.e = start(t, dead.cfg) // the same store and name: the same node
	testutil.WaitFor(t, 30*time.Second, "the restarted node to catch up", func() bool {
		info := streamInfo(t, ctx, js, schema.ResultStream)
		for _, p := range info.Cluster.Replicas {
			if p.Name == leader {
				return p.Current && !p.Offline && p.Lag == 0
			}
		}
		return false
	})
}

// A cluster of one needs no routes: JetStream runs it as a single server,
// which takes one replica and says why it cannot take three.
func TestClusterOfOne(t *testing.T) {
	t.Parallel()
	e := start(t, broker.Config{Dir: filepath.Join(t.TempDir(), "s"), Listen: "127.0.0.1:0",
		Cluster: broker.ClusterConfig{Name: "solo", ServerName: "only"}})
	if e.ServerName() != "only" {
		t.Errorf("ServerName() = %q, want only", e.ServerName())
	}
	_, js := connect(t, e.ClientURL(), nil)
	ctx := testutil.Context(t, time.Minute)
	if err := broker.Declare(ctx, js); err != nil {
		t.Fatal(err)
	}
	err := broker.Declare(ctx, js, broker.WithReplicas(3))
	if !errors.Is(err, broker.ErrReplicas) || !strings.Contains(err.Error(), "single server") {
		t.Errorf("Declare with 3 replicas on a cluster of one = %v, want ErrReplicas saying it is a single server", err)
	}
}

func TestDeclareReplicasSingleServer(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, 30*time.Second)
	for _, tc := range []struct {
		replicas int
		errHas   string
	}{
		{3, "the broker is a single server, not a JetStream cluster"},
		{2, "--replicas 2: want 1, 3 or 5"},
		{0, "--replicas 0: want 1, 3 or 5"},
		{7, "--replicas 7: want 1, 3 or 5"},
	} {
		err := broker.Declare(ctx, b.JS, broker.WithReplicas(tc.replicas))
		if !errors.Is(err, broker.ErrReplicas) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("Declare with %d replicas = %v, want ErrReplicas naming %q", tc.replicas, err, tc.errHas)
		}
	}
	if err := broker.Declare(ctx, b.JS, broker.WithReplicas(1)); err != nil {
		t.Errorf("Declare with 1 replica: %v", err)
	}
}
