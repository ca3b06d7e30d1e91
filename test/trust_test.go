package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/cli"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A cluster of three `evoq broker` processes on loopback in operator mode,
// on one trust root made by `evoq broker init`: every node refuses an
// anonymous client; a controller given the admin's connect file (the
// trust root's path) makes its run's account and writes its workers'
// connect file, whose credential works on every node; the node the
// results stream's leader is on is killed mid-run with SIGKILL, the
// workers fail over with the one credential, and the run completes with
// every design counted once. `evoq run revoke` then cuts the workers'
// credential off on every live node.
func TestTrustClusterRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	init := evoq(t, time.Minute, "broker", "init", "--dir", filepath.Join(dir, "trust"))
	trustPath := filepath.Join(dir, "trust", broker.TrustFile)
	if init.code != 0 || strings.TrimSpace(init.stdout) != trustPath {
		t.Fatalf("broker init: exit %d, stdout %q, want the trust file's path\n%s", init.code, init.stdout, init.stderr)
	}
	if st, err := os.Stat(trustPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("trust file: %v; want mode 0600", err)
	}
	c := startCluster(t, "--trust", trustPath)
	natsCLI := upstreamNATS(t)
	for i, u := range c.urls {
		if nc, err := nats.Connect(u, nats.Timeout(5*time.Second)); err == nil {
			nc.Close()
			t.Errorf("an anonymous client connected to %s", c.names[i])
		}
		if natsCLI != "" {
			// nats rtt exits 0 whether or not it connected; its output says.
			out, _ := exec.Command(natsCLI, "--server", u, "--timeout", "5s", "rtt").CombinedOutput()
			if !strings.Contains(strings.ToLower(string(out)), "authorization violation") {
				t.Errorf("the nats CLI, anonymous, on %s: want an authorization violation:\n%s", c.names[i], out)
			}
		}
	}
	admin := filepath.Join(dir, "admin.json")
	if err := broker.WriteConnectFile(admin, broker.ConnectFile{URLs: c.urls, Role: broker.RoleAdmin, Trust: trustPath}); err != nil {
		t.Fatal(err)
	}
	const run, budget = "trusted", 600
	workerFile := filepath.Join(dir, "worker.json")
	ctl := startSplit(t, "controller", "--connect", admin, "--replicas", "3", "--run", run, "--connect-file", workerFile,
		"--budget", strconv.Itoa(budget), "--init", "30", "--pool", "10", "--wait-slots", "8", "--ack-wait", "3s",
		"--progress", "500ms", "--json")
	waitFor(t, time.Minute, func() bool { _, err := os.Stat(workerFile); return err == nil })
	cf, err := broker.ReadConnectFile(workerFile)
	if err != nil {
		t.Fatal(err)
	}
	cred, ok := cf.Credential()
	if !ok || cred.Role != broker.RoleWorker || cred.JWT == "" || cf.Run != run {
		t.Fatalf("worker connect file: %+v; want a worker JWT of run %s", cf, run)
	}
	// The one credential works on every node, and its .creds file with
	// the nats CLI.
	if st, err := os.Stat(cf.Creds); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the connect file's .creds %q: %v; want mode 0600", cf.Creds, err)
	}
	for i, u := range c.urls {
		nc, err := nats.Connect(u, append(cred.Options(), nats.Timeout(5*time.Second))...)
		if err != nil {
			t.Errorf("the worker credential on %s: %v", c.names[i], err)
			continue
		}
		nc.Close()
		if natsCLI != "" {
			out, err := exec.Command(natsCLI, "--server", u, "--creds", cf.Creds, "--timeout", "5s", "rtt").CombinedOutput()
			if err != nil || strings.Contains(string(out), "failed") || strings.Contains(strings.ToLower(string(out)), "violation") {
				t.Errorf("the nats CLI with the worker's .creds on %s: %v\n%s", c.names[i], err, out)
			}
		}
	}
	var workers []*proc
	for i := range 2 {
		workers = append(workers, background(t, "worker", "--connect", workerFile, "--id", fmt.Sprintf("w%d", i+1),
			"--slots", "4", "--gpus", "none", "--evaluator", "sim", "--sim-mean", "0.05"))
	}

	// The test reads the run as its admin, in the run's account.
	trust, err := broker.LoadTrust(trustPath)
	if err != nil {
		t.Fatal(err)
	}
	adminCred, err := trust.UserJWT(broker.RoleAdmin, run, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := broker.Connect(c.list(), t.Name(), nil, testutil.Logger(t), adminCred.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.StreamInfo
	waitFor(t, 90*time.Second, func() bool {
		info = liveStreamInfo(js, schema.ResultStream)
		return info != nil && info.Cluster != nil && info.Cluster.Leader != "" && info.State.Msgs >= budget/4
	})
	leader := c.node(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("the results stream's leader %q is none of %v", info.Cluster.Leader, c.names)
	}
	c.nodes[leader].kill()
	t.Logf("killed %s, the results stream's leader, at %d results", c.names[leader], info.State.Msgs)

	select {
	case <-ctl.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the controller is still running 3 min after the kill\n%s\n%s", tail(ctl.stderr.String(), 4000), c.output())
	}
	if ctl.err != nil {
		t.Fatalf("controller: %v\n%s", ctl.err, tail(ctl.stderr.String(), 4000))
	}
	s := lastJSON(t, ctl.stdout.String())
	if s.Evaluations != budget || s.Lost != 0 || s.Error != 0 {
		t.Fatalf("summary: %d evaluations (%d lost, %d error); want %d, 0, 0", s.Evaluations, s.Lost, s.Error, budget)
	}
	for _, w := range workers {
		if err := w.wait(t, 30*time.Second); err != nil {
			t.Errorf("worker exited with %v:\n%s", err, tail(w.stderr.String(), 3000))
		}
	}
	// Revoked through the live nodes: every one refuses the worker
	// credential within seconds.
	var live []string
	for i, u := range c.urls {
		if i != leader {
			live = append(live, u)
		}
	}
	rv := evoq(t, time.Minute, "run", "revoke", "--nats", strings.Join(live, ","), "--trust", trustPath, "--credential", workerFile)
	if rv.code != 0 {
		t.Fatalf("run revoke: exit %d\n%s", rv.code, rv.stderr)
	}
	for _, u := range live {
		waitFor(t, 10*time.Second, func() bool {
			nc, err := nats.Connect(u, append(cred.Options(), nats.Timeout(5*time.Second))...)
			if err == nil {
				nc.Close()
			}
			return err != nil
		})
	}
	results := clusterResults(t, js, run)
	checkDesigns(t, results, budget)
	if f := fold(results, run, budget, 30, 10, runstate.ReplaceWorst); f.Terminal() != budget || f.Pool().Digest() != s.PoolDigest {
		t.Errorf("stored results: %d designs counted, pool %s; the controller: %d, %s", f.Terminal(), f.Pool().Digest(), budget, s.PoolDigest)
	}
}

// A cluster with auth and no trust root is refused, naming what makes
// one; a trust root and --insecure contradict each other.
func TestTrustFlags(t *testing.T) {
	t.Parallel()
	routes := fmt.Sprintf("nats-route://127.0.0.1:%d,nats-route://127.0.0.1:%d", freePort(t), freePort(t))
	r := evoq(t, time.Minute, "broker", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--auth",
		"--server-name", "a", "--cluster-name", "c", "--routes", routes)
	if r.code != 2 || !strings.Contains(r.stderr, "evoq broker init") || !strings.Contains(r.stderr, "--trust") {
		t.Errorf("--routes with --auth and no --trust: exit %d, want 2 naming evoq broker init and --trust\n%s", r.code, r.stderr)
	}
	trust := filepath.Join(t.TempDir(), broker.TrustFile)
	r = evoq(t, time.Minute, "broker", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--insecure", "--trust", trust)
	if r.code != 2 || !strings.Contains(r.stderr, "--trust and --insecure") {
		t.Errorf("--trust with --insecure: exit %d, want 2\n%s", r.code, r.stderr)
	}
	r = evoq(t, time.Minute, "controller", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--insecure", "--trust", trust, "--run", "x")
	if r.code != 2 || !strings.Contains(r.stderr, "--trust and --insecure") {
		t.Errorf("controller --trust with --insecure: exit %d, want 2\n%s", r.code, r.stderr)
	}
}

// upstreamNATS is the upstream nats CLI (github.com/nats-io/natscli,
// which .ci/run installs), or "" where it is not installed: the test then
// says so and checks with nats.go alone.
func upstreamNATS(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("EVOQ_NATS_CLI"); p != "" {
		return p
	}
	p, err := exec.LookPath("nats")
	if err != nil {
		t.Log("SKIPPED in part: no nats CLI on PATH (go install github.com/nats-io/natscli/nats@v0.5.0): anonymous clients are checked with nats.go only")
		return ""
	}
	return p
}

// The embedded broker in operator mode: `evoq run --trust` keeps each run
// of a store in an account of its own, its workers connecting with JWT
// credentials; the reading tools open the store with the trust root and
// see one run at a time; without it the store is refused, naming --trust.
func TestTrustEmbedded(t *testing.T) {
	t.Parallel()
	dir, trust := t.TempDir(), filepath.Join(t.TempDir(), broker.TrustFile)
	for _, r := range []struct {
		run    string
		budget int
		more   []string
	}{{"ea", 40, []string{"--inherit", "--sim-checkpoint", "200KB"}}, {"eb", 30, nil}} {
		res := evoq(t, 2*time.Minute, append([]string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--trust", trust, "--run", r.run,
			"--evaluator", "sim", "--sim-mean", "0.01", "--budget", strconv.Itoa(r.budget), "--init", "10", "--pool", "5", "--slots", "2", "--json"}, r.more...)...)
		if res.code != 0 {
			t.Fatalf("run %s: exit %d\n%s", r.run, res.code, tail(res.stderr, 3000))
		}
		s := lastJSON(t, res.stdout)
		if s.Evaluations != r.budget {
			t.Fatalf("run %s: %d evaluations, want %d", r.run, s.Evaluations, r.budget)
		}
		// The workers' JWT stores checkpoints through the controller's
		// commits, and every mutant inherits its parent's.
		if r.more != nil && (s.Checkpoints == nil || s.Checkpoints.Stored != 5 || s.Checkpoints.Mutants == 0 ||
			s.Checkpoints.Inherited != s.Checkpoints.Mutants) {
			t.Errorf("run %s: checkpoints %+v; want the pool's 5 stored, every mutant inherited", r.run, s.Checkpoints)
		}
	}
	for _, r := range []struct {
		run  string
		rows int
	}{{"ea", 40}, {"eb", 30}} {
		res := evoq(t, time.Minute, "export", "--dir", dir, "--trust", trust, "--run", r.run)
		if res.code != 0 {
			t.Fatalf("export %s: exit %d\n%s", r.run, res.code, res.stderr)
		}
		_, rows := readCSVRows(t, res.stdout)
		if len(rows) != r.rows {
			t.Errorf("export of run %s: %d rows, want %d (its own results alone)", r.run, len(rows), r.rows)
		}
		for _, row := range rows {
			if !strings.HasPrefix(row["design_id"], r.run+"-") {
				t.Errorf("export of run %s has %s", r.run, row["design_id"])
			}
		}
	}
	res := evoq(t, time.Minute, "status", "--dir", dir)
	if res.code == 0 || !strings.Contains(res.stderr, "operator mode") || !strings.Contains(res.stderr, "--trust") {
		t.Errorf("status without the trust root: exit %d; want a refusal naming --trust\n%s", res.code, res.stderr)
	}
	res = evoq(t, time.Minute, "status", "--dir", dir, "--trust", trust)
	if res.code == 0 || !strings.Contains(res.stderr, "[ea eb]") {
		t.Errorf("status of a store of two runs without --run: exit %d; want both named\n%s", res.code, res.stderr)
	}
}

// Inside a batch allocation (SLURM_JOB_END_TIME) the credentials of the
// connect file end with it, plus the margin; --credential-expiry sets
// another span; without operator mode it is refused.
func TestTrustCredentialExpiry(t *testing.T) {
	t.Parallel()
	end := time.Now().Add(time.Hour).Unix()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want int64
	}{
		{"allocation", []string{fmt.Sprintf("SLURM_JOB_END_TIME=%d", end)}, nil, end + int64(cli.CredentialMargin/time.Second)},
		{"given", nil, []string{"--credential-expiry", "30m"}, time.Now().Add(30 * time.Minute).Unix()},
	} {
		dir := t.TempDir()
		file := filepath.Join(dir, "run.json")
		res := evoqEnv(t, 2*time.Minute, tc.env, append([]string{"run", "--dir", filepath.Join(dir, "store"), "--listen", "127.0.0.1:0",
			"--trust", filepath.Join(dir, "trust", broker.TrustFile), "--run", "ex", "--connect-file", file,
			"--evaluator", "sim", "--sim-mean", "0.01", "--budget", "20", "--init", "5", "--pool", "5", "--slots", "2"}, tc.args...)...)
		if res.code != 0 {
			t.Fatalf("%s: exit %d\n%s", tc.name, res.code, tail(res.stderr, 3000))
		}
		cf, err := broker.ReadConnectFile(file)
		if err != nil {
			t.Fatal(err)
		}
		cred, _ := cf.Credential()
		uc, err := jwt.DecodeUserClaims(cred.JWT)
		if err != nil || uc.Expires < tc.want-60 || uc.Expires > tc.want+60 {
			t.Errorf("%s: the workers' credential expires %v (%v); want about %v", tc.name, time.Unix(uc.Expires, 0), err, time.Unix(tc.want, 0))
		}
	}
	res := evoq(t, time.Minute, "controller", "--dir", t.TempDir(), "--credential-expiry", "1h", "--run", "x")
	if res.code != 2 || !strings.Contains(res.stderr, "--credential-expiry 1h0m0s: needs a broker in operator mode") {
		t.Errorf("--credential-expiry without --trust: exit %d\n%s", res.code, res.stderr)
	}
}

// A single `evoq broker` with auth runs in operator mode by default, its
// trust root kept in its store: the admin's connect file names it, a
// controller elsewhere runs with it, and a store that kept nkey users
// before is left as it was.
func TestTrustBrokerDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, admin := filepath.Join(dir, "store"), filepath.Join(dir, "admin.json")
	port := freePort(t)
	brk := background(t, "broker", "--dir", store, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--auth", "--connect-file", admin)
	waitFor(t, time.Minute, func() bool { _, err := os.Stat(admin); return err == nil })
	cf, err := broker.ReadConnectFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	if cf.Trust != broker.StoreTrustFile(store) || cf.Role != broker.RoleAdmin || cf.NkeySeed != "" {
		t.Fatalf("admin connect file %+v; want the store's trust root, %s", cf, broker.StoreTrustFile(store))
	}
	if nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Error("an anonymous client connected")
	}
	workerFile := filepath.Join(dir, "run.json")
	ctl := background(t, "controller", "--connect", admin, "--run", "solo", "--budget", "30", "--init", "5", "--pool", "3",
		"--connect-file", workerFile, "--json")
	background(t, "worker", "--connect", workerFile, "--slots", "2", "--evaluator", "sim", "--sim-mean", "0.01")
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != 30 {
		t.Fatalf("%d evaluations, want 30", s.Evaluations)
	}
	_ = brk.cmd.Process.Signal(os.Interrupt)
	if err := brk.wait(t, 30*time.Second); err != nil {
		t.Fatalf("broker: %v", err)
	}
	// The store is read with its own trust root, found by itself.
	st := evoq(t, time.Minute, "status", "--dir", store, "--json")
	if st.code != 0 || !strings.Contains(st.stdout, `"run":"solo"`) {
		t.Errorf("status of the store: exit %d\n%s%s", st.code, st.stdout, st.stderr)
	}

	// A store whose broker kept nkey users goes on with them.
	old := filepath.Join(dir, "nkeys")
	if r := evoq(t, 2*time.Minute, "run", "--dir", old, "--listen", "127.0.0.1:0", "--auth", "--run", "old", "--evaluator", "noop",
		"--budget", "10", "--init", "5", "--pool", "3", "--slots", "2"); r.code != 0 {
		t.Fatalf("a run with nkey users: exit %d\n%s", r.code, tail(r.stderr, 2000))
	}
	oldAdmin := filepath.Join(dir, "old-admin.json")
	ob := background(t, "broker", "--dir", old, "--listen", "127.0.0.1:0", "--auth", "--connect-file", oldAdmin)
	waitFor(t, time.Minute, func() bool { _, err := os.Stat(oldAdmin); return err == nil })
	if cf, err := broker.ReadConnectFile(oldAdmin); err != nil || cf.Trust != "" || cf.NkeySeed == "" {
		t.Errorf("admin file of a store with nkey users: %+v, %v; want its nkey admin credential", cf, err)
	}
	if fileExists(broker.StoreTrustFile(old)) {
		t.Error("a trust root was made in a store that keeps nkey users")
	}
	_ = ob.cmd.Process.Signal(os.Interrupt)
	_ = ob.wait(t, 30*time.Second)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
