package test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
)

// --wait-for-run bounds the wait for a broker that never answers too, not
// only for a run that never starts: a batch job's workers whose controller
// died before it served give up on the one deadline, exit 1, and say what
// they waited for. Nothing listens on the port; the bound is 3 s and the
// worker must be gone well before the test's 60 s.
func TestWaitForRunUnreachableBroker(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	connect := filepath.Join(t.TempDir(), "evoq.json")
	if err := broker.WriteConnectFile(connect, broker.ConnectFile{URLs: []string{url}, Run: "gone"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"--nats", []string{"--nats", url, "--run", "gone", "--evaluator", "noop"}},
		{"--connect", []string{"--connect", connect}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			r := evoq(t, 60*time.Second, append([]string{"worker", "--wait-for-run", "3s", "--slots", "1"}, tc.args...)...)
			took := time.Since(start)
			if r.code != 1 || !strings.Contains(r.stderr, "--wait-for-run 3s: the broker "+url+" was not reachable within it") {
				t.Fatalf("worker %v: exit %d after %s, want 1 saying the broker was not reachable:\n%s", tc.args, r.code, took, tail(r.stderr, 3000))
			}
			if took > 30*time.Second {
				t.Errorf("worker %v gave up after %s, want about 3 s", tc.args, took.Round(time.Second))
			}
			t.Logf("gave up after %s", took.Round(time.Millisecond))
		})
	}
}
