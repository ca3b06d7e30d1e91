package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/cli"
	"github.com/nats-io/jwt/v2"
)

// controllerCredentialMargin is how long the credentials outlive the
// allocation.
const controllerCredentialMargin = cli.CredentialMargin

// slurmTemplate is the batch template under test.
const slurmTemplate = "../deploy/slurm/evoq.sbatch"

// slurmPartition is the one partition of the test's Slurm.
const slurmPartition = "evoqtest"

// templateVars are the settings at the top of the batch template; the test
// sets the ones it needs and keeps the others out of the job's environment.
var templateVars = []string{"EVOQ", "RUN", "STORE", "SPACE", "EVAL", "BUDGET", "INIT", "POOL", "GPUS", "SLOTS", "PORT", "IFACE"}

// The Slurm batch template under a real one-node Slurm (slurmctld, slurmd
// and munged started by the test): the controller and a worker started by
// srun complete the budget and the job succeeds with the summary as the last
// line of its files; a controller that refuses its settings fails the job
// with its exit code. It needs root and Debian's slurm-wlm and munge
// (.ci/run installs them).
func TestSlurmTemplate(t *testing.T) {
	t.Parallel()
	sl := startSlurm(t)
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		const budget = 60
		start := time.Now()
		job, code, out := sl.sbatch(t, dir, fmt.Sprintf("BUDGET=%d", budget), "INIT=10", "POOL=5", "GPUS=none", "SLOTS=2", "IFACE=lo",
			fmt.Sprintf("PORT=%d", freePort(t)), "STORE="+filepath.Join(dir, "store"))
		log := sl.jobLog(dir, job)
		if code != 0 {
			t.Fatalf("job %s: sbatch --wait exit %d: %s\njob log:\n%s\n%s", job, code, out, tail(log, 4000), sl.logs())
		}
		summary := readText(t, filepath.Join(dir, "evoq-"+job+".summary"))
		s := lastJSON(t, summary)
		if s.Evaluations != budget || s.Run != "nas-"+job || s.Slots != 2 || s.SlotsUsed != 2 ||
			s.Error != 0 || s.Timeout != 0 || s.Lost != 0 || s.BestFitness == nil {
			t.Fatalf("summary %+v; want %d evaluations of run nas-%s on 2 slots, all used, no error, timeout or lost\njob log:\n%s",
				s, budget, job, tail(log, 4000))
		}
		if last := lastLine(log); last != lastLine(summary) {
			t.Errorf("the job log ends with %q, want the summary line %q", last, lastLine(summary))
		}
		if !strings.Contains(log, "run is done; leaving") {
			t.Errorf("the worker started by srun did not leave by itself:\n%s", tail(log, 4000))
		}
		// The template runs its broker in operator mode: the workers'
		// credential is a user JWT of the run that ends with the
		// allocation (SLURM_JOB_END_TIME) plus the margin.
		cf, err := broker.ReadConnectFile(filepath.Join(dir, "evoq-"+job+".json"))
		if err != nil {
			t.Fatal(err)
		}
		cred, _ := cf.Credential()
		uc, err := jwt.DecodeUserClaims(cred.JWT)
		if err != nil || cred.Role != broker.RoleWorker {
			t.Fatalf("the workers' credential: %v, role %s; want a worker JWT", err, cred.Role)
		}
		switch {
		case strings.Contains(log, "expire with the allocation"):
			if uc.Expires <= time.Now().Unix() || uc.Expires > time.Now().Add(2*time.Hour+controllerCredentialMargin).Unix() {
				t.Errorf("the workers' credential expires %v; want the allocation's end (2 h) plus %s", time.Unix(uc.Expires, 0), controllerCredentialMargin)
			}
		case uc.Expires != 0:
			t.Errorf("the workers' credential expires %v with no allocation end known", time.Unix(uc.Expires, 0))
		default:
			// Debian's Slurm sets no SLURM_JOB_END_TIME (newer ones do), so
			// neither the controller nor the workers know the end here.
			t.Log("SKIPPED in part: this Slurm sets no SLURM_JOB_END_TIME, so the credential's expiry with the allocation is not checked here")
		}
		t.Logf("job %s: %d evaluations (%d ok) on %d slots in %.1f s of run, %s from sbatch to its end",
			job, s.Evaluations, s.OK, s.SlotsUsed, s.WallS, time.Since(start).Round(time.Second/10))
	})
	// The template waits up to 20 s for the connect file before it starts the
	// workers, and sbatch --wait polls ever more slowly: about 40 s.
	t.Run("controller refuses its settings", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		job, code, out := sl.sbatch(t, dir, "BUDGET=60", "INIT=5", "POOL=10", "GPUS=none", "SLOTS=2", "IFACE=127.0.0.1",
			fmt.Sprintf("PORT=%d", freePort(t)), "STORE="+filepath.Join(dir, "store"))
		log := sl.jobLog(dir, job)
		if code != 2 || !strings.Contains(log, "--pool 10: is larger than --init 5") {
			t.Fatalf("job %s: sbatch --wait exit %d (%s), want 2 with the controller's message; job log:\n%s",
				job, code, out, tail(log, 4000))
		}
	})
}

// slurm is a one-node Slurm cluster private to a test.
type slurm struct {
	dir string   // config, state, spool, logs and the munge socket
	env []string // environment of the Slurm commands
}

// startSlurm starts munged, slurmctld and slurmd on a private config and
// waits until the node is idle; cleanup cancels every job and stops them.
func startSlurm(t *testing.T) *slurm {
	t.Helper()
	munge := slurmPrereqs(t)
	dir, err := os.MkdirTemp("", "evoq-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// munged, running as munge, must reach its socket and key through dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sl := &slurm{dir: dir, env: slurmEnv(filepath.Join(dir, "slurm.conf"))}
	sl.startMunge(t, munge)
	node := sl.writeConfig(t)
	for _, d := range []string{"state", "spool"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "slurm.conf")
	start := time.Now()
	daemons := []*proc{
		sl.daemon(t, nil, "slurmctld", "-D", "-f", conf),
		sl.daemon(t, nil, "slurmd", "-D", "-f", conf, "-N", node),
	}
	t.Cleanup(func() { sl.cancelJobs(t) })
	deadline := start.Add(time.Minute)
	for {
		out, _ := sl.command(context.Background(), "sinfo", "-h", "-N", "-o", "%T").Output()
		if strings.TrimSpace(string(out)) == "idle" {
			t.Logf("Slurm node %s idle %s after starting slurmctld and slurmd", node, time.Since(start).Round(time.Millisecond))
			return sl
		}
		for _, d := range daemons {
			select {
			case <-d.done:
				t.Fatalf("%s exited: %v\n%s\n%s", d.cmd.Args[0], d.err, tail(d.stderr.String(), 2000), sl.logs())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Slurm node is %q after a minute, not idle\n%s", strings.TrimSpace(string(out)), sl.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slurmPrereqs skips the test unless it runs as root with Slurm and MUNGE
// installed, and returns the munge user.
func slurmPrereqs(t *testing.T) *user.User {
	t.Helper()
	const install = "apt-get install slurm-wlm munge"
	if os.Geteuid() != 0 {
		t.Skipf("SKIPPED: the Slurm test starts its own slurmctld, slurmd and munged and needs root (%s, then run the tests as root)", install)
	}
	for _, bin := range []string{"munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "scancel", "squeue"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("SKIPPED: %s is not installed (%v): %s", bin, err, install)
		}
	}
	u, err := user.Lookup("munge")
	if err != nil {
		t.Skipf("SKIPPED: no munge user (%v): %s", err, install)
	}
	return u
}

// slurmEnv is the environment with conf as the Slurm config and nothing of
// a Slurm job or a user's Slurm or template settings.
func slurmEnv(conf string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, p := range []string{"SLURM_", "SBATCH_", "SRUN_", "SALLOC_"} {
			drop = drop || strings.HasPrefix(name, p)
		}
		for _, v := range templateVars {
			drop = drop || name == v
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return append(env, "SLURM_CONF="+conf)
}

// startMunge starts munged as munge with its own key and socket.
func (sl *slurm) startMunge(t *testing.T, u *user.User) {
	t.Helper()
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := filepath.Join(sl.dir, "munge")
	key := filepath.Join(dir, "munge.key")
	secret := make([]byte, 1024)
	_, _ = rand.Read(secret)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, secret, 0o400); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, key} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	socket := filepath.Join(dir, "munge.socket")
	sl.daemon(t, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, "munged", "-F",
		"--socket="+socket, "--key-file="+key, "--log-file="+filepath.Join(dir, "munged.log"),
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--seed-file="+filepath.Join(dir, "munged.seed"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("munged made no socket in 30 s\n%s", sl.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeConfig writes slurm.conf from testdata with the node as `slurmd -C`
// describes it, and returns the node's name.
func (sl *slurm) writeConfig(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("slurmd", "-C").Output()
	if err != nil {
		t.Fatalf("slurmd -C: %v", err)
	}
	var node string
	var fields []string
	for _, f := range strings.Fields(strings.SplitN(string(out), "\n", 2)[0]) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "NodeName":
			node = v
			fallthrough
		case "CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory":
			fields = append(fields, f)
		}
	}
	if node == "" {
		t.Fatalf("slurmd -C names no node:\n%s", out)
	}
	tmpl, err := template.ParseFiles("testdata/slurm/slurm.conf")
	if err != nil {
		t.Fatal(err)
	}
	ctldPort, dPort := freePort(t), freePort(t)
	for dPort == ctldPort {
		dPort = freePort(t)
	}
	var conf bytes.Buffer
	err = tmpl.Execute(&conf, map[string]any{"Dir": sl.dir, "Node": node, "NodeLine": strings.Join(fields, " "),
		"Partition": slurmPartition, "CtldPort": ctldPort, "DPort": dPort})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sl.dir, "slurm.conf"), conf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return node
}

// daemon starts a Slurm or MUNGE daemon in the foreground, as cred if set;
// cleanup stops it with SIGTERM, then SIGKILL after 10 s.
func (sl *slurm) daemon(t *testing.T, cred *syscall.Credential, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: sl.command(context.Background(), name, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stderr, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go p.reap()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// command is a Slurm command on the test's cluster.
func (sl *slurm) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = sl.env
	return cmd
}

// sbatch submits the template with --wait on one node in dir, with env
// added, and returns the job ID, sbatch's exit code and its output.
func (sl *slurm) sbatch(t *testing.T, dir string, env ...string) (job string, code int, out string) {
	t.Helper()
	script, err := filepath.Abs(slurmTemplate)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := sl.command(ctx, "sbatch", "--wait", "--parsable", "--nodes=1", "--chdir="+dir, script)
	cmd.Env = append(append(append([]string(nil), sl.env...), "EVOQ="+evoqBin), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	job, _, _ = strings.Cut(strings.TrimSpace(stdout.String()), ";")
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("job %q still running after 2 minutes\njob log:\n%s\n%s", job, tail(sl.jobLog(dir, job), 4000), sl.logs())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sbatch: %v", err)
	}
	if _, err := strconv.Atoi(job); err != nil {
		t.Fatalf("sbatch --parsable printed %q, not a job ID; exit %d, stderr:\n%s\n%s", stdout.String(), code, stderr.String(), sl.logs())
	}
	return job, code, strings.TrimSpace(stderr.String())
}

// jobLog is the output file of a job the template names evoq-JOB.log.
func (sl *slurm) jobLog(dir, job string) string {
	data, _ := os.ReadFile(filepath.Join(dir, "evoq-"+job+".log"))
	return string(data)
}

// cancelJobs cancels every job of the test's partition and waits up to 30 s
// for them to end, so no job process outlives the test.
func (sl *slurm) cancelJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = sl.command(ctx, "scancel", "--partition="+slurmPartition).Run()
	for ctx.Err() == nil {
		out, err := sl.command(ctx, "squeue", "-h", "--partition="+slurmPartition, "-o", "%i").Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("jobs still in the queue 30 s after scancel\n%s", sl.logs())
}

// logs is the tail of each daemon's log, for failure messages.
func (sl *slurm) logs() string {
	var b strings.Builder
	for _, f := range []string{"slurmctld.log", "slurmd.log", "munge/munged.log"} {
		data, _ := os.ReadFile(filepath.Join(sl.dir, f))
		fmt.Fprintf(&b, "--- %s:\n%s\n", f, tail(string(data), 2000))
	}
	return b.String()
}

func readText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
