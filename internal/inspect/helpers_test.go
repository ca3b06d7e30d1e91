package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/cmdbase"
)

// Env is the commands' environment.
type Env = cmdbase.Env

// Main runs one of this package's commands, args[0], with evoq main's
// exit codes: 2 for a usage error, 1 for any other.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := map[string]func(cmdbase.Env) Command{"status": Status, "export": Export, "replay": Replay, "report": Report}
	mk, ok := cmds[args[0]]
	if !ok {
		panic("no command " + args[0] + " in package inspect")
	}
	err := mk(Env{Stdout: stdout, Stderr: stderr, Force: ctx}).Run(ctx, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, cmdbase.ErrUsage) || errors.Is(err, broker.ErrAccount):
		fmt.Fprintln(stderr, err)
		return 2
	}
	fmt.Fprintln(stderr, err)
	return 1
}
