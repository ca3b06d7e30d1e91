// Command evoq distributes the evaluations of an asynchronous steady-state
// evolutionary search over a NATS JetStream work queue. Run `evoq help`.
package main

import (
	"context"
	"os"

	"github.com/evoq/evoq/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
