package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Files are what Write wrote.
type Files struct {
	HTML   string
	PNGs   []string
	Charts []Chart
}

// Write draws the analysis and writes the HTML page to out and each chart
// as a PNG beside it, named after out: report.html → report-gantt.png.
func Write(out string, a *Analysis, generated time.Time) (*Files, error) {
	charts, err := a.Charts()
	if err != nil {
		return nil, err
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, a, charts, generated); err != nil {
		return nil, err
	}
	f := &Files{HTML: out, Charts: charts}
	stem := strings.TrimSuffix(out, filepath.Ext(out))
	for _, c := range charts {
		name := stem + "-" + c.Name + ".png"
		if err := writeFile(name, c.PNG); err != nil {
			return nil, err
		}
		f.PNGs = append(f.PNGs, name)
	}
	if err := writeFile(out, page.Bytes()); err != nil {
		return nil, err
	}
	return f, nil
}

// writeFile writes data through a temporary file, so that a reader never
// sees half a file.
func writeFile(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
