package worker

import (
	"context"
	"errors"
	"fmt"
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

var smiLine = regexp.MustCompile(`^GPU (\d+):`)

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
	ctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-L").Output()
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi -L: %w", err)
	}
	var ids []string
	for _, line := range strings.Split(string(out), "\n") {
		if m := smiLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			ids = append(ids, m[1])
		}
	}
	return ids, nil
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

// GPUEnv is the environment that pins an evaluation to gpu.
func GPUEnv(gpu string) []string {
	if gpu == "" {
		return nil
	}
	return []string{"CUDA_VISIBLE_DEVICES=" + gpu, "ROCR_VISIBLE_DEVICES=" + gpu, "HIP_VISIBLE_DEVICES=" + gpu, "EVOQ_GPU=" + gpu}
}
