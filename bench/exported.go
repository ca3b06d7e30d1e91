package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/evoq/evoq/runstate"
)

// measure runs `evoq run` of bin with args in store dir, then exports the
// run's results with the same binary and computes its figures from them.
func (r *runner) measure(ctx context.Context, bin, dir string, args []string) (*Figures, error) {
	full := append(runFlags(dir), args...)
	var errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Stdout, cmd.Stderr = io.Discard, &errb
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(full, " "), err, tailText(errb.String(), 2000))
	}
	wall := time.Since(began)
	// The usage wait4 reports includes the worker processes evoq run
	// reaped itself.
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	var out bytes.Buffer
	errb.Reset()
	exp := exec.CommandContext(ctx, bin, "export", "--dir", dir, "--format", "jsonl")
	exp.Stdout, exp.Stderr = &out, &errb
	if err := exp.Run(); err != nil {
		return nil, fmt.Errorf("%s export --dir %s: %w\n%s", bin, dir, err, tailText(errb.String(), 2000))
	}
	f, err := exportFigures(&out)
	if err != nil {
		return nil, fmt.Errorf("%s export --dir %s: %w", bin, dir, err)
	}
	f.WallS = sig4(wall.Seconds())
	f.CPUPerEvalUs = sig4(cpu.Seconds() * 1e6 / float64(f.Evaluations))
	return f, nil
}

// exportedResult is what the figures read of one line of `evoq export
// --format jsonl`: fields every revision's export has written.
type exportedResult struct {
	Status string    `json:"status"`
	Worker string    `json:"worker"`
	Slot   int       `json:"slot"`
	Start  time.Time `json:"start"`
	Stop   time.Time `json:"stop"`
}

// slotKey names one slot of one worker.
type slotKey struct {
	worker string
	slot   int
}

// exportFigures computes a run's figures from its exported results. A
// lost result was evaluated by no slot and is left out.
func exportFigures(in io.Reader) (*Figures, error) {
	var evals []exportedResult
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var e exportedResult
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if e.Status == "lost" || e.Start.IsZero() || e.Worker == "" {
			continue
		}
		evals = append(evals, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(evals) == 0 {
		return nil, fmt.Errorf("no evaluated result in the export")
	}
	return figuresOf(evals), nil
}

// figuresOf computes the figures of a run's evaluations: the rate over
// the first start to the last stop; utilization over the window from the
// first start to the last start, the steady state before the drain; the
// gaps between a slot's evaluations.
func figuresOf(evals []exportedResult) *Figures {
	first, lastStart, lastStop := evals[0].Start, evals[0].Start, evals[0].Stop
	bySlot := map[slotKey][]exportedResult{}
	for _, e := range evals {
		first, lastStart, lastStop = runstate.MinTime(first, e.Start), runstate.MaxTime(lastStart, e.Start), runstate.MaxTime(lastStop, e.Stop)
		k := slotKey{e.Worker, e.Slot}
		bySlot[k] = append(bySlot[k], e)
	}
	f := &Figures{Evaluations: len(evals), Slots: len(bySlot)}
	if d := lastStop.Sub(first).Seconds(); d > 0 {
		f.EvalsPerS = sig4(float64(len(evals)) / d)
	}
	var busy time.Duration
	var gaps []float64
	for _, es := range bySlot {
		slices.SortFunc(es, func(a, b exportedResult) int { return a.Start.Compare(b.Start) })
		for i, e := range es {
			busy += max(runstate.MinTime(e.Stop, lastStart).Sub(e.Start), 0)
			if i > 0 {
				gaps = append(gaps, float64(max(e.Start.Sub(es[i-1].Stop), 0))/float64(time.Millisecond))
			}
		}
	}
	if window := lastStart.Sub(first); window > 0 {
		f.UtilSteady = sig4(float64(busy) / (float64(window) * float64(f.Slots)))
	}
	if q := quantiles(gaps); q != nil {
		f.GapP50Ms, f.GapP99Ms = q.P50, q.P99
	}
	return f
}
