package runstate

import (
	"os/exec"
	"strings"
	"testing"
)

// goList is `go list` of the module's packages with format.
func goList(t *testing.T, format string, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-f", format}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", pkgs, err)
	}
	return strings.Fields(string(out))
}

// The house's floors: the fold knows no broker; the tools that read a run
// reach its state through the fold, not the controller; and no package of
// the lower floors climbs into internal/.
func TestLayers(t *testing.T) {
	t.Parallel()
	for _, dep := range goList(t, `{{join .Deps " "}}`, "github.com/evoq/evoq/runstate") {
		if strings.Contains(dep, "nats-io") {
			t.Errorf("runstate depends on %s: the fold must not know the broker", dep)
		}
	}
	for _, p := range []string{"internal/inspect", "bench"} {
		for _, dep := range goList(t, `{{join .Deps " "}}`, "github.com/evoq/evoq/"+p) {
			if dep == "github.com/evoq/evoq/controller" {
				t.Errorf("%s (status, export, replay, report; the bench) depends on the controller", p)
			}
		}
	}
	lower := []string{"worker", "controller", "bench", "broker", "schema", "space", "runstate", "pareto", "checkpoint", "history"}
	for _, p := range lower {
		for _, imp := range goList(t, `{{join .Imports " "}}`, "github.com/evoq/evoq/"+p) {
			if strings.HasPrefix(imp, "github.com/evoq/evoq/internal/") {
				t.Errorf("%s imports %s: a lower floor climbing into internal/", p, imp)
			}
		}
	}
}
