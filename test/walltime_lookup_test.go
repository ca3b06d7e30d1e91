package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A worker in a Slurm job whose end Slurm does not tell (squeue and
// scontrol fail: not on this node's PATH, or the controller down) warns,
// naming both commands and --walltime, and goes on without a walltime: it
// is not refused. Here it then gives up on a broker that is not there,
// exit 1, after its --wait-for-run.
func TestWalltimeLookupFails(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	for _, name := range []string{"squeue", "scontrol"} {
		script := "#!/bin/bash\necho 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := append(slurmEnv(""), "PATH="+bin+":"+os.Getenv("PATH"), "SLURM_JOB_ID=424242")
	r := evoqEnv(t, time.Minute, env, "worker", "--nats", fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)), "--run", "x",
		"--evaluator", "noop", "--slots", "1", "--wait-for-run", "1s")
	for _, want := range []string{"squeue -h -j 424242 -o %e %l: exit status 1 (slurm_load_jobs error: Unable to contact slurm controller",
		"scontrol show job 424242: exit status 1", "give --walltime", "was not reachable within it"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("worker: exit %d, stderr lacks %q:\n%s", r.code, want, tail(r.stderr, 3000))
		}
	}
	if r.code != 1 {
		t.Errorf("worker: exit %d, want 1 (the broker), not a refusal of the walltime:\n%s", r.code, tail(r.stderr, 3000))
	}
}
