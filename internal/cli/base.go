package cli

import (
	"flag"
	"io"

	"github.com/evoq/evoq/internal/cmdbase"
)

// The commands' shared ground is package cmdbase; these are its names
// here.

// Env is what a subcommand writes to, and its second-signal context.
type Env = cmdbase.Env

var errUsage = cmdbase.ErrUsage

func usageErr(format string, a ...any) error { return cmdbase.UsageErr(format, a...) }

func newFlagSet(name, synopsis string, out io.Writer) *flag.FlagSet {
	return cmdbase.NewFlagSet(name, synopsis, out)
}

func parse(fs *flag.FlagSet, args []string) error { return cmdbase.Parse(fs, args) }

func isTerminal(w io.Writer) bool { return cmdbase.IsTerminal(w) }

func checkRunID(flag, id string) error { return cmdbase.CheckRunID(flag, id) }

func isSet(fs *flag.FlagSet, name string) bool { return cmdbase.IsSet(fs, name) }

func readerFile(path string) string { return cmdbase.ReaderFile(path) }
