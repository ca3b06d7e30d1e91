// Package cli implements the evoq command line: one small type per
// subcommand, each with Run(ctx, args) writing to injected writers.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/inspect"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/worker"
)

// Version is the evoq version, set at build time with -ldflags.
var Version = "dev"

// command is one subcommand.
type command interface {
	Run(ctx context.Context, args []string) error
}

type entry struct {
	summary string
	make    func(Env) command
}

var commands = map[string]entry{
	"run":        {"run a whole search: embedded broker, controller and local workers", func(e Env) command { return &runCmd{controllerCmd: controllerCmd{env: e}} }},
	"broker":     {"run the embedded broker alone (JetStream store on --dir)", func(e Env) command { return &brokerCmd{env: e} }},
	"controller": {"run the search controller (embedded broker unless --nats)", func(e Env) command { return &controllerCmd{env: e} }},
	"worker":     {"run a worker: one evaluation slot per --slots", func(e Env) command { return &workerCmd{env: e} }},
	"status":     {"show a run: phase, budget, queue, best, workers, idle slots", func(e Env) command { return inspect.Status(e) }},
	"version":    {"print the version", func(e Env) command { return versionCmd{env: e} }},
	"export":     {"write a run's results as CSV or JSON lines, one row per stored result", func(e Env) command { return inspect.Export(e) }},
	"bench":      {"run named workloads end to end and print their figures; --vs-dask runs Dask side by side", func(e Env) command { return &benchCmd{env: e} }},
	"report":     {"write a run's report: one HTML page with charts, and the charts as PNGs", func(e Env) command { return inspect.Report(e) }},
	"replay":     {"rebuild a run's pool from its results stream and check its integrity", func(e Env) command { return inspect.Replay(e) }},
	"dashboard":  {"serve a run's live dashboard in the browser, read-only, from a broker or a store", func(e Env) command { return inspect.Dashboard(e) }},
}

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	env := Env{Stdout: stdout, Stderr: stderr}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		return 0
	}
	e, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "evoq: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	drains := map[string]bool{"run": true, "controller": true, "worker": true, "broker": true}[args[0]]
	ctx, force, stop := signalContext(ctx, stderr, drains)
	defer stop()
	env.Force = force
	err := e.make(env).Run(ctx, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage) || errors.Is(err, broker.ErrAccount):
		fmt.Fprintf(stderr, "evoq %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, runstate.ErrFailed) || errors.Is(err, worker.ErrRunFailed):
		fmt.Fprintf(stderr, "evoq %s: %v\n", args[0], err)
		return ExitRunFailed
	case errors.Is(err, worker.ErrQuarantined):
		fmt.Fprintf(stderr, "evoq %s: %v\n", args[0], err)
		return ExitQuarantined
	default:
		fmt.Fprintf(stderr, "evoq %s: %v\n", args[0], err)
		return 1
	}
}

// ExitRunFailed is the exit code of a controller that stopped its run
// because none of its first evaluations worked (controller.ErrFailed), and
// of a worker that left such a run: apart from 1, so that a job script
// can tell a broken evaluator from a broken broker or store.
const ExitRunFailed = 3

// ExitQuarantined is the exit code of a worker that left because the
// controller quarantined every one of its slots: a batch system shows the
// node's step as failed.
const ExitQuarantined = 4

func usage(w io.Writer) {
	fmt.Fprintln(w, "evoq: asynchronous steady-state evolutionary search over a NATS JetStream work queue")
	fmt.Fprintln(w, "\nUsage: evoq <command> [flags]    (evoq <command> -h lists its flags)\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, commands[n].summary)
	}
}

// signalContext is cancelled on the first SIGINT or SIGTERM, which asks for
// a drain; the second cancels force, which stops at once. A command that
// has not returned ForceGrace after that is ended.
func signalContext(parent context.Context, stderr io.Writer, drains bool) (ctx, force context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	force, forceCancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			if drains {
				fmt.Fprintf(stderr, "evoq: %s: draining; send it again to stop at once\n", s)
			} else {
				fmt.Fprintf(stderr, "evoq: %s: stopping\n", s)
			}
			cancel()
		case <-ctx.Done():
			return
		}
		select {
		case s := <-ch:
			fmt.Fprintf(stderr, "evoq: %s again: stopping now\n", s)
			forceCancel()
		case <-force.Done():
			return
		}
		time.Sleep(ForceGrace)
		os.Exit(130)
	}()
	return ctx, force, func() { signal.Stop(ch); cancel(); forceCancel() }
}

// ForceGrace is how long a command has to stop after the second signal.
const ForceGrace = 10 * time.Second

type versionCmd struct{ env Env }

func (v versionCmd) Run(context.Context, []string) error {
	fmt.Fprintln(v.env.Stdout, "evoq", Version)
	return nil
}
