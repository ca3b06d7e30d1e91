package evaluators

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/evoq/evoq/worker"
)

// Outcome metrics of checkpoints and inheritance. The worker fills in the
// first three itself for a mutant it could not hand a parent checkpoint;
// an evaluator reports them only when it was given one.
const (
	// MetricInherited (bool) says whether the design started from its
	// parent's checkpoint.
	MetricInherited = "inherited"
	// MetricInheritReason (string) says why not, when MetricInherited is
	// false.
	MetricInheritReason = "inherit_reason"
	// MetricInheritedParams (int64) is how many parameters MLP copied from
	// the parent.
	MetricInheritedParams = "inherited_params"
	// MetricParentBytes (int64) is the size of the parent checkpoint Sim
	// was given.
	MetricParentBytes = "parent_bytes"
	// MetricCheckpointWriteError (string) says why the design's checkpoint
	// could not be written. The evaluation still counts: a checkpoint is a
	// head start for the design's children, not part of its result.
	MetricCheckpointWriteError = "checkpoint_write_error"
)

// readParent reads the parent checkpoint at path, refusing one of more
// than limit bytes before reading it whole.
func readParent(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read parent checkpoint: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read parent checkpoint: %w", err)
	case int64(len(b)) > limit:
		return nil, fmt.Errorf("parent checkpoint is over %d bytes", limit)
	case len(b) == 0:
		return nil, errors.New("parent checkpoint is empty")
	}
	return b, nil
}

// writeCheckpoint writes the design's checkpoint to path with write. On
// failure it removes what it wrote: the worker stores whatever the file
// holds, and a cut-short checkpoint would cost a child a read and a
// refusal for nothing.
func writeCheckpoint(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	err = write(f)
	// Close reports what a buffered write failed to flush (a full disk on
	// some network file systems), so its error counts as much as Write's.
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// setInheritance records in m whether the design inherited, and why not.
func setInheritance(m map[string]any, inherited bool, reason string) {
	m[MetricInherited] = inherited
	if !inherited {
		m[MetricInheritReason] = reason
	}
}

// withMetrics returns out with its metrics map allocated, so that an
// evaluator can add to it.
func withMetrics(out worker.Outcome) worker.Outcome {
	if out.Metrics == nil {
		out.Metrics = map[string]any{}
	}
	return out
}

// SimCheckpoint is the checkpoint Sim writes for the design with ID
// design when its Checkpoint is size: the ID's bytes repeated, the last
// repetition cut short, size bytes in all ("run-7" and 12 give
// "run-7run-7ru"). An empty ID gives size zero bytes.
func SimCheckpoint(design string, size int64) []byte {
	var b bytes.Buffer
	writeSimCheckpoint(&b, design, size)
	return b.Bytes()
}

// simChunk is the size of the pieces Sim writes and compares checkpoints
// in, so that a large one is never held in memory whole.
const simChunk = 64 << 10

// simPattern returns the first n bytes of design's checkpoint; since it
// repeats design whole, any chunk starting at a multiple of len(design)
// begins the same way.
func simPattern(design string, n int) []byte {
	if design == "" {
		return make([]byte, n)
	}
	p := bytes.Repeat([]byte(design), n/len(design)+1)
	return p[:n]
}

// simChunkLen is the length of the chunks of design's checkpoint: a
// multiple of the ID's length, so that every chunk is the same.
func simChunkLen(design string) int {
	if len(design) == 0 || len(design) >= simChunk {
		return max(len(design), simChunk)
	}
	return simChunk / len(design) * len(design)
}

// writeSimCheckpoint writes SimCheckpoint(design, size) to w in chunks.
func writeSimCheckpoint(w io.Writer, design string, size int64) error {
	chunk := simPattern(design, simChunkLen(design))
	for size > 0 {
		n := min(size, int64(len(chunk)))
		if _, err := w.Write(chunk[:n]); err != nil {
			return err
		}
		size -= n
	}
	return nil
}

// checkSimParent says whether the file at path holds SimCheckpoint(design,
// size), and how large it is; when it does not, err says how it differs.
func checkSimParent(path, design string, size int64) (n int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read parent checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("read parent checkpoint: %w", err)
	}
	if n = fi.Size(); n != size {
		return n, fmt.Errorf("parent checkpoint is %d bytes, want %d", n, size)
	}
	want := simPattern(design, simChunkLen(design))
	got := make([]byte, len(want))
	for off := int64(0); off < size; off += int64(len(want)) {
		k := int(min(size-off, int64(len(want))))
		if _, err := io.ReadFull(f, got[:k]); err != nil {
			return n, fmt.Errorf("read parent checkpoint: %w", err)
		}
		if !bytes.Equal(got[:k], want[:k]) {
			return n, fmt.Errorf("parent checkpoint does not hold design %s's bytes (from byte %d)", design, off+int64(firstDiff(got[:k], want[:k])))
		}
	}
	return n, nil
}

// firstDiff is the index of the first byte where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
