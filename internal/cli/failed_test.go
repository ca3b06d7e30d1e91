package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// A run that failed fast comes out quoting the error and naming the flags
// to check and the one that continues it, still a controller.ErrFailed:
// exit code ExitRunFailed.
func TestFailedRunNamesFlags(t *testing.T) {
	t.Parallel()
	f := schema.Failure{Attempts: 10, StreamSeq: 12, Error: "sh: 1: nonexistent-prog: not found", Count: 9}
	for name, err := range map[string]error{
		"failed now":     failedErr(configErr(&runstate.FailedError{Run: "r1", Failure: f})),
		"failed earlier": failedEarlierErr("r1", &f),
	} {
		if !errors.Is(err, runstate.ErrFailed) || errors.Is(err, errUsage) {
			t.Errorf("%s: %v is not a failed run's error", name, err)
		}
		for _, want := range []string{"run r1 failed", `9 of them with "sh: 1: nonexistent-prog: not found"`, "first 10 evaluations",
			"--eval-cmd", "--resume --run r1", "--fail-fast 0"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", name, err, want)
			}
		}
	}
	other := errors.New("broker down")
	if got := failedErr(other); got != other {
		t.Errorf("failedErr changed another error: %v", got)
	}
}
