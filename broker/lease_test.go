package broker

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A process killed and not yet reaped by its parent is a zombie: it
// answers signal 0, yet it is gone.
func TestProcessAliveZombie(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !ProcessAlive(pid) {
		t.Fatal("a running process reads as gone")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: wait until the kernel has made it a zombie.
	for deadline := time.Now().Add(10 * time.Second); !zombie(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed process did not become a zombie within 10s")
		}
	}
	if ProcessAlive(pid) {
		t.Error("a killed, unreaped process reads as alive")
	}
	_ = cmd.Wait()
	if ProcessAlive(pid) {
		t.Error("a reaped process reads as alive")
	}
}
