// Package cmdbase is what every evoq command shares: its environment, its
// flag sets and their help, and the usage errors that exit with code 2.
// The commands that run a search (package cli) and those that read a run
// (package inspect) both build on it, and it imports neither.
package cmdbase

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/evoq/evoq/schema"
	"golang.org/x/sys/unix"
)

// Env is what a subcommand writes to, and its second-signal context.
type Env struct {
	Stdout, Stderr io.Writer
	// Force is cancelled by a second SIGINT or SIGTERM: stop at once.
	Force context.Context
}

// ErrUsage marks a bad flag or argument: exit code 2.
var ErrUsage = errors.New("usage")

// UsageErr is an error of a bad flag or argument (ErrUsage: exit code 2).
func UsageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, a...))
}

// NewFlagSet returns a flag set that reports errors instead of exiting.
func NewFlagSet(name, synopsis string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("evoq "+name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { PrintUsage(fs, name, synopsis) }
	return fs
}

// Parse parses args and refuses positional arguments.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return UsageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return UsageErr("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	return nil
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// CheckRunID refuses a run ID that no run can have (schema.ValidToken,
// the rule every message's run field is checked by), naming its flag. The
// commands call it before they connect: with no broker to answer, a
// worker would otherwise wait for ever before it learnt the ID was wrong.
// An empty ID is not given, and passes.
func CheckRunID(flag, id string) error {
	if id == "" {
		return nil
	}
	if err := schema.ValidToken(id); err != nil {
		return UsageErr("--%s %q: %s", flag, id, schema.Reason(err))
	}
	return nil
}

// IsSet reports whether the flag name was given.
func IsSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// ReaderFile names the reader's connect file beside path: run.json →
// run-reader.json.
func ReaderFile(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-reader" + ext
}
