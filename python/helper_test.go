// Package python_test runs the unittest suite of evoq_eval, the Python
// helper for evaluator authors, so that `go test ./...` (CI) tests it with
// the interpreters evaluators run under.
package python_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestPythonHelper runs test_evoq_eval with /usr/bin/python3 (where
// Debian's PyTorch lives) and with the python3 first on PATH, when that is
// another interpreter: evaluators run under either.
func TestPythonHelper(t *testing.T) {
	t.Parallel()
	var pythons []string
	var seen []os.FileInfo
	for _, name := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Logf("%s: not found, not tested: %v", name, err)
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Logf("%s: %v, not tested", path, err)
			continue
		}
		if sameAsOne(fi, seen) {
			continue
		}
		seen, pythons = append(seen, fi), append(pythons, path)
	}
	if len(pythons) == 0 {
		t.Fatal("no python3 found (neither /usr/bin/python3 nor one on PATH): install python3 to test python/evoq_eval.py")
	}
	for _, python := range pythons {
		t.Run(python, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, python, "-m", "unittest", "-v", "test_evoq_eval")
			// No __pycache__ left in the source tree.
			cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s -m unittest -v test_evoq_eval (in python/): %v\n%s", python, err, out)
			}
			if bytes.Contains(out, []byte("Ran 0 tests")) {
				t.Fatalf("%s found no tests in test_evoq_eval:\n%s", python, out)
			}
		})
	}
}

// sameAsOne says whether fi is the same file as one of seen: a python3 on
// PATH that links to /usr/bin/python3 is tested once.
func sameAsOne(fi os.FileInfo, seen []os.FileInfo) bool {
	for _, s := range seen {
		if os.SameFile(fi, s) {
			return true
		}
	}
	return false
}
