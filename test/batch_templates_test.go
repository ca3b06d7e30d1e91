package test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/cli"
)

// The PBS and LSF batch templates, run as their batch systems would run
// them on one node, with stand-ins for what this machine lacks: ssh (PBS
// starts its workers over it) and jsrun (LSF) run their command here;
// qstat and bjobs answer with the samples of worker/testdata/batch. A
// healthy run exits 0 with the summary last, its workers' walltime and
// the credentials' expiry found by asking the batch system (the ssh'd
// worker has PBS_JOBID only because the template passes it on); a run
// whose evaluator does not exist exits 3; a worker's exit 4 after a
// controller's 0 is the job's.
func TestBatchTemplatesPBSAndLSF(t *testing.T) {
	t.Parallel()
	bin := batchStandIns(t)
	for _, tc := range []struct {
		name, template, job, source string
		env                         []string
	}{
		{"pbs", "../deploy/pbs/evoq.pbs", "77", `qstat -f 77.pbs01`,
			[]string{"PBS_JOBID=77.pbs01", "GPUS=none", "GPUS_PER_NODE=1"}},
		{"lsf", "../deploy/lsf/evoq.lsf", "88", `bjobs -noheader -o time_left 88`,
			[]string{"LSB_JOBID=88", "NODES=1", "GPUS_PER_NODE=1"}},
	} {
		t.Run(tc.name+", a worker exits 4", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := append(tc.env, "EVOQ="+fakeEvoq(t, dir))
			if code, out := runTemplate(t, bin, dir, tc.template, env); code != cli.ExitQuarantined || !strings.Contains(out, "a worker exited 4") {
				t.Fatalf("exit %d, want %d saying a worker exited 4\n%s", code, cli.ExitQuarantined, tail(out, 4000))
			}
		})
		for _, failing := range []bool{false, true} {
			name := tc.name
			if failing {
				name += ", run failed"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				env := append(tc.env, "BUDGET=30", "INIT=10", "POOL=5", "IFACE=127.0.0.1")
				if failing {
					env = append(env, "EVAL=nonexistent-prog")
				}
				code, out := runTemplate(t, bin, dir, tc.template, env)
				summary := filepath.Join(dir, "evoq-"+tc.job+".summary")
				if failing {
					if code != cli.ExitRunFailed || !strings.Contains(out, "evoq controller: run nas-"+tc.job+" failed") {
						t.Fatalf("exit %d, want %d with the controller saying the run failed\n%s", code, cli.ExitRunFailed, tail(out, 4000))
					}
					return
				}
				if code != 0 {
					t.Fatalf("exit %d, want 0\n%s", code, tail(out, 4000))
				}
				s := lastJSON(t, readText(t, summary))
				if s.Evaluations != 30 || s.Run != "nas-"+tc.job || s.Error != 0 || s.Lost != 0 {
					t.Fatalf("summary %+v; want 30 evaluations of run nas-%s, no error or lost\n%s", s, tc.job, tail(out, 4000))
				}
				if _, err := os.Stat(filepath.Join(dir, "evoq-store-nas-"+tc.job)); err != nil {
					t.Errorf("no store of the run's own: %v", err)
				}
				src := regexp.QuoteMeta(tc.source)
				if !regexp.MustCompile(`msg=walltime .*from="`+src).MatchString(out) ||
					!regexp.MustCompile(`expire with the allocation.*from="`+src).MatchString(out) {
					t.Errorf("the worker's walltime and the credentials' expiry do not both come from %s:\n%s", tc.source, tail(out, 4000))
				}
			})
		}
	}
}

// fakeEvoq writes a stand-in for evoq to dir that plays a controller
// that writes its connect file and ends its run (exit 0), and a worker
// whose every slot was quarantined (exit 4): an outcome a real run cannot
// be made to give on one node in seconds.
func fakeEvoq(t *testing.T, dir string) string {
	t.Helper()
	fake := filepath.Join(dir, "fake-evoq")
	script := `#!/bin/bash
case $1 in
controller)
  while [ $# -gt 0 ]; do [ "$1" = --connect-file ] && f=$2; shift; done
  echo '{"urls":["nats://127.0.0.1:1"]}' > "$f"; sleep 2; echo '{"run":"fake"}'; exit 0 ;;
worker) exit 4 ;;
esac
exit 9
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return fake
}

// batchStandIns writes ssh, jsrun, qstat and bjobs stand-ins to a
// directory for PATH.
func batchStandIns(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	samples, err := filepath.Abs("../worker/testdata/batch")
	if err != nil {
		t.Fatal(err)
	}
	for name, script := range map[string]string{
		// ssh NODE COMMAND: run COMMAND here, as the remote shell would.
		"ssh": `exec bash -c "$2"`,
		// jsrun --opt value ... CMD ARGS: run CMD here.
		"jsrun": `while [ "${1#--}" != "$1" ]; do shift 2; done; exec "$@"`,
		"qstat": `[ "$1" = -f ] && [ "$2" = 77.pbs01 ] && exec cat ` + filepath.Join(samples, "qstat-torque.txt") + `; echo "qstat: Unknown Job Id $2" >&2; exit 1`,
		"bjobs": `[ "$4" = 88 ] && exec cat ` + filepath.Join(samples, "bjobs-time_left.txt") + `; echo "Job <$4> is not found" >&2; exit 255`,
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/bash\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// runTemplate runs a batch template in dir as its batch system would, with
// the stand-ins first on PATH and one node, and returns its exit code and
// its output.
func runTemplate(t *testing.T, bin, dir, template string, env []string) (int, string) {
	t.Helper()
	script, err := filepath.Abs(template)
	if err != nil {
		t.Fatal(err)
	}
	nodefile := filepath.Join(dir, "nodefile")
	if err := os.WriteFile(nodefile, []byte("localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = dir
	cmd.Env = append(slurmEnv(""), "PATH="+bin+":"+os.Getenv("PATH"), "EVOQ="+evoqBin,
		"PBS_O_WORKDIR="+dir, "PBS_NODEFILE="+nodefile)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s still running after 3 minutes\n%s", template, tail(out.String(), 4000))
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, strings.TrimSpace(out.String())
}
