package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// On a broker in operator mode, evoq run delete takes the run (as its
// argument or --run) and deletes it with the admin's connect file, which
// names the trust root; a worker's connect file is refused at once, naming
// the admin's; status with the admin's file reads the run, and with the
// worker's is refused naming the reader's file.
func TestRunDeleteOperatorMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, admin := filepath.Join(dir, "store"), filepath.Join(dir, "admin.json")
	brk := background(t, "broker", "--dir", store, "--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--auth", "--connect-file", admin)
	waitFor(t, time.Minute, func() bool { _, err := os.Stat(admin); return err == nil })
	for _, run := range []string{"ra", "rb"} {
		workerFile := filepath.Join(dir, run+".json")
		ctl := background(t, "controller", "--connect", admin, "--run", run, "--budget", "20", "--init", "5", "--pool", "3",
			"--connect-file", workerFile, "--json")
		w := background(t, "worker", "--connect", workerFile, "--slots", "2", "--evaluator", "sim", "--sim-mean", "0.01")
		if err := ctl.wait(t, 2*time.Minute); err != nil {
			t.Fatalf("controller %s: %v\n%s", run, err, tail(ctl.stderr.String(), 3000))
		}
		_ = w.wait(t, time.Minute)
	}
	workerFile := filepath.Join(dir, "rb.json")
	start := time.Now()
	r := evoq(t, time.Minute, "run", "delete", "--connect", workerFile, "rb")
	if r.code != 2 || !strings.Contains(r.stderr, "admin's connect file") || time.Since(start) > 10*time.Second {
		t.Errorf("run delete with a worker's file: exit %d after %s; want 2 at once, naming the admin's file\n%s", r.code, time.Since(start), r.stderr)
	}
	r = evoq(t, time.Minute, "status", "--connect", workerFile, "--run", "rb")
	if r.code != 2 || !strings.Contains(r.stderr, "rb-reader.json") {
		t.Errorf("status with a worker's file: exit %d; want 2 naming the reader's file\n%s", r.code, r.stderr)
	}
	r = evoq(t, time.Minute, "status", "--connect", admin, "--run", "rb", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"run":"rb"`) {
		t.Errorf("status with the admin's file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"run", "delete", "--connect", admin, "ra"}, {"run", "delete", "--connect", admin, "--run", "rb"}} {
		r = evoq(t, time.Minute, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "deleted run") || !strings.Contains(r.stdout, "20 results") {
			t.Errorf("%s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	_ = brk.cmd.Process.Signal(os.Interrupt)
	_ = brk.wait(t, 30*time.Second)
}
