package bench

import (
	"bufio"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpu_by_command.py, the sampler behind the exascale CPU figures in
// docs/BENCHMARKS.md, finds a running evoq broker and prints its share
// every 2 seconds in the documented form.
func TestCPUByCommand(t *testing.T) {
	t.Parallel()
	evoq := smokeEvoq(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("no python3: %v", err)
	}
	brk := exec.Command(evoq, "broker", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--log-level", "warn")
	brk.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := brk.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = brk.Process.Kill(); _ = brk.Wait() })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sampler := exec.CommandContext(ctx, python, "cpu_by_command.py")
	out, err := sampler.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	sampler.Stderr = &stderr
	if err := sampler.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = sampler.Wait() }()
	line := regexp.MustCompile(`^ *\d+s busy=\d+\.\d\d cores( [a-z-]+=\d+\.\d\d)*$`)
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		l := lines.Text()
		if !line.MatchString(l) {
			t.Fatalf("line %q is not in the documented form", l)
		}
		if strings.Contains(l, " broker=") {
			return
		}
	}
	t.Fatalf("no line named the broker within a minute (%v); stderr: %s", ctx.Err(), stderr.String())
}
