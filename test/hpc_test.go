package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
		if res.GPUUUID != "GPU-fake-"+res.GPU || res.Exit == nil || *res.Exit != 0 {
			t.Fatalf("%s: GPU %s recorded with UUID %q and exit %v; want nvidia-smi's GPU-fake-%s and exit 0", res.DesignID, res.GPU, res.GPUUUID, res.Exit, res.GPU)
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

// `evoq controller --connect-file` writes the broker's URLs and the run,
// mode 0600; `evoq worker --connect` needs nothing else. --listen takes an
// interface name (lo here, ib0 on a cluster).
func TestConnectFileAndInterfaceListen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "run.json")
	ctl := background(t, "controller", "--dir", filepath.Join(dir, "store"), "--listen", fmt.Sprintf("lo:%d", freePort(t)),
		"--connect-file", file, "--run", "cf", "--budget", "30", "--init", "5", "--pool", "3", "--json")
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(file); return err == nil })
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("connect file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	data, _ := os.ReadFile(file)
	if !strings.Contains(string(data), `"run": "cf"`) || !strings.Contains(string(data), "nats://127.0.0.1:") {
		t.Fatalf("connect file lacks the run or the loopback URL:\n%s", data)
	}
	w := background(t, "worker", "--connect", file, "--evaluator", "noop", "--slots", "2")
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	if s := lastJSON(t, ctl.stderr.String()); s.Evaluations != 30 || s.SlotsUsed != 2 {
		t.Fatalf("evaluations %d slots used %d; want 30 and 2", s.Evaluations, s.SlotsUsed)
	}
	if err := w.wait(t, 30*time.Second); err != nil {
		t.Fatalf("worker: %v", err)
	}
}
