package cli

import (
	"bytes"
	"context"
	"flag"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/cmdbase"
)

// helpSection is one heading of -h output and the flags listed under it.
type helpSection struct {
	heading string
	flags   []helpFlag
}

type helpFlag struct{ name, arg string }

// help runs "evoq args... -h" through Main, checks it behaves as -h always
// has (exit 0, help on stderr, nothing on stdout) and returns the help.
func help(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), append(args, "-h"), &stdout, &stderr); code != 0 {
		t.Fatalf("evoq %s -h: exit code %d, want 0; stderr:\n%s", strings.Join(args, " "), code, stderr.String())
	}
	if stdout.Len() > 0 {
		t.Errorf("evoq %s -h wrote to stdout, want only stderr:\n%s", strings.Join(args, " "), stdout.String())
	}
	want := "Usage: evoq " + strings.Join(args, " ") + " [flags]\n"
	if !strings.HasPrefix(stderr.String(), want) {
		t.Fatalf("evoq %s -h: want help starting %q, got:\n%s", strings.Join(args, " "), want, stderr.String())
	}
	return stderr.String()
}

// parseHelp reads the flag lines ("  -name argname", the flag package's
// format) of help text and the heading ("Name:" alone on a line) each is
// under; flags before any heading are under "".
func parseHelp(text string) []helpSection {
	secs := []helpSection{{}}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			// A one-letter flag has its usage after a tab on the same line.
			line, _, _ = strings.Cut(line[len("  -"):], "\t")
			name, arg, _ := strings.Cut(line, " ")
			last := &secs[len(secs)-1]
			last.flags = append(last.flags, helpFlag{name, arg})
		case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " "):
			secs = append(secs, helpSection{heading: strings.TrimSuffix(line, ":")})
		}
	}
	return secs
}

// commandHelps are the command lines with a -h: every command, and run
// delete, but version, which has no flags.
func commandHelps() [][]string {
	var cmds [][]string
	for name := range commands {
		if name != "version" {
			cmds = append(cmds, []string{name})
		}
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i][0] < cmds[j][0] })
	return append(cmds, []string{"run", "delete"})
}

// TestHelpArgumentNames catches back quotes in a usage string that the
// flag package turned into a sentence where the argument name goes
// ("-connect evoq broker --connect-file").
func TestHelpArgumentNames(t *testing.T) {
	t.Parallel()
	for _, args := range commandHelps() {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			n := 0
			for _, sec := range parseHelp(help(t, args...)) {
				for _, f := range sec.flags {
					n++
					if strings.ContainsAny(f.arg, " \t") {
						t.Errorf("-%s: argument name %q is more than one word; quote with plain words or single quotes in its usage", f.name, f.arg)
					}
				}
			}
			if n == 0 {
				t.Errorf("no flag lines in the help")
			}
		})
	}
}

// TestHelpGroups checks that every flag of a grouped command has a heading
// in cmdbase.FlagGroups, so a new flag without one fails here instead of landing
// under Other.
func TestHelpGroups(t *testing.T) {
	t.Parallel()
	var names []string
	for name := range cmdbase.GroupedHelp {
		names = append(names, name)
	}
	sort.Strings(names)
	seen := map[string]bool{} // flags printed by some grouped command
	for _, name := range names {
		secs := parseHelp(help(t, name))
		if len(secs[0].flags) > 0 {
			t.Errorf("%s: flags before the first heading: %v", name, secs[0].flags)
		}
		printed := map[string]bool{}
		for _, sec := range secs[1:] {
			for _, f := range sec.flags {
				if printed[f.name] {
					t.Errorf("%s: -%s listed twice", name, f.name)
				}
				printed[f.name], seen[f.name] = true, true
				if sec.heading == cmdbase.OtherHeading {
					t.Errorf("%s: -%s has no group: add it to cmdbase.FlagGroups in help.go", name, f.name)
				} else if want := cmdbase.HeadingOf[f.name]; sec.heading != want {
					t.Errorf("%s: -%s under %q, want %q", name, f.name, sec.heading, want)
				}
			}
		}
	}
	listed := map[string]string{}
	for _, g := range cmdbase.FlagGroups {
		for _, f := range g.Flags {
			if h, dup := listed[f]; dup {
				t.Errorf("cmdbase.FlagGroups: %s in both %q and %q", f, h, g.Heading)
			}
			listed[f] = g.Heading
			if !seen[f] {
				t.Errorf("cmdbase.FlagGroups: %s is a flag of none of %v: a typo, or a removed flag", f, names)
			}
		}
	}
}

// TestRunHelpHeadings pins the headings of evoq run -h, the command that
// has flags of every group, and their order.
func TestRunHelpHeadings(t *testing.T) {
	t.Parallel()
	var got []string
	for _, sec := range parseHelp(help(t, "run"))[1:] {
		got = append(got, sec.heading)
	}
	want := []string{"Search", "Objectives and variation", "Early stopping", "Checkpoints and inheritance", "Work queue", "Workers and slots", "Evaluators", "Broker and store", "Security",
		"Output and observability"}
	if !slices.Equal(got, want) {
		t.Errorf("evoq run -h headings %q, want %q", got, want)
	}
}

// TestGroupedUsageKeepsEveryFlag checks on a made-up flag set that a flag
// without a group is listed under Other, and that grouping changes only
// the order: each flag's lines are those PrintDefaults writes for it.
func TestGroupedUsageKeepsEveryFlag(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("evoq run", flag.ContinueOnError)
	fs.Int("budget", 200, "designs to evaluate")
	fs.String("dir", "./evoq-data", "store directory")
	fs.Bool("json", false, "print JSON")
	fs.Duration("ack-wait", 30*time.Second, "time without an ack")
	fs.String("no-such-group", "", "kept in `DIR`\nover two lines")
	fs.Int("seed", 0, "random seed") // zero default: no "(default ...)"
	// Flags given before -h change the values, not the defaults shown.
	if err := fs.Parse([]string{"--budget", "7", "--dir", "/elsewhere"}); err != nil {
		t.Fatal(err)
	}
	var flat, grouped bytes.Buffer
	fs.SetOutput(&flat)
	fs.PrintDefaults()
	fs.SetOutput(&grouped)
	cmdbase.PrintUsage(fs, "run", "Synopsis.")

	secs := parseHelp(grouped.String())
	last := secs[len(secs)-1]
	if last.heading != cmdbase.OtherHeading || len(last.flags) != 1 || last.flags[0] != (helpFlag{"no-such-group", "DIR"}) {
		t.Errorf("last section %+v, want %s with -no-such-group DIR", last, cmdbase.OtherHeading)
	}
	if got, want := flagBlocks(grouped.String()), flagBlocks(flat.String()); !slices.Equal(got, want) {
		t.Errorf("grouped flag lines differ from PrintDefaults:\ngot  %q\nwant %q", got, want)
	}
	if !strings.Contains(grouped.String(), `(default "./evoq-data")`) || !strings.Contains(grouped.String(), "(default 200)") {
		t.Errorf("registered defaults missing after flags were set:\n%s", grouped.String())
	}
}

// flagBlocks are the flags' entries of help text (a flag line with its
// usage lines), sorted.
func flagBlocks(text string) []string {
	var blocks []string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			blocks = append(blocks, line)
		case strings.HasPrefix(line, "    \t") && len(blocks) > 0:
			blocks[len(blocks)-1] += "\n" + line
		}
	}
	sort.Strings(blocks)
	return blocks
}
