package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// checkDask checks that python has dask.distributed.
func checkDask(ctx context.Context, python string) error {
	out, err := exec.CommandContext(ctx, python, "-c", "import distributed; print(distributed.__version__)").CombinedOutput()
	if err != nil {
		return &ConfigError{Field: "Python", Value: python, Reason: fmt.Sprintf(
			"cannot import dask.distributed (%v: %s); install Debian's python3-distributed (apt-get install python3-distributed) or name another Python",
			err, strings.TrimSpace(lastLine(string(out))))}
	}
	return nil
}

// writeScript writes DaskBaseline to a temporary file and returns its path.
func writeScript() (string, error) {
	f, err := os.CreateTemp("", "dask_baseline-*.py")
	if err != nil {
		return "", fmt.Errorf("write the Dask baseline: %w", err)
	}
	if _, err := f.Write(DaskBaseline); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("write the Dask baseline: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("write the Dask baseline: %w", err)
	}
	return f.Name(), nil
}

// daskRun runs the Dask baseline script with args and returns its figures.
func daskRun(ctx context.Context, python, script string, args []string) (map[string]any, error) {
	full := append([]string{script, "--json"}, args...)
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, python, full...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	// On an interrupt the baseline closes its Dask cluster itself.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", python, strings.Join(full, " "), err, tailText(errb.String(), 2000))
	}
	return parseDask(out.String())
}

// parseDask reads the one JSON object the baseline prints last.
func parseDask(out string) (map[string]any, error) {
	var fig map[string]any
	if err := json.Unmarshal([]byte(lastLine(out)), &fig); err != nil {
		return nil, fmt.Errorf("the Dask baseline printed no JSON: %w\n%s", err, tailText(out, 500))
	}
	if fig == nil {
		return nil, fmt.Errorf("the Dask baseline printed null\n%s", tailText(out, 500))
	}
	return fig, nil
}
