// Package inspect holds the commands that read a run without running it:
// status, export, replay and report. They reach a run's state through the
// fold's package (runstate) and the run's history (history), never
// through the controller, so what they say of a run is what a restart
// would rebuild from the same streams.
package inspect

import (
	"context"

	"github.com/evoq/evoq/internal/cmdbase"
)

// Command is one of the commands.
type Command interface {
	Run(ctx context.Context, args []string) error
}

// Status shows a run at a glance.
func Status(env cmdbase.Env) Command { return &statusCmd{env: env} }

// Export writes a run's results, or its reports, one row each.
func Export(env cmdbase.Env) Command { return &exportCmd{env: env} }

// Replay rebuilds a run's pool from its streams and checks them.
func Replay(env cmdbase.Env) Command { return &replayCmd{env: env} }

// Report writes a run's report: one HTML page and its charts.
func Report(env cmdbase.Env) Command { return &reportCmd{env: env} }
