package test

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// siteServer is an upstream nats-server started from its Go module with a
// config file of its own, as a site runs NATS: evoq is a tenant there.
type siteServer struct {
	url string
	dir string
	srv *server.Server
	// secrets are what must never appear in evoq's output.
	secrets []string
	// workerEnv is added to the workers' environment.
	workerEnv []string
}

// startSite starts nats-server with conf (its store directory and listen
// address are added).
func startSite(t *testing.T, conf string) *siteServer {
	t.Helper()
	s := &siteServer{dir: t.TempDir()}
	port := freePort(t)
	path := filepath.Join(s.dir, "nats.conf")
	conf = fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, filepath.Join(s.dir, "js")) + conf
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server config: %v\n%s", err, conf)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(srv.Shutdown)
	s.url, s.srv = fmt.Sprintf("nats://127.0.0.1:%d", port), srv
	return s
}

// siteUser is a user of an operator-mode site: its .creds file and the
// secrets in it.
type siteUser struct {
	creds, seed, jwt string
}

// operatorSite starts nats-server in operator mode, its keys and JWTs made
// here with nkeys and jwt/v2, as nsc would: an account SITE with
// JetStream limited by limits, and users controller (no limits on
// subjects) and worker (its publishes and subscriptions within evoq's
// subjects, the JetStream API and its inbox).
func operatorSite(t *testing.T, limits jwt.JetStreamLimits) (*siteServer, map[string]siteUser) {
	t.Helper()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "site"
	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "SITE"
	ac.Limits.JetStreamLimits = limits
	accJWT, err := ac.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	users := map[string]siteUser{}
	for _, name := range []string{"controller", "worker"} {
		u, _ := nkeys.CreateUser()
		seed, _ := u.Seed()
		pub, _ := u.PublicKey()
		uc := jwt.NewUserClaims(pub)
		uc.Name = name
		if name == "worker" {
			uc.Pub.Allow.Add("$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "$O.>", "evoq.>", "_INBOX.>")
			uc.Sub.Allow.Add("_INBOX.>", "evoq.>", "$KV.>")
		}
		token, err := uc.Encode(acc)
		if err != nil {
			t.Fatal(err)
		}
		data, err := jwt.FormatUserConfig(token, seed)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".creds")
		writeSecret(t, path, data)
		users[name] = siteUser{creds: path, seed: string(seed), jwt: token}
	}
	opFile := filepath.Join(dir, "operator.jwt")
	writeSecret(t, opFile, []byte(opJWT))
	s := startSite(t, fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %s\n  %s: %s\n}\n",
		opFile, sysPub, sysPub, sysJWT, accPub, accJWT))
	for _, u := range users {
		s.secrets = append(s.secrets, u.seed, u.jwt)
	}
	return s, users
}

// noSecret fails the test if any output holds one of the site's secrets.
func (s *siteServer) noSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, sec := range s.secrets {
		if strings.Contains(out, sec) {
			t.Errorf("%s shows a secret (%.6s...):\n%s", what, sec, tail(out, 3000))
		}
	}
}

// siteRun runs a search on the site's NATS: a controller with ctlArgs
// (how it connects) writing its workers' connect file, two workers given
// that file, then evoq status (text and JSON), export and report with
// readArgs; every output is checked for the site's secrets. It returns
// the controller's stderr.
func (s *siteServer) siteRun(t *testing.T, run string, ctlArgs, readArgs []string) string {
	t.Helper()
	dir := t.TempDir()
	workerFile := filepath.Join(dir, "run.json")
	const budget = 60
	// The evaluator prints its environment to its stdout and stderr, and
	// one design fails with it: the evaluators' logs and the error
	// result's stderr tail show whatever the worker handed down.
	script := filepath.Join(dir, "eval.sh")
	writeSecret(t, script, []byte("cat >/dev/null\nenv\nenv >&2\ncase \"$EVOQ_DESIGN_ID\" in *-7) exit 1;; esac\n"+
		"echo \"{\\\"fitness\\\": ${EVOQ_DESIGN_ID##*-}}\"\n"))
	ctl := background(t, append(append([]string{"controller"}, ctlArgs...), "--run", run, "--budget", strconv.Itoa(budget),
		"--init", "10", "--pool", "5", "--connect-file", workerFile, "--json", "--wait-slots", "4", "--eval-cmd", "sh "+script)...)
	waitFor(t, time.Minute, func() bool { return fileExists(workerFile) || ctl.exited() })
	if ctl.exited() {
		t.Fatalf("controller ended before writing its workers' connect file: %v\n%s", ctl.err, tail(ctl.stderr.String(), 3000))
	}
	logs := filepath.Join(dir, "evaluator-logs")
	var workers []*proc
	for i := range 2 {
		workers = append(workers, backgroundEnv(t, s.workerEnv, "worker", "--connect", workerFile, "--id", fmt.Sprintf("w%d", i),
			"--slots", "2", "--gpus", "none", "--eval-logs", logs))
	}
	select {
	case <-ctl.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the controller is still running after 2 min\n%s\nworker:\n%s", tail(ctl.stderr.String(), 3000), tail(workers[0].stderr.String(), 3000))
	}
	if ctl.err != nil {
		t.Fatalf("controller: %v\n%s", ctl.err, tail(ctl.stderr.String(), 3000))
	}
	out := ctl.stderr.String()
	if sm := lastJSON(t, out); sm.Evaluations != budget || sm.Error != 1 {
		t.Fatalf("%d evaluations, %d errors; want %d, 1 (design 7)", sm.Evaluations, sm.Error, budget)
	}
	s.noSecret(t, "the controller's output", out)
	for i, w := range workers {
		if err := w.wait(t, time.Minute); err != nil {
			t.Errorf("worker %d: %v\n%s", i, err, tail(w.stderr.String(), 2000))
		}
		s.noSecret(t, "a worker's output", w.stderr.String())
	}
	s.noSecretInLogs(t, logs)
	report := filepath.Join(dir, "report.html")
	for _, args := range [][]string{
		{"status", "--run", run},
		{"status", "--run", run, "--json"},
		{"export", "--run", run},
		{"report", "--run", run, "--out", report},
	} {
		r := evoq(t, time.Minute, append(args, readArgs...)...)
		if r.code != 0 {
			t.Errorf("evoq %s: exit %d\n%s", strings.Join(args, " "), r.code, tail(r.stderr, 2000))
		}
		s.noSecret(t, "evoq "+args[0]+"'s output", r.stdout+r.stderr)
		if args[0] == "export" && !strings.Contains(r.stdout, "EVOQ_DESIGN_ID=") {
			t.Errorf("the export has no error result with its evaluator's stderr: the test does not test it\n%s", tail(r.stdout, 2000))
		}
	}
	if data, err := os.ReadFile(report); err == nil {
		s.noSecret(t, "the report", string(data))
	} else {
		t.Errorf("report: %v", err)
	}
	s.noSecretInPNGs(t, report)
	return out
}

// noSecretInLogs checks every evaluator log file under dir, and that
// there are some, with the environment the evaluators were given.
func (s *siteServer) noSecretInLogs(t *testing.T, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(data), "EVOQ_DESIGN_ID=") {
			n++
		}
		s.noSecret(t, "the evaluator log "+filepath.Base(path), string(data))
		return nil
	})
	if err != nil || n == 0 {
		t.Errorf("evaluator logs under %s: %v, %d with the evaluator's environment; want some", dir, err, n)
	}
}

// noSecretInPNGs checks the report's charts (report-*.png beside it),
// and that there are some: their bytes, and the text of their text
// chunks (tEXt, and zTXt and iTXt inflated).
func (s *siteServer) noSecretInPNGs(t *testing.T, report string) {
	t.Helper()
	pngs, _ := filepath.Glob(strings.TrimSuffix(report, ".html") + "-*.png")
	if len(pngs) == 0 {
		t.Errorf("no chart beside %s", report)
	}
	for _, p := range pngs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s.noSecret(t, "the chart "+filepath.Base(p), string(data))
		s.noSecret(t, "the text chunks of the chart "+filepath.Base(p), strings.Join(pngText(t, data), "\n"))
	}
}

// pngText is the text of data's text chunks.
func pngText(t *testing.T, data []byte) []string {
	t.Helper()
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("not a PNG")
	}
	var texts []string
	for rest := data[8:]; len(rest) >= 12; {
		n := binary.BigEndian.Uint32(rest)
		if uint64(n)+12 > uint64(len(rest)) {
			t.Fatalf("a PNG chunk of %d bytes runs past the file's end", n)
		}
		kind, body := string(rest[4:8]), rest[8:8+n]
		rest = rest[12+n:]
		switch kind {
		case "tEXt":
			texts = append(texts, string(body))
		case "zTXt", "iTXt":
			// keyword NUL [iTXt: flag method lang NUL key NUL] method data
			key, z, _ := bytes.Cut(body, []byte{0})
			texts = append(texts, string(key))
			if kind == "iTXt" {
				if len(z) < 2 || z[0] == 0 {
					texts = append(texts, string(z))
					continue
				}
				z = z[2:]
				for range 2 {
					_, z, _ = bytes.Cut(z, []byte{0})
				}
			} else if len(z) > 0 {
				z = z[1:]
			}
			r, err := zlib.NewReader(bytes.NewReader(z))
			if err != nil {
				t.Errorf("a %s chunk that does not inflate: %v", kind, err)
				continue
			}
			b, err := io.ReadAll(r)
			if err != nil {
				t.Errorf("a %s chunk that does not inflate: %v", kind, err)
			}
			texts = append(texts, string(b))
		}
	}
	return texts
}

// A site's NATS with an account of its own, JetStream enabled, and a user
// and password: the controller and the workers run as its tenants, the
// password in the controller's URL and in the workers' connect file; no
// output shows it, and the controller warns that its workers hold its
// rights.
func TestSitePassword(t *testing.T) {
	t.Parallel()
	const password = "s3cretPW-site"
	s := startSite(t, fmt.Sprintf("accounts {\n  SITE { jetstream: enabled, users: [ {user: evoq, password: %q} ] }\n}\n", password))
	s.secrets = []string{password}
	url := strings.Replace(s.url, "nats://", "nats://evoq:"+password+"@", 1)
	// The workers' environment names the URL with its password too, as
	// a batch job's may: their evaluators must not be handed it.
	s.workerEnv = []string{"NATS_URL=" + url}
	out := s.siteRun(t, "pw", []string{"--nats", url}, []string{"--nats", url})
	if !strings.Contains(out, "nats://evoq:***@127.0.0.1") {
		t.Errorf("the controller's log names no redacted URL:\n%s", tail(out, 3000))
	}
	if !strings.Contains(out, "the workers then hold the same rights as the controller") {
		t.Errorf("no warning that the workers hold the controller's credential:\n%s", tail(out, 3000))
	}
	// A wrong password: refused at once, named, not shown.
	bad := strings.Replace(s.url, "nats://", "nats://evoq:wr0ngPW@", 1)
	r := evoq(t, time.Minute, "status", "--nats", bad, "--run", "pw")
	if r.code == 0 || !strings.Contains(r.stderr, "the user and password") || strings.Contains(r.stderr, "wr0ngPW") {
		t.Errorf("status with a wrong password: exit %d\n%s", r.code, r.stderr)
	}
}

// A site's NATS in operator mode, its .creds made with jwt/v2 and nkeys:
// the controller runs with --creds and hands the workers the site's
// worker credential (--worker-creds) in their connect file; status and
// export read with $NATS_CREDS and $NATS_URL; no seed or JWT appears in
// any output.
func TestSiteCreds(t *testing.T) {
	t.Parallel()
	s, users := operatorSite(t, jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1,
		MaxAckPending: -1, MemoryMaxStreamBytes: -1, DiskMaxStreamBytes: -1})
	dir := t.TempDir()
	// The readers' tools read with the worker's credential here: the
	// site gave no reader's.
	out := s.siteRunEnv(t, "cr", []string{"--nats", s.url, "--creds", users["controller"].creds, "--worker-creds", users["worker"].creds},
		[]string{"NATS_CREDS=" + users["worker"].creds, "NATS_URL=" + s.url}, dir)
	if strings.Contains(out, "the same rights as the controller") {
		t.Errorf("warned of a shared credential although --worker-creds was given:\n%s", tail(out, 2000))
	}
}

// siteRunEnv is siteRun with the reading tools given their credential
// in the environment alone, and the workers' connect file checked.
func (s *siteServer) siteRunEnv(t *testing.T, run string, ctlArgs, env []string, dir string) string {
	t.Helper()
	workerFile := filepath.Join(dir, "run.json")
	const budget = 60
	ctl := background(t, append(append([]string{"controller"}, ctlArgs...), "--run", run, "--budget", strconv.Itoa(budget),
		"--init", "10", "--pool", "5", "--connect-file", workerFile, "--json", "--wait-slots", "4")...)
	waitFor(t, time.Minute, func() bool { return fileExists(workerFile) || ctl.exited() })
	if ctl.exited() {
		t.Fatalf("controller ended before writing its workers' connect file: %v\n%s", ctl.err, tail(ctl.stderr.String(), 3000))
	}
	data, err := os.ReadFile(workerFile)
	if err != nil {
		t.Fatal(err)
	}
	var cf broker.ConnectFile
	if err := json.Unmarshal(data, &cf); err != nil {
		t.Fatal(err)
	}
	for _, u := range cf.URLs {
		if broker.HasUserInfo(u) {
			t.Errorf("the workers' connect file names %s", broker.RedactURL(u))
		}
	}
	var workers []*proc
	for i := range 2 {
		workers = append(workers, background(t, "worker", "--connect", workerFile, "--id", fmt.Sprintf("w%d", i),
			"--slots", "2", "--gpus", "none", "--evaluator", "sim", "--sim-mean", "0.01"))
	}
	waitFor(t, time.Minute, func() bool {
		return ctl.exited() || workers[0].exited() || strings.Contains(ctl.stderr.String(), "evaluations=")
	})
	if workers[0].exited() {
		t.Fatalf("a worker ended: %v\n%s", workers[0].err, tail(workers[0].stderr.String(), 3000))
	}
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s\nworker:\n%s", err, tail(ctl.stderr.String(), 3000), tail(workers[0].stderr.String(), 3000))
	}
	out := ctl.stderr.String()
	if sm := lastJSON(t, out); sm.Evaluations != budget {
		t.Fatalf("%d evaluations, want %d", sm.Evaluations, budget)
	}
	s.noSecret(t, "the controller's output", out)
	for i, w := range workers {
		if err := w.wait(t, time.Minute); err != nil {
			t.Errorf("worker %d: %v\n%s", i, err, tail(w.stderr.String(), 2000))
		}
		s.noSecret(t, "a worker's output", w.stderr.String())
	}
	report := filepath.Join(dir, "report.html")
	for _, args := range [][]string{{"status", "--run", run}, {"status", "--run", run, "--json"}, {"export", "--run", run},
		{"report", "--run", run, "--out", report}} {
		r := evoqEnv(t, time.Minute, env, args...)
		if r.code != 0 {
			t.Errorf("evoq %s: exit %d\n%s", strings.Join(args, " "), r.code, tail(r.stderr, 2000))
		}
		s.noSecret(t, "evoq "+args[0]+"'s output", r.stdout+r.stderr)
	}
	if data, err := os.ReadFile(report); err == nil {
		s.noSecret(t, "the report", string(data))
	} else {
		t.Errorf("report: %v", err)
	}
	s.noSecretInPNGs(t, report)
	return out
}

// An account of a site's NATS that cannot hold a run: without JetStream,
// or limited to 4 streams (a run needs 6). The controller stops at once,
// exit 2, naming what the account lacks and what a run needs, and the
// account holds nothing of evoq afterwards.
func TestSiteAccountTooSmall(t *testing.T) {
	t.Parallel()
	s := startSite(t, "accounts {\n"+
		"  NOJS { users: [ {user: nojs, password: pw1} ] }\n"+
		"  SMALL { jetstream: { max_streams: 4 }, users: [ {user: small, password: pw2} ] }\n}\n")
	for _, tc := range []struct {
		name, user, want string
	}{
		{"without JetStream", "nojs:pw1", "JetStream is not enabled for this account"},
		{"4 streams", "small:pw2", "at most 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := strings.Replace(s.url, "nats://", "nats://"+tc.user+"@", 1)
			start := time.Now()
			r := evoq(t, time.Minute, "controller", "--nats", url, "--run", "small", "--budget", "10", "--init", "5", "--pool", "3")
			took := time.Since(start)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "6 streams") {
				t.Errorf("exit %d after %s; want 2 naming %q and what a run needs\n%s", r.code, took, tc.want, tail(r.stderr, 3000))
			}
			if took > 5*time.Second {
				t.Errorf("refused after %s; want within 5 s", took)
			}
			if strings.Contains(r.stderr, strings.Split(tc.user, ":")[1]+"@") {
				t.Errorf("the password shows:\n%s", r.stderr)
			}
			acc, err := s.srv.LookupAccount(map[string]string{"nojs:pw1": "NOJS", "small:pw2": "SMALL"}[tc.user])
			if err != nil {
				t.Fatal(err)
			}
			if n := acc.JetStreamUsage().Streams; n != 0 {
				t.Errorf("the account holds %d streams after the refusal, want none", n)
			}
		})
	}
}
