package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestShareOut(t *testing.T) {
	t.Parallel()
	gpus := []string{"0", "1", "2"}
	cases := []struct {
		name       string
		gpus       []string
		slots      int
		perGPU     int
		slotsGiven bool
		workers    int
		want       []Share
	}{
		{name: "no GPUs, slots shared evenly", slots: 5, perGPU: 1, workers: 2,
			want: []Share{{Slots: 3}, {Slots: 2}}},
		{name: "one worker takes all", slots: 4, perGPU: 1, workers: 1, want: []Share{{Slots: 4}}},
		{name: "GPUs dealt round, slots follow them", gpus: gpus, slots: 3, perGPU: 1, workers: 2,
			want: []Share{{GPUs: []string{"0", "2"}, Slots: 2}, {GPUs: []string{"1"}, Slots: 1}}},
		{name: "slots per GPU", gpus: gpus, slots: 6, perGPU: 2, workers: 3,
			want: []Share{{GPUs: []string{"0"}, Slots: 2}, {GPUs: []string{"1"}, Slots: 2}, {GPUs: []string{"2"}, Slots: 2}}},
		{name: "slots given: shared evenly whatever the GPUs", gpus: gpus, slots: 7, perGPU: 1, slotsGiven: true, workers: 2,
			want: []Share{{GPUs: []string{"0", "2"}, Slots: 4}, {GPUs: []string{"1"}, Slots: 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ShareOut(tc.gpus, tc.slots, tc.perGPU, tc.slotsGiven, tc.workers)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ShareOut: %+v\nwant %+v", got, tc.want)
			}
			total := 0
			for _, s := range got {
				total += s.Slots
			}
			if (tc.slotsGiven || len(tc.gpus) == 0) && total != tc.slots {
				t.Fatalf("%d slots shared out of %d", total, tc.slots)
			}
		})
	}
}

// smiH200 is `nvidia-smi -L` on a node with two H200s, the second split
// into MIG devices.
const smiH200 = `GPU 0: NVIDIA H200 (UUID: GPU-3f1c8e2a-7b4d-5e6f-9a0b-1c2d3e4f5a6b)
GPU 1: NVIDIA H200 (UUID: GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d)
  MIG 3g.71gb     Device  0: (UUID: MIG-11111111-2222-3333-4444-555555555555)
  MIG 3g.71gb     Device  1: (UUID: MIG-66666666-7777-8888-9999-000000000000)
`

func TestParseSMI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		out   string
		ids   []string
		uuids map[string]string
	}{
		{"H200s with MIG devices", smiH200, []string{"0", "1"}, map[string]string{
			"0": "GPU-3f1c8e2a-7b4d-5e6f-9a0b-1c2d3e4f5a6b", "1": "GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"}},
		{"a name with parentheses", "GPU 0: Tesla V100-SXM2-32GB (rev a1) (UUID: GPU-aaaa)\n", []string{"0"}, map[string]string{"0": "GPU-aaaa"}},
		{"no UUID shown", "GPU 0: Some GPU\nGPU 1: Some GPU\n", []string{"0", "1"}, map[string]string{}},
		{"an error instead of a list", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", nil, map[string]string{}},
		{"nothing", "", nil, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ids, uuids := parseSMI(tc.out)
			if !reflect.DeepEqual(ids, tc.ids) || !reflect.DeepEqual(uuids, tc.uuids) {
				t.Errorf("parseSMI = %v, %v; want %v, %v", ids, uuids, tc.ids, tc.uuids)
			}
		})
	}
}

func TestSlotUUIDs(t *testing.T) {
	t.Parallel()
	_, uuids := parseSMI(smiH200)
	for _, tc := range []struct {
		name  string
		gpus  []string
		uuids map[string]string
		want  []string
	}{
		{"indices looked up, shared GPUs too", []string{"0", "0", "1"}, uuids,
			[]string{"GPU-3f1c8e2a-7b4d-5e6f-9a0b-1c2d3e4f5a6b", "GPU-3f1c8e2a-7b4d-5e6f-9a0b-1c2d3e4f5a6b", "GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"}},
		{"UUIDs from CUDA_VISIBLE_DEVICES are their own", []string{"GPU-beef", "MIG-11111111-2222-3333-4444-555555555555"}, nil,
			[]string{"GPU-beef", "MIG-11111111-2222-3333-4444-555555555555"}},
		{"an index nvidia-smi does not list", []string{"0", "7"}, uuids, []string{"GPU-3f1c8e2a-7b4d-5e6f-9a0b-1c2d3e4f5a6b", ""}},
		{"no nvidia-smi", []string{"0", "1"}, nil, []string{"", ""}},
		{"several GPUs for one slot", []string{"0,1", "1,7"}, uuids,
			[]string{"GPU-3f1c8e2a-7b4d-5e6f-9a0b-1c2d3e4f5a6b,GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d", ""}},
		{"no GPUs", nil, uuids, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := SlotUUIDs(tc.gpus, tc.uuids); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("SlotUUIDs(%v) = %v, want %v", tc.gpus, got, tc.want)
			}
		})
	}
}

// fakeSMI writes an nvidia-smi that prints out and exits with code.
func fakeSMI(t *testing.T, out string, code int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nvidia-smi")
	script := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = \"-L\" ] || exit 2\ncat <<'EOF'\n%sEOF\nexit %d\n", out, code)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// Not parallel: a script written and run at once fails with "text file
// busy" when a parallel test forks while it is open for writing.
func TestSMIUUIDs(t *testing.T) {
	ctx := context.Background()
	uuids, err := smiUUIDs(ctx, fakeSMI(t, smiH200, 0))
	if err != nil || len(uuids) != 2 || uuids["1"] != "GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d" {
		t.Errorf("smiUUIDs = %v, %v; want the two H200s", uuids, err)
	}
	// A node whose driver is broken is the node whose results most need
	// telling apart: the failure is an error for the caller to log.
	broken := "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
	if uuids, err := smiUUIDs(ctx, fakeSMI(t, broken, 9)); err == nil || len(uuids) != 0 || !strings.Contains(err.Error(), "exit status 9") {
		t.Errorf("failing nvidia-smi: %v, %v; want no UUIDs and its exit status", uuids, err)
	}
}

// A CUDA_DEVICE_ORDER other than nvidia-smi's leaves indices without
// UUIDs rather than give them another GPU's.
func TestGPUUUIDsNeedPCIOrder(t *testing.T) {
	t.Parallel()
	env := func(order string) func(string) string {
		return func(k string) string {
			if k == "CUDA_DEVICE_ORDER" {
				return order
			}
			return ""
		}
	}
	uuids, err := GPUUUIDs(context.Background(), env("FASTEST_FIRST"))
	if uuids != nil || err != nil {
		t.Errorf("FASTEST_FIRST: %v, %v; want none", uuids, err)
	}
	if got := SlotUUIDs([]string{"0", "GPU-beef"}, uuids); !reflect.DeepEqual(got, []string{"", "GPU-beef"}) {
		t.Errorf("FASTEST_FIRST: slot UUIDs %v, want only the UUID given as such", got)
	}
}

func TestGPUEnv(t *testing.T) {
	t.Parallel()
	if env := GPUEnv(""); env != nil {
		t.Errorf("no GPU: %v", env)
	}
	env := GPUEnv("GPU-beef")
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-beef", "ROCR_VISIBLE_DEVICES=GPU-beef", "EVOQ_GPU=GPU-beef"} {
		if !slices.Contains(env, want) {
			t.Errorf("GPUEnv lacks %s: %v", want, env)
		}
	}
	// The order is the worker's own when its environment sets one.
	wantOrder := os.Getenv("CUDA_DEVICE_ORDER") == ""
	if got := slices.Contains(env, "CUDA_DEVICE_ORDER=PCI_BUS_ID"); got != wantOrder {
		t.Errorf("CUDA_DEVICE_ORDER=PCI_BUS_ID in GPUEnv: %v, want %v (worker's own: %q)", got, wantOrder, os.Getenv("CUDA_DEVICE_ORDER"))
	}
}
