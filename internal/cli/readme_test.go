package cli

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// commandFlags are the flags of every evoq command and subcommand, read
// from its -h text as a user would.
func commandFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	flagLine := regexp.MustCompile(`(?m)^  --?([a-z0-9][a-z0-9-]*)`)
	names := []string{"run delete", "run revoke", "broker init"}
	for name := range commands {
		names = append(names, name)
	}
	for _, name := range names {
		cmd, sub, _ := strings.Cut(name, " ")
		var help bytes.Buffer
		env := Env{Stdout: &help, Stderr: &help, Force: context.Background()}
		args := []string{"-h"}
		if sub != "" {
			args = []string{sub, "-h"}
		}
		_ = commands[cmd].make(env).Run(context.Background(), args)
		flags := map[string]bool{}
		for _, m := range flagLine.FindAllStringSubmatch(help.String(), -1) {
			flags[m[1]] = true
		}
		out[name] = flags
	}
	return out
}

// foreignFlags are flags the README names of other programs than evoq.
var foreignFlags = map[string]string{
	"build": "docker-compose up --build", "no-deps": "docker-compose up --no-deps", "no-recreate": "docker-compose up --no-recreate",
	"profile": "docker-compose --profile", "pull": "docker-compose --pull", "scale": "docker-compose up --scale",
}

// Every flag the README names exists: on the command it is shown with
// ("evoq worker --slots 4"), and on some evoq command when it stands alone
// (the settings table).
func TestReadmeFlagsExist(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := commandFlags(t)
	any := map[string]bool{}
	for _, fs := range flags {
		for f := range fs {
			any[f] = true
		}
	}
	// Shell lines continued with a backslash are one command.
	readme := strings.ReplaceAll(string(text), "\\\n", " ")
	shown := regexp.MustCompile("(?:\\bevoq|\\./cmd/evoq) (run delete|run revoke|broker init|[a-z]+)\\b([^`\\n|;&]*)")
	flag := regexp.MustCompile("(?:^|[\\s(\\[=`'\"])--([a-z][a-z0-9-]*)")
	var bad []string
	for _, m := range shown.FindAllStringSubmatch(readme, -1) {
		cmd, rest := m[1], m[2]
		fs, ok := flags[cmd]
		if !ok {
			continue // prose: "evoq exists", "evoq runs"
		}
		for _, f := range flag.FindAllStringSubmatch(rest, -1) {
			if !fs[f[1]] {
				bad = append(bad, "evoq "+cmd+" --"+f[1])
			}
		}
	}
	for _, f := range flag.FindAllStringSubmatch(readme, -1) {
		if !any[f[1]] && foreignFlags[f[1]] == "" {
			bad = append(bad, "--"+f[1]+" (no evoq command has it)")
		}
	}
	if n := len(shown.FindAllString(readme, -1)); n < 20 {
		t.Errorf("found %d evoq command lines in the README; the pattern no longer finds them", n)
	}
	sort.Strings(bad)
	bad = compactStrings(bad)
	if len(bad) > 0 {
		t.Errorf("the README names flags that do not exist where it shows them:\n  %s", strings.Join(bad, "\n  "))
	}
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}
