package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
)

// noBroker is a broker URL nothing answers on.
const noBroker = "nats://127.0.0.1:1"

// bigSpace writes a valid search space of more than schema.MaxSpaceSource
// bytes (a space and a long comment) and returns its path and size.
func bigSpace(t *testing.T) (string, int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("params:\n  x: {type: int, min: 1, max: 9}\n")
	for b.Len() <= schema.MaxSpaceSource+1000 {
		b.WriteString("# " + strings.Repeat("padding ", 10) + "\n")
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, b.Len()
}

// Bad input is named, exit 2, before anything connects or is written: a
// run ID no run can have (checked only once a broker answered, so a
// worker with no broker waited for ever), a --config too large for the
// run's record (once exit 1 after the workers had started), a --listen
// host DNS does not know or that is not this machine's (once blamed on
// "another evoq or NATS server", after a trust root was written).
func TestBadInputNamedBeforeStart(t *testing.T) {
	t.Parallel()
	big, bigSize := bigSpace(t)
	for _, tc := range []struct {
		name string
		args func(dir string) []string
		want []string
	}{
		{"worker run ID, no broker", func(string) []string { return []string{"worker", "--nats", noBroker, "--run", "a b"} },
			[]string{`--run "a b": "a b" has ' '`}},
		{"worker run ID too long", func(string) []string {
			return []string{"worker", "--nats", noBroker, "--run", strings.Repeat("r", schema.MaxTokenLen+1)}
		}, []string{"--run", fmt.Sprintf("longer than %d characters", schema.MaxTokenLen)}},
		{"status run ID", func(string) []string { return []string{"status", "--nats", noBroker, "--run", "a.b"} },
			[]string{`--run "a.b": "a.b" has '.'`}},
		{"export run ID", func(string) []string { return []string{"export", "--nats", noBroker, "--run", "a/b"} },
			[]string{`--run "a/b"`}},
		{"replay run ID", func(string) []string { return []string{"replay", "--nats", noBroker, "--run", "a*"} },
			[]string{`--run "a*"`}},
		{"report run ID", func(string) []string { return []string{"report", "--nats", noBroker, "--run", "a>"} },
			[]string{`--run "a>"`}},
		{"controller run ID", func(string) []string { return []string{"controller", "--nats", noBroker, "--run", "a b"} },
			[]string{`--run "a b"`}},
		{"controller from-run ID", func(string) []string {
			return []string{"controller", "--nats", noBroker, "--run", "ok", "--from-run", "x y"}
		}, []string{`--from-run "x y": "x y" has ' '`}},
		{"controller run ID before a trust root", func(dir string) []string {
			return []string{"controller", "--dir", dir, "--trust", filepath.Join(dir, broker.TrustFile), "--run", "a b"}
		}, []string{`--run "a b"`}},
		{"run oversized config", func(dir string) []string {
			return []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--config", big}
		}, []string{fmt.Sprintf("--config %s is %d bytes, over the %d-byte limit", big, bigSize, schema.MaxSpaceSource)}},
		{"controller oversized config", func(string) []string { return []string{"controller", "--nats", noBroker, "--config", big} },
			[]string{"--config", fmt.Sprintf("%d-byte limit", schema.MaxSpaceSource)}},
		{"broker unknown listen host", func(dir string) []string {
			return []string{"broker", "--dir", dir, "--listen", "notahost.invalid:4222"}
		}, []string{`--listen "notahost.invalid:4222": host notahost.invalid: `}},
		{"broker listen host not this machine's", func(dir string) []string {
			return []string{"broker", "--dir", dir, "--listen", "192.0.2.1:4222", "--insecure"}
		}, []string{"host 192.0.2.1 is not an address of this machine"}},
		{"broker unknown cluster-listen host", func(dir string) []string {
			return []string{"broker", "--dir", dir, "--listen", "127.0.0.1:0", "--cluster-name", "c", "--server-name", "n1",
				"--cluster-listen", "notahost.invalid:6222", "--routes", "nats-route://127.0.0.1:6222"}
		}, []string{`--cluster-listen "notahost.invalid:6222": host notahost.invalid: `}},
		{"controller plateau 0", func(string) []string { return []string{"controller", "--nats", noBroker, "--plateau", "0"} },
			[]string{"--plateau 0: want at least 1 result"}},
		{"controller target NaN", func(string) []string { return []string{"controller", "--nats", noBroker, "--target", "NaN"} },
			[]string{"--target NaN: want a finite fitness"}},
		{"run time budget 0", func(dir string) []string {
			return []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--time-budget", "0s"}
		}, []string{"--time-budget 0s: want a positive duration"}},
		{"run unknown listen host", func(dir string) []string {
			return []string{"run", "--dir", dir, "--listen", "notahost.invalid:4222"}
		}, []string{`--listen "notahost.invalid:4222": host notahost.invalid`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "store")
			args := tc.args(dir)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			start := time.Now()
			code := Main(ctx, args, &stdout, &stderr)
			if ctx.Err() != nil {
				t.Fatalf("evoq %s: still waiting after %s; want exit 2 at once", strings.Join(args, " "), time.Since(start))
			}
			if code != 2 {
				t.Errorf("evoq %s: exit %d, want 2 (a usage error)\n%s", strings.Join(args, " "), code, stderr.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not name %q:\n%s", want, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "another evoq") {
				t.Errorf("stderr blames another server:\n%s", stderr.String())
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s was made (a store or a trust root) before the input was checked", dir)
			}
		})
	}
}
