package test

import (
	"os/exec"
	"testing"
	"time"
)

// The PyTorch example, through `evoq run --persistent`, on CPU: it completes
// and improves on its random designs. It needs Debian's python3-torch and
// python3-sklearn (.ci/run installs them).
func TestPyTorchExample(t *testing.T) {
	t.Parallel()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch, sklearn").Run(); err != nil {
		t.Skipf("SKIPPED: /usr/bin/python3 cannot import torch and sklearn (%v): apt-get install python3-torch python3-sklearn", err)
	}
	s, _ := runJSON(t, 5*time.Minute, "--config", "../examples/pytorch/space.yaml",
		"--eval-cmd", "/usr/bin/python3 ../examples/pytorch/evaluate.py", "--persistent",
		"--budget", "60", "--init", "12", "--pool", "6", "--slots", "2", "--gpus", "none", "--run", "torch")
	if s.Evaluations != 60 || s.Error != 0 || s.Lost != 0 || s.BestFitness == nil || s.BestRandomFitness == nil {
		t.Fatalf("summary %+v", s)
	}
	if *s.BestFitness <= *s.BestRandomFitness {
		t.Fatalf("best accuracy %.4f does not beat the best random design %.4f", *s.BestFitness, *s.BestRandomFitness)
	}
	t.Logf("digits: best %.4f, best random %.4f, %.1f evaluations/s", *s.BestFitness, *s.BestRandomFitness, s.EvalsPerS)
}
