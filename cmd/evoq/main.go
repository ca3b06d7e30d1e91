// Command evoq distributes the evaluations of an asynchronous steady-state
// evolutionary search over a NATS JetStream work queue. Run `evoq help`.
//
// With EVOQ_CPUPROFILE=PREFIX in the environment every evoq process (the
// worker processes of `evoq run` inherit it) writes a CPU profile to
// PREFIX.<command>.<pid>.pprof, for `go tool pprof`.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/evoq/evoq/internal/cli"
)

func main() {
	stop := profile(os.Getenv("EVOQ_CPUPROFILE"), os.Args[1:])
	code := cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// profile starts a CPU profile when prefix is set and returns what stops it.
func profile(prefix string, args []string) func() {
	if prefix == "" {
		return func() {}
	}
	command := "help"
	if len(args) > 0 {
		command = args[0]
	}
	name := fmt.Sprintf("%s.%s.%d.pprof", prefix, command, os.Getpid())
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "evoq: EVOQ_CPUPROFILE: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "evoq: EVOQ_CPUPROFILE: %v\n", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
