package test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fakeSMI puts an nvidia-smi on a PATH of its own that lists n GPUs.
func fakeSMI(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "nvidia-smi"), fmt.Sprintf(`#!/bin/sh
[ "$1" = "-L" ] || exit 2
i=0; while [ $i -lt %d ]; do echo "GPU $i: NVIDIA Fake GPU (UUID: GPU-fake-$i)"; i=$((i+1)); done
`, n))
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// With 6 GPUs found by nvidia-smi, `--gpus auto` gives 6 slots, each pinned
// to its own GPU through CUDA_VISIBLE_DEVICES, all 6 used.
func TestGPUDetectionAndPinning(t *testing.T) {
	t.Parallel()
	space := filepath.Join(t.TempDir(), "space.yaml")
	write(t, space, "params:\n  x: {type: float, min: 0, max: 1}\n")
	dir := t.TempDir()
	args := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--run", "gpus", "--gpus", "auto",
		"--workers", "2", "--config", space, "--budget", "36", "--init", "6", "--pool", "3",
		"--eval-cmd", `sleep 0.1; echo "{\"fitness\": 0.5, \"metrics\": {\"cuda\": \"$CUDA_VISIBLE_DEVICES\", \"gpu\": \"$EVOQ_GPU\"}}"`}
	r := evoqEnv(t, time.Minute, []string{"PATH=" + fakeSMI(t, 6), "CUDA_VISIBLE_DEVICES="}, args...)
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, tail(r.stderr, 3000))
	}
	if s := lastJSON(t, r.stdout); s.Slots != 6 || s.SlotsUsed != 6 || s.OK != 36 {
		t.Fatalf("slots %d used %d ok %d; want 6, 6, 36", s.Slots, s.SlotsUsed, s.OK)
	}
	slotGPU, gpus := map[string]string{}, map[string]bool{}
	for _, res := range readResults(t, dir, "gpus") {
		seen := fmt.Sprint(res.Metrics["cuda"])
		if seen != res.GPU || fmt.Sprint(res.Metrics["gpu"]) != res.GPU || len(seen) != 1 {
			t.Fatalf("%s: evaluator saw CUDA_VISIBLE_DEVICES %q, result records GPU %q", res.DesignID, seen, res.GPU)
		}
		key := slotOf(res)
		if old, ok := slotGPU[key]; ok && old != seen {
			t.Fatalf("slot %s used GPUs %s and %s", key, old, seen)
		}
		slotGPU[key] = seen
		gpus[seen] = true
	}
	if len(gpus) != 6 || len(slotGPU) != 6 {
		t.Fatalf("%d GPUs over %d slots; want 6 distinct GPUs, one per slot: %v", len(gpus), len(slotGPU), slotGPU)
	}
}
