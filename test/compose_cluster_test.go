package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The cluster run: 2 workers of 4 slots with the sim evaluator's 0.2 s
// mean, about 40 evaluations a second when nothing is cut off. The budget
// leaves room for the worker's cut-off after the broker's on a loaded
// machine (with 2000, the worker came back at 1857 under two busy loops).
const (
	clusterBudget = 3000
	clusterInit   = 40
	clusterPool   = 20
)

// The compose file's cluster profile on the local Docker engine: three
// broker containers in a JetStream cluster, a controller with --replicas 3
// and two workers given the URL list. Mid-run the results stream's leader
// is cut off its network with `docker network disconnect` and later
// connected again, then a worker is cut off in the middle of its
// evaluations and connected again. The run completes with every design of
// the budget evaluated, counted once and published once, the broker
// catches up, and the cut-off worker carries on without a restart. Same
// needs as TestComposeScalesWorkers.
func TestComposeClusterFailover(t *testing.T) {
	t.Parallel()
	c := newCompose(t)
	// The trust root in a directory of the test's, so that the test too
	// can connect as the run's admin.
	c.trust = t.TempDir()
	c.env = append(c.env, "COMPOSE_PROFILES=cluster", "EVOQ_RUN=cluster", "EVOQ_BUDGET="+strconv.Itoa(clusterBudget),
		"EVOQ_SLOTS=4", "EVOQ_WAIT_SLOTS=8", "EVOQ_ACK_WAIT=5s", "EVOQ_TRUST="+c.trust)
	// The workers start once the test follows the run: started with the
	// rest, on a loaded machine the run was 80% through its budget before
	// the test could watch it, too far for the worker's cut-off below.
	c.must(t, 3*time.Minute, "up", "-d", "--build", "broker1", "broker2", "broker3", "cluster-controller")
	ctl := c.container(t, "cluster-controller")
	logs := followLogs(t, ctl)
	evaluations := func() int { return lastProgress(logs.stderr.String()).evaluations }
	js := c.clusterClient(t, "cluster")
	c.must(t, 2*time.Minute, "up", "-d", "--no-deps", "--no-recreate", "--scale", "cluster-worker=2", "cluster-worker")
	began := time.Now()

	// Cut off the results stream's leader, then connect it again.
	waitFor(t, 90*time.Second, func() bool { return evaluations() >= clusterBudget/10 })
	info := liveStreamInfo(js, schema.ResultStream)
	if info == nil || info.Cluster == nil || info.Config.Replicas != 3 {
		t.Fatalf("results stream info %+v: want 3 replicas with a leader", info)
	}
	leader := info.Cluster.Leader
	node := c.cut(t, leader)
	at := evaluations()
	t.Logf("cut off %s, the results stream's leader, at %d evaluations, %.1f s in", leader, at, time.Since(began).Seconds())
	waitFor(t, 90*time.Second, func() bool { return evaluations() >= at+clusterBudget/10 })
	t.Logf("%d evaluations more within %.1f s without %s", clusterBudget/10, time.Since(node.since).Seconds(), leader)
	c.reconnect(t, node)
	waitFor(t, 60*time.Second, func() bool { return c.current(js, leader) })
	t.Logf("%s is back and current, %.1f s after it was connected again", leader, time.Since(node.back).Seconds())

	// Cut off a worker in the middle of its evaluations, then connect it
	// again: its designs go to the other worker after --ack-wait, and the
	// results it holds are stored once it is back (and counted once).
	workers := strings.Fields(c.must(t, 30*time.Second, "ps", "-q", "cluster-worker"))
	if len(workers) != 2 {
		t.Fatalf("cluster-worker containers %v, want 2", workers)
	}
	disconnects := func() int {
		out, _ := exec.Command("docker", "logs", workers[0]).CombinedOutput()
		return strings.Count(string(out), "disconnected from broker")
	}
	before := disconnects()
	at = evaluations()
	w := c.cut(t, workers[0])
	t.Logf("cut off worker %s at %d evaluations", shortID(workers[0]), at)
	// The other worker takes over its designs after --ack-wait (5 s); the
	// cut-off one takes its broker for dead after its unanswered pings
	// (broker.PingInterval) and tries the others, in vain until it is
	// connected again.
	waitFor(t, 60*time.Second, func() bool { return evaluations() >= at+clusterBudget/20 })
	waitFor(t, 60*time.Second, func() bool { return disconnects() > before })
	c.reconnect(t, w)
	t.Logf("worker %s cut off at %s, connected again after %.1f s", shortID(workers[0]), w.since.Format("15:04:05.000"), w.back.Sub(w.since).Seconds())
	if p := evaluations(); p > clusterBudget-200 {
		t.Errorf("%d of %d designs evaluated when the worker came back: the budget is too small to test that", p, clusterBudget)
	}

	s := controllerSummary(t, 4*time.Minute, ctl, logs)
	if s.Evaluations != clusterBudget || s.Lost != 0 || s.Error != 0 {
		t.Fatalf("summary: %d evaluations (%d lost, %d error); want %d, 0, 0", s.Evaluations, s.Lost, s.Error, clusterBudget)
	}
	for _, id := range workers {
		if code := waitExit(t, time.Minute, id); code != 0 || c.restarts(t, id) != 0 {
			t.Errorf("worker %s: exit %d after %d restarts; want 0 and none", shortID(id), code, c.restarts(t, id))
		}
	}

	results := clusterResults(t, js, s.Run)
	checkDesigns(t, results, clusterBudget)
	f := fold(results, s.Run, clusterBudget, clusterInit, clusterPool, runstate.ReplaceWorst)
	if f.Terminal() != clusterBudget || f.Pool().Digest() != s.PoolDigest {
		t.Errorf("stored results: %d designs with a terminal result, pool digest %s; want %d, %s (the controller's)",
			f.Terminal(), f.Pool().Digest(), clusterBudget, s.PoolDigest)
	}
	if d := liveStreamInfo(js, schema.DesignStream); d == nil || d.State.LastSeq != clusterBudget {
		t.Errorf("the design queue: %+v; want %d designs ever stored: a design was published twice or skipped", d, clusterBudget)
	}
	wlog, _ := exec.Command("docker", "logs", workers[0]).CombinedOutput()
	t.Logf("compose cluster run: %d results for %d designs (%d evaluated twice, counted once) in %.1f s, %.1f evaluations/s\nwhat it cost, in log lines:\ncontroller: %s\ncut-off worker: %s",
		len(results), f.Terminal(), len(results)-f.Terminal(), s.WallS, s.EvalsPerS, warnings(logs.stderr.String()), warnings(string(wlog)))
}

// clusterClient connects the test, on the host, to the brokers' container
// addresses.
// addresses, as run's admin, with the cluster's trust root; an anonymous
// client is refused by every broker.
func (c *compose) clusterClient(t *testing.T, run string) jetstream.JetStream {
	t.Helper()
	var urls []string
	for _, b := range []string{"broker1", "broker2", "broker3"} {
		for _, n := range c.networks(t, c.container(t, b)) {
			urls = append(urls, "nats://"+n.IPAddress+":4222")
		}
	}
	path := filepath.Join(c.trust, broker.TrustFile)
	var trust *broker.Trust
	waitFor(t, 60*time.Second, func() bool {
		var err error
		trust, err = broker.LoadTrust(path)
		return err == nil
	})
	admin, err := trust.UserJWT(broker.RoleAdmin, run, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		waitFor(t, 60*time.Second, func() bool {
			nc, err := nats.Connect(u, append(admin.Options(), nats.Timeout(5*time.Second))...)
			if err == nil {
				nc.Close()
			}
			return err == nil
		})
		if nc, err := nats.Connect(u, nats.Timeout(5*time.Second)); err == nil {
			nc.Close()
			t.Errorf("an anonymous client connected to the broker at %s", u)
		}
	}
	nc, err := broker.Connect(strings.Join(urls, ","), t.Name(), nil, testutil.Logger(t), admin.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// endpoint is a container's place on a network.
type endpoint struct {
	IPAddress string
	Aliases   []string
}

// networks are a container's networks by name.
func (c *compose) networks(t *testing.T, id string) map[string]endpoint {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	var nets map[string]endpoint
	if err := json.Unmarshal(out, &nets); err != nil {
		t.Fatalf("docker inspect %s: %v: %s", id, err, out)
	}
	return nets
}

// cutOff is a container taken off its network.
type cutOff struct {
	id, network string
	aliases     []string
	since, back time.Time
}

// cut disconnects a container, a service's or by ID, from the cluster
// network.
func (c *compose) cut(t *testing.T, service string) *cutOff {
	t.Helper()
	id := service
	if strings.HasPrefix(service, "broker") {
		id = c.container(t, service)
	}
	for name, ep := range c.networks(t, id) {
		if strings.HasSuffix(name, "evoq-cluster") {
			cut := &cutOff{id: id, network: name, aliases: ep.Aliases, since: time.Now()}
			docker(t, "network", "disconnect", name, id)
			return cut
		}
	}
	t.Fatalf("%s is on no evoq-cluster network", service)
	return nil
}

// reconnect connects a cut-off container again under its names.
func (c *compose) reconnect(t *testing.T, cut *cutOff) {
	t.Helper()
	args := []string{"network", "connect"}
	for _, a := range cut.aliases {
		args = append(args, "--alias", a)
	}
	docker(t, append(args, cut.network, cut.id)...)
	cut.back = time.Now()
}

// current reports whether node is a current replica (or the leader) of
// the results stream.
func (c *compose) current(js jetstream.JetStream, node string) bool {
	info := liveStreamInfo(js, schema.ResultStream)
	if info == nil || info.Cluster == nil {
		return false
	}
	if info.Cluster.Leader == node {
		return true
	}
	for _, p := range info.Cluster.Replicas {
		if p.Name == node {
			return p.Current && !p.Offline && p.Lag == 0
		}
	}
	return false
}

// restarts is how often Docker restarted a container.
func (c *compose) restarts(t *testing.T, id string) int {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.RestartCount}}", id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

func docker(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func shortID(id string) string { return fmt.Sprintf("%.12s", id) }
