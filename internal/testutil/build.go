package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// BuildEvoq builds the evoq binary of the module that holds the working
// directory's package into out, static (CGO_ENABLED=0) and with -trimpath:
// the binary deploy/Dockerfile's FROM scratch image holds, and one the
// test packages that run evoq can all share. extra are more go build flags
// (-race); with -race the binary keeps cgo.
//
// go test runs packages at once, and two go builds of the same binary at
// once both compile everything: on a fresh clone that is minutes of a
// 2-core machine. A lock file serialises the builds, so the second finds
// the first one's work in the build cache and only links.
func BuildEvoq(out string, extra ...string) ([]byte, error) {
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "evoq-test-build.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return nil, fmt.Errorf("find the module: %w", err)
	}
	args := append([]string{"build", "-trimpath", "-o", out}, extra...)
	cmd := exec.Command("go", append(args, "./cmd/evoq")...)
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Env = os.Environ()
	if !slices.Contains(extra, "-race") {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	return cmd.CombinedOutput()
}
