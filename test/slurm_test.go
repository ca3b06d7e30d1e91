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
	"regexp"
	"strconv"
	"strings"
	"sync"
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
var templateVars = []string{"EVOQ", "RUN", "STORE", "SPACE", "EVAL", "PERSISTENT", "BUDGET", "INIT", "POOL", "GPUS", "SLOTS",
	"WAIT_SLOTS", "WAIT_FOR_RUN", "PORT", "IFACE", "NODES", "GPUS_PER_NODE", "WALLTIME", "CREDENTIAL_EXPIRY", "DRAIN_TIMEOUT", "REQUEUE_AT_END"}

// The Slurm batch template under a real one-node Slurm (slurmctld, slurmd
// and munged started by the test): two jobs in one directory, each with
// the template's own port (any free one) and store (per run), run at once
// and complete their budgets, exit 0, with the summary as the last line of
// their files; their workers find the walltime from Slurm itself (squeue:
// Debian's Slurm sets no SLURM_JOB_END_TIME), and the credentials expire
// with the allocation. A job given RUN= of a finished run continues it to
// a larger budget on the same store. A run whose evaluator does not exist
// fails the job with exit 3; a controller that refuses its settings fails
// it with 2. It needs root and Debian's slurm-wlm and munge (.ci/run
// installs them). Every job is submitted with --oversubscribe, overriding
// the template's --exclusive, so that jobs share the test's one node.
func TestSlurmTemplate(t *testing.T) {
	t.Parallel()
	sl := startSlurm(t)
	const budget, more = 60, 90
	t.Run("two runs in one directory, one continued", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		start := time.Now()
		env := []string{fmt.Sprintf("BUDGET=%d", budget), "INIT=10", "POOL=5", "GPUS=none", "SLOTS=2", "IFACE=127.0.0.1"}
		jobs := make([]jobOut, 2)
		var wg sync.WaitGroup
		for i := range jobs {
			wg.Add(1)
			go func() { defer wg.Done(); jobs[i] = sl.submit(dir, env...) }()
		}
		overlap := sl.watchOverlap(dir, &wg)
		for _, j := range jobs {
			if j.err != nil {
				t.Fatalf("job %s: %v\njob log:\n%s\n%s", j.job, j.err, tail(sl.jobLog(dir, j.job), 4000), sl.logs())
			}
		}
		if jobs[0].job == jobs[1].job {
			t.Fatalf("two submissions got one job ID %s", jobs[0].job)
		}
		for _, j := range jobs {
			sl.checkRun(t, dir, j, "nas-"+j.job, budget, start)
		}
		if overlap {
			t.Logf("jobs %s and %s ran at the same time in one directory", jobs[0].job, jobs[1].job)
		} else {
			t.Log("SKIPPED in part: the two jobs did not run at the same time on this node; their names, ports and stores were still their own")
		}
		// A new job continues the first run when told its name, on its
		// store, to a larger budget; it makes no store of its own.
		first := "nas-" + jobs[0].job
		j := sl.submit(dir, append(env, "RUN="+first, fmt.Sprintf("BUDGET=%d", more))...)
		if j.err != nil {
			t.Fatalf("job %s: %v", j.job, j.err)
		}
		sl.checkRun(t, dir, j, first, more, start)
		if _, err := os.Stat(filepath.Join(dir, "evoq-store-nas-"+j.job)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("job %s given RUN=%s made a store of its own (%v)", j.job, first, err)
		}
	})
	t.Run("run failed", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		job, code, out := sl.sbatch(t, dir, "BUDGET=60", "INIT=10", "POOL=5", "GPUS=none", "SLOTS=2", "IFACE=127.0.0.1",
			"EVAL=nonexistent-prog")
		log := sl.jobLog(dir, job)
		if code != cli.ExitRunFailed {
			t.Fatalf("job %s: sbatch --wait exit %d (%s), want %d: the run failed; job log:\n%s", job, code, out, cli.ExitRunFailed, tail(log, 4000))
		}
		if !strings.Contains(log, "evoq controller: run nas-"+job+" failed") || !strings.Contains(log, "Exited with exit code 3") {
			t.Errorf("job %s: the log does not show the controller's and the worker's exit 3:\n%s", job, tail(log, 4000))
		}
	})
	// A controller that ends its run (exit 0) while a worker exits 4 (every
	// slot of its node quarantined) fails the job with 4: srun passes the
	// worker's code up and the template keeps it. EVOQ is a stand-in that
	// plays both parts, for an outcome a real run cannot be made to give
	// on one node in seconds.
	t.Run("a worker's exit code reaches the job", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		fake := fakeEvoq(t, dir)
		job, code, out := sl.sbatch(t, dir, "EVOQ="+fake)
		if log := sl.jobLog(dir, job); code != cli.ExitQuarantined || !strings.Contains(log, "a worker exited 4") {
			t.Fatalf("job %s: sbatch --wait exit %d (%s), want %d saying a worker exited 4; job log:\n%s", job, code, out, cli.ExitQuarantined, tail(log, 4000))
		}
	})
	// The template waits up to 20 s for the connect file before it starts the
	// workers, and sbatch --wait polls ever more slowly: about 40 s.
	t.Run("controller refuses its settings", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		job, code, out := sl.sbatch(t, dir, "BUDGET=60", "INIT=5", "POOL=10", "GPUS=none", "SLOTS=2", "IFACE=127.0.0.1")
		log := sl.jobLog(dir, job)
		if code != 2 || !strings.Contains(log, "--pool 10: is larger than --init 5") {
			t.Fatalf("job %s: sbatch --wait exit %d (%s), want 2 with the controller's message; job log:\n%s",
				job, code, out, tail(log, 4000))
		}
	})
}

// checkRun checks a healthy job of the template: exit 0, the budget done
// on run's own store, the summary the log's last line, the worker gone by
// itself, and the walltime and credential expiry from Slurm.
func (sl *slurm) checkRun(t *testing.T, dir string, j jobOut, run string, budget int, start time.Time) {
	t.Helper()
	log := sl.jobLog(dir, j.job)
	if j.code != 0 {
		t.Fatalf("job %s: sbatch --wait exit %d: %s\njob log:\n%s\n%s", j.job, j.code, j.out, tail(log, 4000), sl.logs())
	}
	summary := readText(t, filepath.Join(dir, "evoq-"+j.job+".summary"))
	s := lastJSON(t, summary)
	if s.Evaluations != budget || s.Run != run || s.Slots != 2 || s.SlotsUsed < 2 ||
		s.Error != 0 || s.Timeout != 0 || s.Lost != 0 || s.BestFitness == nil {
		t.Fatalf("job %s: summary %+v; want %d evaluations of run %s on 2 slots, all used (and those of an earlier job), no error, timeout or lost\njob log:\n%s",
			j.job, s, budget, run, tail(log, 4000))
	}
	if _, err := os.Stat(filepath.Join(dir, "evoq-store-"+run, "evoq-trust.json")); err != nil {
		t.Errorf("job %s: run %s's store is not evoq-store-%s: %v", j.job, run, run, err)
	}
	if last := lastLine(log); last != lastLine(summary) {
		t.Errorf("job %s: the log ends with %q, want the summary line %q", j.job, last, lastLine(summary))
	}
	if !strings.Contains(log, "run is done; leaving") {
		t.Errorf("job %s: the worker started by srun did not leave by itself:\n%s", j.job, tail(log, 4000))
	}
	// The worker's walltime and the credentials' expiry come from Slurm:
	// squeue where the environment has no SLURM_JOB_END_TIME (Debian's
	// 22.05), else that.
	src := regexp.MustCompile(`msg=walltime .*from="?(squeue|SLURM_JOB_END_TIME)`).FindStringSubmatch(log)
	if src == nil || !regexp.MustCompile(`expire with the allocation.*from="?`+src[1]).MatchString(log) {
		t.Fatalf("job %s: the worker's walltime and the credentials' expiry do not both come from squeue or SLURM_JOB_END_TIME:\n%s", j.job, tail(log, 4000))
	}
	cf, err := broker.ReadConnectFile(filepath.Join(dir, "evoq-"+j.job+".json"))
	if err != nil {
		t.Fatal(err)
	}
	cred, _ := cf.Credential()
	uc, err := jwt.DecodeUserClaims(cred.JWT)
	if err != nil || cred.Role != broker.RoleWorker {
		t.Fatalf("job %s: the workers' credential: %v, role %s; want a worker JWT", j.job, err, cred.Role)
	}
	// The template asks for 2 h; the job started after start.
	lo, hi := start.Add(2*time.Hour+controllerCredentialMargin-time.Minute), time.Now().Add(2*time.Hour+controllerCredentialMargin+time.Minute)
	if exp := time.Unix(uc.Expires, 0); exp.Before(lo) || exp.After(hi) {
		t.Errorf("job %s: the workers' credential expires %v; want the allocation's end (2 h) plus %s, in [%v, %v]", j.job, exp, controllerCredentialMargin, lo, hi)
	}
	t.Logf("job %s: %d evaluations (%d ok) of %s on %d slots in %.1f s of run; walltime from %s", j.job, s.Evaluations, s.OK, run, s.SlotsUsed, s.WallS, src[1])
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

// jobOut is a job submitted with sbatch --wait: its ID, sbatch's exit
// code (the job's) and its standard error; err when it could not be run.
type jobOut struct {
	job, out string
	code     int
	err      error
}

// sbatch submits the template in dir with env added, and returns the job
// ID, sbatch's exit code and its output.
func (sl *slurm) sbatch(t *testing.T, dir string, env ...string) (job string, code int, out string) {
	t.Helper()
	j := sl.submit(dir, env...)
	if j.err != nil {
		t.Fatalf("job %q: %v\njob log:\n%s\n%s", j.job, j.err, tail(sl.jobLog(dir, j.job), 4000), sl.logs())
	}
	return j.job, j.code, j.out
}

// submit submits the template with --wait on one node in dir, sharing the
// node with other jobs, with env added.
func (sl *slurm) submit(dir string, env ...string) jobOut {
	script, err := filepath.Abs(slurmTemplate)
	if err != nil {
		return jobOut{err: err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := sl.command(ctx, "sbatch", "--wait", "--parsable", "--nodes=1", "--oversubscribe", "--chdir="+dir, script)
	cmd.Env = append(append(append([]string(nil), sl.env...), "EVOQ="+evoqBin), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var j jobOut
	j.job, _, _ = strings.Cut(strings.TrimSpace(stdout.String()), ";")
	j.out = strings.TrimSpace(stderr.String())
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		j.err = errors.New("still running after 4 minutes")
	case errors.As(err, &ee):
		j.code = ee.ExitCode()
	case err != nil:
		j.err = fmt.Errorf("sbatch: %w", err)
	}
	if _, err := strconv.Atoi(j.job); err != nil && j.err == nil {
		j.err = fmt.Errorf("sbatch --parsable printed %q, not a job ID; exit %d, stderr:\n%s", stdout.String(), j.code, j.out)
	}
	return j
}

// watchOverlap waits for wg, and reports whether two jobs in dir were
// running at once meanwhile.
func (sl *slurm) watchOverlap(dir string, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	overlap := false
	for {
		select {
		case <-done:
			return overlap
		case <-time.After(200 * time.Millisecond):
		}
		out, err := sl.command(context.Background(), "squeue", "-h", "-t", "R", "--partition="+slurmPartition, "-o", "%Z").Output()
		overlap = overlap || (err == nil && strings.Count(string(out), dir+"\n") >= 2)
	}
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
