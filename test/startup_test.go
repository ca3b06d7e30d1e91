package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runWithin runs evoq like evoq(), but reports a process still running
// after limit as hung (it is killed) instead of failing the test.
func runWithin(t *testing.T, limit time.Duration, args ...string) (r result, hung bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, evoqBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r = result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return r, true
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("evoq %s: %v", strings.Join(args, " "), err)
	}
	return r, false
}

// Faults at start or in the store stop evoq with a message naming the
// cause, never a hang.
func TestStartupFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) []string // the arguments
		limit time.Duration
		want  []string // in stderr, every one
		anyOf []string // in stderr, at least one
	}{{
		name: "dir-under-a-file",
		setup: func(t *testing.T) []string {
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"controller", "--dir", filepath.Join(file, "sub"), "--listen", "127.0.0.1:0", "--budget", "1", "--init", "1", "--pool", "1"}
		},
		limit: 10 * time.Second,
		want:  []string{"--dir", "not a directory"},
	}, {
		name: "port-in-use",
		setup: func(t *testing.T) []string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return []string{"controller", "--dir", t.TempDir(), "--listen", l.Addr().String(), "--budget", "1", "--init", "1", "--pool", "1"}
		},
		limit: 5 * time.Second,
		want:  []string{"--listen", "address already in use"},
	}, {
		name: "max-store-full",
		setup: func(t *testing.T) []string {
			return []string{"run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--evaluator", "noop", "--slots", "2",
				"--budget", "100000", "--init", "10", "--pool", "5", "--max-store", "1MB"}
		},
		limit: 30 * time.Second,
		want:  []string{"store is full"},
	}, {
		name: "tmpfs-full",
		setup: func(t *testing.T) []string {
			mnt := t.TempDir()
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", mnt).CombinedOutput(); err != nil {
				t.Skipf("cannot mount a tmpfs here: %v %s", err, bytes.TrimSpace(out))
			}
			t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
			return []string{"run", "--dir", mnt, "--listen", "127.0.0.1:0", "--evaluator", "noop", "--slots", "2",
				"--budget", "100000", "--init", "10", "--pool", "5"}
		},
		limit: 30 * time.Second,
		// JetStream's own limit (from the disk's size) may be met first.
		anyOf: []string{"no space left on device", "store is full"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := tc.setup(t)
			start := time.Now()
			r, hung := runWithin(t, tc.limit, args...)
			if hung {
				t.Fatalf("evoq %s: still running after %s\nstderr:\n%s", strings.Join(args, " "), tc.limit, tail(r.stderr, 3000))
			}
			if r.code == 0 {
				t.Fatalf("exit 0 after %s, want non-zero\nstderr:\n%s", time.Since(start), tail(r.stderr, 3000))
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, tail(r.stderr, 3000))
				}
			}
			found := len(tc.anyOf) == 0
			for _, w := range tc.anyOf {
				found = found || strings.Contains(r.stderr, w)
			}
			if !found {
				t.Errorf("stderr has none of %q:\n%s", tc.anyOf, tail(r.stderr, 3000))
			}
			t.Logf("exit %d after %s", r.code, time.Since(start).Round(time.Millisecond))
		})
	}
}

// Settings that would bound parallelism silently or break dead-worker
// detection are refused at start with a message naming them.
func TestSanityChecks(t *testing.T) {
	t.Parallel()
	t.Run("slots-over-max-waiting", func(t *testing.T) {
		t.Parallel()
		const run = "sane"
		_, url := startBroker(t, t.TempDir())
		ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", "10", "--init", "4", "--pool", "2")
		waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "work queue ready") })
		if !strings.Contains(ctl.stderr.String(), "max_waiting=4096") {
			t.Fatalf("the run's consumer is not sized for the default slots:\n%s", tail(ctl.stderr.String(), 2000))
		}
		r := evoq(t, 30*time.Second, "worker", "--nats", url, "--run", run, "--slots", "5000", "--evaluator", "noop")
		if r.code == 0 || !strings.Contains(r.stderr, "MaxWaiting 4096") || !strings.Contains(r.stderr, "--slots 5000") {
			t.Errorf("worker with 5000 slots: exit %d, want non-zero with a message naming --slots and MaxWaiting:\n%s",
				r.code, tail(r.stderr, 2000))
		}
		if strings.Contains(r.stderr, "worker joined run") {
			t.Errorf("the worker started its slots before refusing:\n%s", tail(r.stderr, 2000))
		}
		if strings.Contains(ctl.stderr.String(), "slots=5000") {
			t.Errorf("the controller saw the refused worker's 5000 slots:\n%s", tail(ctl.stderr.String(), 2000))
		}
	})
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{{
		name: "ack-wait-below-3s",
		args: func(t *testing.T) []string { return runArgs(t, "--ack-wait", "2s") },
		want: "--ack-wait 2s",
	}, {
		name: "max-deliver-0",
		args: func(t *testing.T) []string { return runArgs(t, "--max-deliver", "0") },
		want: "--max-deliver 0",
	}, {
		name: "worker-slots-0",
		args: func(t *testing.T) []string {
			return []string{"worker", "--nats", fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)), "--run", "x", "--slots", "0"}
		},
		want: "--slots 0",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := evoq(t, 30*time.Second, tc.args(t)...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, want 2 with a message naming %q:\n%s", r.code, tc.want, tail(r.stderr, 2000))
			}
		})
	}
}

// runArgs are `evoq run` arguments that would start a small, harmless run
// in a fresh store, plus extra.
func runArgs(t *testing.T, extra ...string) []string {
	return append([]string{"run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--evaluator", "noop",
		"--slots", "1", "--budget", "1", "--init", "1", "--pool", "1"}, extra...)
}
