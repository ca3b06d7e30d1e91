package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/evoq/evoq/internal/testutil"
)

// The smoke tests run the evoq binary, built once for all of them.
var evoqBin struct {
	once sync.Once
	path string
	err  error
	out  []byte
	dir  string
}

// smokeEvoq is that binary; it skips a -short run, and a machine without
// the go tool.
func smokeEvoq(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs evoq")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go tool to build evoq with: %v", err)
	}
	evoqBin.once.Do(func() {
		if evoqBin.dir, evoqBin.err = os.MkdirTemp("", "evoq-bench-"); evoqBin.err != nil {
			return
		}
		evoqBin.path = filepath.Join(evoqBin.dir, "evoq")
		evoqBin.out, evoqBin.err = testutil.BuildEvoq(evoqBin.path)
	})
	if evoqBin.err != nil {
		t.Fatalf("build evoq: %v\n%s", evoqBin.err, evoqBin.out)
	}
	return evoqBin.path
}

func TestMain(m *testing.M) {
	// The revision TestAgainstSmoke builds then shares the dependencies
	// that smokeEvoq's static build compiled, instead of compiling them
	// all again with cgo.
	os.Setenv("CGO_ENABLED", "0")
	code := m.Run()
	if evoqBin.dir != "" {
		os.RemoveAll(evoqBin.dir)
	}
	os.Exit(code)
}
