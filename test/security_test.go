package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/history"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
)

// waitConnectFile waits for a connect file and reads it.
func waitConnectFile(t *testing.T, path string, p *proc) broker.ConnectFile {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		if p.exited() {
			t.Fatalf("%s exited: %s", p.cmd.Args, p.stderr.String())
		}
		_, err := os.Stat(path)
		return err == nil
	})
	cf, err := broker.ReadConnectFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
	}
	return cf
}

// loopbackURL is the connect file's broker on 127.0.0.1.
func loopbackURL(t *testing.T, cf broker.ConnectFile) string {
	t.Helper()
	u, err := url.Parse(cf.URLs[0])
	if err != nil {
		t.Fatal(err)
	}
	return "nats://127.0.0.1:" + u.Port()
}

// A controller listening beyond loopback requires credentials: a worker
// without them is refused with a message that says what to do, one with
// the connect file's worker credential serves the run, and the reader's
// file serves status.
func TestAuthByDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfPath := filepath.Join(dir, "run.json")
	ctl := background(t, "controller", "--dir", filepath.Join(dir, "store"), "--listen", "0.0.0.0:0", "--connect-file", cfPath,
		"--run", "guarded", "--budget", "40", "--init", "5", "--pool", "3", "--inherit", "--json")
	cf := waitConnectFile(t, cfPath, ctl)
	if cf.Role != broker.RoleWorker || cf.NkeySeed == "" || cf.Run != "guarded" {
		t.Fatalf("connect file: role %q run %q, seed given %v; want a worker credential for guarded", cf.Role, cf.Run, cf.NkeySeed != "")
	}
	reader := waitConnectFile(t, filepath.Join(dir, "run-reader.json"), ctl)
	if reader.Role != broker.RoleReader || reader.NkeySeed == cf.NkeySeed {
		t.Fatalf("reader file: role %q", reader.Role)
	}
	url := loopbackURL(t, cf)
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was let in")
	}
	r := evoq(t, 30*time.Second, "worker", "--nats", url, "--slots", "1", "--evaluator", "sim")
	if r.code == 0 || !strings.Contains(r.stderr, "the broker refused a client without credentials") || !strings.Contains(r.stderr, "--connect FILE") {
		t.Errorf("worker without credentials: exit %d\n%s", r.code, r.stderr)
	}
	st := evoq(t, 30*time.Second, "status", "--connect", filepath.Join(dir, "run-reader.json"), "--json")
	if st.code != 0 || !strings.Contains(st.stdout, `"run":"guarded"`) {
		t.Errorf("status with the reader's file: exit %d\n%s%s", st.code, st.stdout, st.stderr)
	}
	// The reader may list the run's checkpoint bucket, and the worker
	// use it: store its designs' checkpoints, fetch their parents'.
	if !strings.Contains(st.stdout, `"checkpoints":{"store":"object store bucket evoq-ckpt-guarded","count":0,"bytes":0}`) {
		t.Errorf("status with the reader's file does not list the checkpoint bucket:\n%s", st.stdout)
	}
	w := evoq(t, time.Minute, "worker", "--connect", cfPath, "--slots", "2", "--evaluator", "sim", "--sim-mean", "0.01", "--sim-checkpoint", "300KB")
	if w.code != 0 {
		t.Errorf("worker with the connect file: exit %d\n%s", w.code, tail(w.stderr, 2000))
	}
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 2000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != 40 || s.Checkpoints == nil || s.Checkpoints.Stored != 3 ||
		s.Checkpoints.Mutants == 0 || s.Checkpoints.Inherited != s.Checkpoints.Mutants {
		t.Errorf("%d evaluations, checkpoints %+v; want 40, the pool's 3 stored, every mutant inherited", s.Evaluations, s.Checkpoints)
	}
}

// --insecure opens a broker beyond loopback on purpose, and says so.
func TestInsecureWarns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfPath := filepath.Join(dir, "run.json")
	ctl := background(t, "controller", "--dir", filepath.Join(dir, "store"), "--listen", "0.0.0.0:0", "--insecure",
		"--connect-file", cfPath, "--run", "open", "--budget", "20", "--init", "5", "--pool", "3", "--json")
	cf := waitConnectFile(t, cfPath, ctl)
	if cf.NkeySeed != "" {
		t.Error("an --insecure broker's connect file holds a credential")
	}
	if w := evoq(t, time.Minute, "worker", "--nats", loopbackURL(t, cf), "--slots", "2", "--evaluator", "sim", "--sim-mean", "0.01"); w.code != 0 {
		t.Errorf("worker: exit %d\n%s", w.code, tail(w.stderr, 2000))
	}
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ctl.stderr.String(), "--insecure: the broker takes clients without credentials") {
		t.Errorf("no warning about --insecure:\n%s", tail(ctl.stderr.String(), 2000))
	}
	if r := evoq(t, 10*time.Second, "controller", "--insecure", "--auth", "--dir", t.TempDir()); r.code != 2 || !strings.Contains(r.stderr, "--insecure and --auth") {
		t.Errorf("--insecure --auth: exit %d %s", r.code, r.stderr)
	}
}

// Mutual TLS with auth: the connect file carries the CA; a worker without a
// client certificate is refused, one with it serves the run.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	pki := testutil.NewPKI(t)
	dir := t.TempDir()
	cfPath := filepath.Join(dir, "run.json")
	ctl := background(t, "controller", "--dir", filepath.Join(dir, "store"), "--listen", "127.0.0.1:0", "--auth",
		"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-ca", pki.CA, "--tls-verify",
		"--connect-file", cfPath, "--run", "mtls", "--budget", "20", "--init", "5", "--pool", "3", "--json")
	cf := waitConnectFile(t, cfPath, ctl)
	if cf.TLSCA != pki.CA || cf.NkeySeed == "" {
		t.Fatalf("connect file: CA %q (want %s), credential given %v", cf.TLSCA, pki.CA, cf.NkeySeed != "")
	}
	r := evoq(t, 30*time.Second, "worker", "--connect", cfPath, "--slots", "1", "--evaluator", "sim")
	if r.code == 0 || !strings.Contains(r.stderr, "TLS failed") {
		t.Errorf("worker without a client certificate: exit %d\n%s", r.code, tail(r.stderr, 2000))
	}
	w := evoq(t, time.Minute, "worker", "--connect", cfPath, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey,
		"--slots", "2", "--evaluator", "sim", "--sim-mean", "0.01")
	if w.code != 0 {
		t.Errorf("worker with a client certificate: exit %d\n%s", w.code, tail(w.stderr, 2000))
	}
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatal(err)
	}
	var sum struct{ Evaluations int }
	if err := json.Unmarshal([]byte(lastLine(ctl.stderr.String())), &sum); err != nil || sum.Evaluations != 20 {
		t.Errorf("summary %v %+v", err, sum)
	}
}

// Many runs, one broker: `evoq run delete` removes one run and leaves the
// others whole; a running run is refused unless --force.
func TestRunDelete(t *testing.T) {
	t.Parallel()
	_, url := startBroker(t, t.TempDir())
	for _, run := range []string{"keep", "drop"} {
		ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", "25", "--init", "5", "--pool", "3", "--json")
		background(t, "worker", "--nats", url, "--run", run, "--slots", "2", "--evaluator", "sim", "--sim-mean", "0.01")
		if err := ctl.wait(t, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	live := background(t, "controller", "--nats", url, "--run", "live", "--budget", "25")
	_, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(live.stderr.String(), "work queue ready") })
	if r := evoq(t, 30*time.Second, "run", "delete", "--nats", url, "live"); r.code != 2 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("delete a running run: exit %d %s", r.code, r.stderr)
	}
	r := evoq(t, 30*time.Second, "run", "delete", "--nats", url, "drop")
	if r.code != 0 || !strings.Contains(r.stdout, "deleted run drop: 25 results") {
		t.Fatalf("delete: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := len(storedResults(t, js, "drop")); n != 0 {
		t.Errorf("%d results of the deleted run left", n)
	}
	if n := len(storedResults(t, js, "keep")); n != 25 {
		t.Errorf("the other run has %d results, want 25", n)
	}
	if r := evoq(t, 30*time.Second, "status", "--nats", url, "--run", "drop"); r.code == 0 {
		t.Errorf("status of a deleted run: exit 0\n%s", r.stdout)
	}
	if r := evoq(t, 30*time.Second, "run", "delete", "--nats", url, "--force", "live"); r.code != 0 {
		t.Errorf("delete --force: exit %d %s", r.code, r.stderr)
	}
}

// A flood of garbage on a run's design and result subjects does not starve
// the real work: workers terminate garbage designs at once, the controller
// skips garbage results, and the run finishes its budget, each design
// counted once.
func TestGarbageFlood(t *testing.T) {
	t.Parallel()
	const run, budget, garbage = "flooded", 150, 3000
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", strconv.Itoa(budget), "--init", "10", "--pool", "5", "--json")
	nc, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "work queue ready") })
	for i := range garbage {
		junk := []byte(fmt.Sprintf("\xc1garbage %d", i))
		if err := nc.Publish(schema.DesignSubject(run), junk); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(schema.ResultSubject(run), junk); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	background(t, "worker", "--nats", url, "--run", run, "--slots", "4", "--evaluator", "sim", "--sim-mean", "0.01")
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 2000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != budget {
		t.Fatalf("%d evaluations, want %d", s.Evaluations, budget)
	}
	var results []*schema.Result
	malformed := 0
	err := history.FromJS(js).Results(context.Background(), run, func(_ uint64, _ time.Time, r *schema.Result, err error) error {
		if err != nil {
			malformed++
		} else {
			results = append(results, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if malformed != garbage {
		t.Errorf("%d malformed results stored, want the %d garbage ones", malformed, garbage)
	}
	checkDesigns(t, results, budget)
	if !strings.Contains(ctl.stderr.String(), "malformed") {
		t.Error("the controller did not report the malformed results")
	}
}
