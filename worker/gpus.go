package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// ErrGPUs means a --gpus value is invalid or names GPUs that are not there.
var ErrGPUs = errors.New("invalid --gpus")

// GPUSource says where a GPU list came from, for the start-up log.
type GPUSource string

// Where DetectGPUs found the GPUs.
const (
	GPUsFromFlag GPUSource = "--gpus"
	GPUsFromCUDA GPUSource = "CUDA_VISIBLE_DEVICES"
	GPUsFromSMI  GPUSource = "nvidia-smi -L"
	GPUsFromROCR GPUSource = "ROCR_VISIBLE_DEVICES"
	GPUsNone     GPUSource = "none"
	smiTimeout             = 10 * time.Second
)

// smiLine is a GPU's line of `nvidia-smi -L`: "GPU 0: NVIDIA H200 (UUID:
// GPU-...)". Lines of MIG devices ("  MIG 1g.18gb Device 0: (UUID: MIG-...)")
// do not match: a MIG device has no index of its own, and is named by its
// UUID wherever it is used.
var smiLine = regexp.MustCompile(`^GPU (\d+):(?:.*\(UUID: ([^)\s]+)\))?`)

// DetectGPUs resolves a --gpus value: "none" (no GPUs), a comma-separated
// list of device ids, or "auto": CUDA_VISIBLE_DEVICES if set, else the
// GPUs `nvidia-smi -L` lists, else ROCR_VISIBLE_DEVICES.
func DetectGPUs(ctx context.Context, spec string, getenv func(string) string) ([]string, GPUSource, error) {
	switch spec {
	case "none", "":
		return nil, GPUsNone, nil
	case "auto":
		return autoGPUs(ctx, getenv)
	}
	ids, err := parseIDs(spec)
	if err != nil {
		return nil, "", fmt.Errorf("%w %q: %v", ErrGPUs, spec, err)
	}
	return ids, GPUsFromFlag, nil
}

func autoGPUs(ctx context.Context, getenv func(string) string) ([]string, GPUSource, error) {
	if v, ok := lookup(getenv, "CUDA_VISIBLE_DEVICES"); ok {
		ids, err := visible(v)
		return ids, GPUsFromCUDA, err
	}
	if ids, err := nvidiaSMI(ctx); err == nil && len(ids) > 0 {
		return ids, GPUsFromSMI, nil
	}
	if v, ok := lookup(getenv, "ROCR_VISIBLE_DEVICES"); ok {
		ids, err := visible(v)
		return ids, GPUsFromROCR, err
	}
	return nil, GPUsNone, nil
}

func lookup(getenv func(string) string, key string) (string, bool) {
	v := getenv(key)
	return v, v != ""
}

// visible parses a *_VISIBLE_DEVICES value; -1 or NoDevFiles mean none.
func visible(v string) ([]string, error) {
	if v == "-1" || strings.EqualFold(v, "NoDevFiles") {
		return nil, nil
	}
	return parseIDs(v)
}

// parseIDs splits a comma-separated list of device ids (indices or UUIDs)
// and refuses empty or repeated ones.
func parseIDs(s string) ([]string, error) {
	seen := map[string]bool{}
	var ids []string
	for _, f := range strings.Split(s, ",") {
		id := strings.TrimSpace(f)
		if id == "" || strings.ContainsAny(id, " \t") {
			return nil, fmt.Errorf("empty or malformed device id in %q", s)
		}
		if seen[id] {
			return nil, fmt.Errorf("device %s listed twice", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, nil
}

// nvidiaSMI lists the GPU indices `nvidia-smi -L` prints.
func nvidiaSMI(ctx context.Context) ([]string, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, err
	}
	out, err := listGPUs(ctx, path)
	if err != nil {
		return nil, err
	}
	ids, _ := parseSMI(out)
	return ids, nil
}

// listGPUs runs `nvidia-smi -L`, the nvidia-smi at path.
func listGPUs(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-L").Output()
	if err != nil {
		return "", fmt.Errorf("nvidia-smi -L: %w", err)
	}
	return string(out), nil
}

// parseSMI reads `nvidia-smi -L` output: the GPU indices in order, and
// the UUID of each index that shows one.
func parseSMI(out string) (ids []string, uuids map[string]string) {
	uuids = map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		m := smiLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		ids = append(ids, m[1])
		if m[2] != "" {
			uuids[m[1]] = m[2]
		}
	}
	return ids, uuids
}

// GPUUUIDs maps the GPU indices `nvidia-smi -L` lists to their UUIDs, for
// SlotUUIDs. It returns nil and no error where there is no nvidia-smi (no
// NVIDIA GPU, or an AMD node: rocm-smi numbers GPUs its own way, not as
// HIP does, so its UUIDs cannot be matched to an index). It returns nil
// too when the environment sets CUDA_DEVICE_ORDER to anything but
// PCI_BUS_ID: CUDA would then number the GPUs otherwise than nvidia-smi,
// and an index would name one GPU to the evaluator and another here; a
// wrong UUID is worse than none.
func GPUUUIDs(ctx context.Context, getenv func(string) string) (map[string]string, error) {
	if o := getenv("CUDA_DEVICE_ORDER"); o != "" && o != pciOrder {
		return nil, nil
	}
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, nil
	}
	return smiUUIDs(ctx, path)
}

// smiUUIDs is GPUUUIDs with the nvidia-smi at path.
func smiUUIDs(ctx context.Context, path string) (map[string]string, error) {
	out, err := listGPUs(ctx, path)
	if err != nil {
		return nil, err
	}
	_, uuids := parseSMI(out)
	return uuids, nil
}

// isUUID reports whether a device id is a UUID rather than an index:
// CUDA_VISIBLE_DEVICES takes GPU-... and MIG-..., ROCR_VISIBLE_DEVICES
// GPU-....
func isUUID(id string) bool {
	return strings.HasPrefix(id, "GPU-") || strings.HasPrefix(id, "MIG-")
}

// SlotUUIDs gives each slot the UUID of its GPU (slotGPUs as SlotGPUs
// makes them): the GPU value itself when it is a UUID, else the UUID that
// uuids (GPUUUIDs) has for the index; "" where it is not known. A value
// naming several GPUs gets their UUIDs comma-separated, or "" if one is
// not known. Nil without GPUs.
func SlotUUIDs(slotGPUs []string, uuids map[string]string) []string {
	if slotGPUs == nil {
		return nil
	}
	out := make([]string, len(slotGPUs))
	for i, gpu := range slotGPUs {
		out[i] = uuidOf(gpu, uuids)
	}
	return out
}

func uuidOf(gpu string, uuids map[string]string) string {
	if gpu == "" {
		return ""
	}
	var known []string
	for _, id := range strings.Split(gpu, ",") {
		id = strings.TrimSpace(id)
		u := uuids[id]
		if isUUID(id) {
			u = id
		}
		if u == "" {
			return ""
		}
		known = append(known, u)
	}
	return strings.Join(known, ",")
}

// SlotGPUs assigns GPUs to slots: slot i gets gpus[i / perGPU] while GPUs
// last, so perGPU slots share each GPU. With no GPUs every slot gets "".
func SlotGPUs(gpus []string, slots, perGPU int) []string {
	out := make([]string, slots)
	if len(gpus) == 0 {
		return out
	}
	for i := range out {
		out[i] = gpus[(i/perGPU)%len(gpus)]
	}
	return out
}

// Share is what one of several workers on a machine gets of its GPUs and
// slots.
type Share struct {
	GPUs  []string
	Slots int
}

// ShareOut deals a machine's gpus and slots out among workers (its local
// worker processes). The GPUs go round, worker i getting gpus i,
// i+workers, ...; each worker's slots are perGPU per GPU it got, unless
// slotsGiven, or there are no GPUs: then the slots are shared out evenly,
// the remainder to the first workers.
func ShareOut(gpus []string, slots, perGPU int, slotsGiven bool, workers int) []Share {
	out := make([]Share, workers)
	for i := range out {
		for j := i; j < len(gpus); j += workers {
			out[i].GPUs = append(out[i].GPUs, gpus[j])
		}
		out[i].Slots = len(out[i].GPUs) * perGPU
		if slotsGiven || len(gpus) == 0 {
			out[i].Slots = slots / workers
			if i < slots%workers {
				out[i].Slots++
			}
		}
	}
	return out
}

// pciOrder is the CUDA_DEVICE_ORDER that numbers GPUs as nvidia-smi does.
const pciOrder = "PCI_BUS_ID"

// GPUEnv is the environment that pins an evaluation to gpu. Unless the
// worker's environment chose a CUDA_DEVICE_ORDER, it asks CUDA to number
// the GPUs in PCI bus order, as nvidia-smi does: CUDA's own default,
// fastest first, numbers a node with two kinds of GPU differently, and the
// index a slot pins and records (with the UUID nvidia-smi gives it) would
// be another GPU to the evaluator.
func GPUEnv(gpu string) []string {
	if gpu == "" {
		return nil
	}
	env := []string{"CUDA_VISIBLE_DEVICES=" + gpu, "ROCR_VISIBLE_DEVICES=" + gpu, "HIP_VISIBLE_DEVICES=" + gpu, "EVOQ_GPU=" + gpu}
	if os.Getenv("CUDA_DEVICE_ORDER") == "" {
		env = append(env, "CUDA_DEVICE_ORDER="+pciOrder)
	}
	return env
}
