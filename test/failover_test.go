package test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// Figures of the failover run: 12 slots of 0.1 s evaluations, about 100
// evaluations a second when nothing fails.
const (
	failoverBudget = 1500
	failoverInit   = 40
	failoverPool   = 20
)

// brokerCluster is three `evoq broker` processes on loopback forming a
// JetStream cluster, each on its own store.
type brokerCluster struct {
	nodes []*restartable
	names []string // server names, as stream info reports leaders
	urls  []string // client URLs
}

// startCluster starts the three brokers; every one is given the same
// --routes, its own route URL among them, and the extra flags.
func startCluster(t *testing.T, extra ...string) *brokerCluster {
	t.Helper()
	c := &brokerCluster{}
	var routes, listens []string
	for range 3 {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(freePort(t)))
		listens = append(listens, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	}
	root := t.TempDir()
	for i := range 3 {
		name := fmt.Sprintf("node%d", i+1)
		c.names = append(c.names, name)
		c.urls = append(c.urls, "nats://"+listens[i])
		args := append([]string{"broker", "--dir", filepath.Join(root, name),
			"--listen", listens[i], "--server-name", name, "--cluster-name", "failover",
			"--cluster-listen", strings.TrimPrefix(routes[i], "nats-route://"), "--routes", strings.Join(routes, ",")}, extra...)
		c.nodes = append(c.nodes, newRestartable(t, name, args...))
	}
	// Clients started before every node listens would all connect to the
	// first one up.
	// A node serves once the cluster has elected its JetStream meta
	// leader, which takes a few route rounds: on a loaded machine running
	// other tests in parallel, far longer than on a quiet one.
	waitShowing(t, 2*time.Minute, func() bool {
		for _, n := range c.nodes {
			if !strings.Contains(n.output(), "broker serving") {
				return false
			}
		}
		return true
	}, c.output)
	return c
}

// list is the URL list clients are given.
func (c *brokerCluster) list() string { return strings.Join(c.urls, ",") }

// node is the index of the broker named name, -1 if none.
func (c *brokerCluster) node(name string) int {
	for i, n := range c.names {
		if n == name {
			return i
		}
	}
	return -1
}

func (c *brokerCluster) output() string {
	var out []string
	for i, n := range c.nodes {
		out = append(out, fmt.Sprintf("--- %s:\n%s", c.names[i], tail(n.output(), 3000)))
	}
	return strings.Join(out, "\n")
}

// client connects the test to the cluster, with the URL list.
func (c *brokerCluster) client(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := broker.Connect(c.list(), t.Name(), nil, testutil.Logger(t))
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

// streamInfo reads a stream's info, nil while the cluster cannot answer.
func liveStreamInfo(js jetstream.JetStream, name string) *jetstream.StreamInfo {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil
	}
	return info
}

// clusterResults reads a run's stored results, in stream order, from a
// cluster. A fetch that comes back empty before the end (its consumer was
// placed on a node still settling after a failover) is retried with a new
// consumer from the next result on.
func clusterResults(t *testing.T, js jetstream.JetStream, run string) []*schema.Result {
	t.Helper()
	want := subjectCount(t, js, run)
	var out []*schema.Result
	var next uint64 = 1
	deadline := time.Now().Add(60 * time.Second)
	for len(out) < want {
		if time.Now().After(deadline) {
			t.Fatalf("read %d of %d results within 60 s", len(out), want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cons, err := js.OrderedConsumer(ctx, schema.ResultStream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{schema.ResultSubject(run)}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next})
		cancel()
		if err != nil {
			t.Logf("results consumer: %v; retrying", err)
			continue
		}
		for len(out) < want {
			msgs, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				break
			}
			n := 0
			for m := range msgs.Messages() {
				r, err := schema.DecodeResult(m.Data())
				if err != nil {
					t.Fatalf("stored result does not decode: %v", err)
				}
				meta, err := m.Metadata()
				if err != nil {
					t.Fatal(err)
				}
				out, next, n = append(out, r), meta.Sequence.Stream+1, n+1
			}
			if n == 0 {
				t.Logf("read %d of %d results, then nothing: reading on with a new consumer", len(out), want)
				break
			}
		}
	}
	return out
}

// splitProc is an evoq process whose stdout is kept apart from its log.
type splitProc struct {
	*proc
	stdout syncBuffer
}

func startSplit(t *testing.T, args ...string) *splitProc {
	t.Helper()
	p := &splitProc{}
	p.proc = newProc(&p.stdout, args...)
	p.start(t, nil)
	return p
}

// Three brokers in a cluster, streams and buckets with 3 replicas, workers
// given the URL list: the leader of the results stream is killed with
// SIGKILL mid-run and started again on its store later. The run goes on
// without it and completes with every design of the budget evaluated,
// counted once and published once; the node that comes back catches up.
func TestFailoverClusterLeaderKilled(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := startCluster(t)
	js := c.client(t)
	const run = "failover"
	var workers []*proc
	for i := range 2 {
		workers = append(workers, background(t, "worker", "--nats", c.list(), "--run", run, "--id", fmt.Sprintf("w%d", i+1),
			"--slots", "4", "--gpus", "none", "--evaluator", "sim", "--sim-mean", "0.1"))
	}
	ctl := startSplit(t, "controller", "--nats", c.list(), "--replicas", "3", "--run", run,
		"--budget", strconv.Itoa(failoverBudget), "--init", strconv.Itoa(failoverInit), "--pool", strconv.Itoa(failoverPool),
		"--wait-slots", "8", "--ack-wait", "3s", "--progress", "500ms", "--json")
	fail := func(format string, a ...any) {
		t.Helper()
		var ws []string
		for _, w := range workers {
			ws = append(ws, tail(quiet(w.stderr.String()), 2000))
		}
		t.Fatalf(format+"\ncontroller:\n%s\nlast progress: %+v\nworkers:\n%s\nbrokers:\n%s",
			append(a, tail(quiet(ctl.stderr.String()), 5000), lastProgress(ctl.stderr.String()), strings.Join(ws, "\n---\n"), c.output())...)
	}
	// evaluations is what the controller counted, from its progress line.
	evaluations := func() int { return lastProgress(ctl.stderr.String()).evaluations }
	await := func(limit time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				fail("waited %s for %s", limit, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The leader of the results stream, once the run is under way.
	var info *jetstream.StreamInfo
	await(60*time.Second, "the run to start", func() bool {
		info = liveStreamInfo(js, schema.ResultStream)
		return info != nil && info.Cluster != nil && info.Cluster.Leader != "" && info.State.Msgs > 0
	})
	if info.Config.Replicas != 3 || len(info.Cluster.Replicas) != 2 {
		fail("results stream: %d replicas configured, cluster %+v; want 3", info.Config.Replicas, info.Cluster)
	}
	leader := c.node(info.Cluster.Leader)
	if leader < 0 {
		fail("the results stream's leader %q is none of %v", info.Cluster.Leader, c.names)
	}
	// A third worker knows only the leader's URL: it has to fail over to
	// the nodes the cluster told it of.
	workers = append(workers, background(t, "worker", "--nats", c.urls[leader], "--run", run, "--id", "w3",
		"--slots", "4", "--gpus", "none", "--evaluator", "sim", "--sim-mean", "0.1"))
	await(60*time.Second, "a quarter of the budget", func() bool { return evaluations() >= failoverBudget/4 })

	killed := time.Now()
	atKill := evaluations()
	c.nodes[leader].kill()
	t.Logf("killed %s, the results stream's leader, at %d evaluations, %.1f s in", c.names[leader], atKill, killed.Sub(began).Seconds())
	await(45*time.Second, "the run to go on without the leader", func() bool { return evaluations() >= atKill+failoverBudget/5 })
	t.Logf("%d evaluations more within %.1f s without %s", failoverBudget/5, time.Since(killed).Seconds(), c.names[leader])
	c.nodes[leader].start()

	select {
	case <-ctl.done:
	case <-time.After(90 * time.Second):
		fail("the controller is still running 90 s after the kill")
	}
	if ctl.err != nil {
		fail("controller: %v", ctl.err)
	}
	s := lastJSON(t, ctl.stdout.String())
	if s.Evaluations != failoverBudget || s.Lost != 0 || s.Error != 0 {
		fail("summary: %d evaluations (%d lost, %d error); want %d, 0, 0", s.Evaluations, s.Lost, s.Error, failoverBudget)
	}
	for _, w := range workers {
		if err := w.wait(t, 30*time.Second); err != nil {
			t.Errorf("worker exited with %v:\n%s", err, tail(w.stderr.String(), 3000))
		}
	}

	// The restarted node catches up on its store.
	await(30*time.Second, "the restarted node to catch up", func() bool {
		info := liveStreamInfo(js, schema.ResultStream)
		if info == nil || info.Cluster == nil {
			return false
		}
		for _, p := range info.Cluster.Replicas {
			if p.Name == c.names[leader] {
				return p.Current && !p.Offline && p.Lag == 0
			}
		}
		return info.Cluster.Leader == c.names[leader]
	})

	// Nothing lost, nothing counted twice, nothing published twice.
	results := clusterResults(t, js, run)
	checkDesigns(t, results, failoverBudget)
	f := fold(results, run, failoverBudget, failoverInit, failoverPool, runstate.ReplaceWorst)
	if f.Terminal() != failoverBudget || f.Pool().Digest() != s.PoolDigest {
		t.Errorf("stored results: %d designs with a terminal result, pool digest %s; want %d, %s (the controller's)",
			f.Terminal(), f.Pool().Digest(), failoverBudget, s.PoolDigest)
	}
	if d := liveStreamInfo(js, schema.DesignStream); d == nil || d.State.LastSeq != failoverBudget {
		t.Errorf("the design queue: %+v; want %d designs ever stored: a design was published twice or skipped", d, failoverBudget)
	}
	digests := checkDigests(t, results, ctl.stderr.String(), run, failoverBudget, failoverInit, failoverPool, runstate.ReplaceWorst)
	// w3 knew only the dead node: results after the kill show it failed over.
	after := 0
	for _, r := range results {
		if r.Worker == "w3" && r.Start.After(killed) {
			after++
		}
	}
	if after == 0 || !strings.Contains(workers[2].stderr.String(), "reconnected to broker") {
		t.Errorf("w3, connected to the killed node, stored %d results after the kill; want some, after a reconnect:\n%s", after, tail(workers[2].stderr.String(), 3000))
	}
	t.Logf("%d results for %d designs (%d evaluated twice, counted once), %d pool digests checked; run %.1f s, test %.1f s",
		len(results), f.Terminal(), len(results)-f.Terminal(), digests, s.WallS, time.Since(began).Seconds())
	t.Logf("what the failover cost, in log lines:\ncontroller: %s\nw1: %s\nw2: %s\nw3: %s", warnings(ctl.stderr.String()),
		warnings(workers[0].stderr.String()), warnings(workers[1].stderr.String()), warnings(workers[2].stderr.String()))
}

// quiet is a log without its routine lines: progress and evaluations.
func quiet(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "msg=progress") && !strings.Contains(l, `msg="evaluation done"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var warnLine = regexp.MustCompile(`level=(?:warning|error) msg="?([^"=]+?)"? (?:[a-z_]+=|$)`)

// warnings counts a log's warning and error lines by message.
func warnings(log string) string {
	n := map[string]int{}
	for _, m := range warnLine.FindAllStringSubmatch(log, -1) {
		n[m[1]]++
	}
	if len(n) == 0 {
		return "none"
	}
	var out []string
	for msg, k := range n {
		out = append(out, fmt.Sprintf("%dx %q", k, msg))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
