package cli

import (
	"errors"
	"fmt"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// runFailedError is a failed run's error as the command line says it,
// naming flags; it matches controller.ErrFailed, which makes the exit code
// ExitRunFailed.
type runFailedError struct{ msg string }

func (e *runFailedError) Error() string { return e.msg }

func (e *runFailedError) Unwrap() error { return runstate.ErrFailed }

// failedErr names the flags to check in the error of a controller whose
// run failed fast; other errors pass unchanged.
func failedErr(err error) error {
	var fe *runstate.FailedError
	if !errors.As(err, &fe) {
		return err
	}
	return &runFailedError{"run " + fe.Run + " failed: " + failureText(&fe.Failure) + ". " + failedWhatToDo(fe.Run)}
}

// failedEarlierErr refuses to start the controller of a run that failed
// without --resume: it would judge the evaluators again and spend more of
// the budget on them, which a user means to do only once they are fixed.
func failedEarlierErr(run string, f *schema.Failure) error {
	msg := "run " + run + " failed earlier"
	if f != nil {
		msg += ": " + failureText(f)
	}
	return &runFailedError{msg + ". " + failedWhatToDo(run)}
}

func failureText(f *schema.Failure) string {
	return fmt.Sprintf("its first %d evaluations all ended in error or timeout, none ok or infeasible; %d of them with %q",
		f.Attempts, f.Count, f.Error)
}

func failedWhatToDo(run string) string {
	return "Check the workers' --eval-cmd (or --evaluator) and their environment (PATH, modules, GPUs, the files the evaluator reads), " +
		"then continue the run with --resume --run " + run + " (--fail-fast 0 turns this check off)"
}
