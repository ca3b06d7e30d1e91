package cmdbase

import (
	"flag"
	"fmt"
)

// GroupedHelp are the commands whose -h lists its flags under the headings
// of FlagGroups: with a dozen flags and more, one alphabetical list hides
// the few a reader came for. The other commands have a handful, or
// (run delete) mostly the broker's, and keep one list.
var GroupedHelp = map[string]bool{"run": true, "controller": true, "worker": true, "broker": true}

// FlagGroups is the one table of which heading a flag is listed under, in
// the order -h prints them. A flag name means the same thing in every
// command that has it, so one entry serves them all. A flag of a grouped
// command missing here is listed under OtherHeading rather than dropped,
// and TestHelpGroups fails until it is added.
var FlagGroups = []struct {
	Heading string
	Flags   []string
}{
	{"Search", []string{"config", "run", "budget", "time-budget", "target", "plateau", "init", "pool", "replace", "tournament", "seed", "resume", "from-run", "fail-fast"}},
	{"Objectives and variation", []string{"objectives", "constraint", "hv-ref", "crossover", "mutation-rate", "novel", "cost-tie"}},
	{"Early stopping", []string{"early-stop", "min-step", "max-step", "max-step-gene", "eta", "rung-select", "brackets", "stop-grace"}},
	{"Checkpoints and inheritance", []string{"inherit", "checkpoint-dir", "max-checkpoint", "keep-checkpoints", "checkpoint-mount"}},
	{"Work queue", []string{"margin", "expect-slots", "wait-slots", "ack-wait", "max-deliver", "error-retries", "quarantine-after"}},
	{"Workers and slots", []string{"workers", "slots", "slots-per-gpu", "gpus", "id", "host", "walltime", "walltime-margin",
		"min-eval-time", "drain-timeout", "wait-for-run"}},
	{"Evaluators", []string{"evaluator", "eval-cmd", "persistent", "eval-timeout", "eval-logs", "sim-mean", "sim-sigma", "sim-fail", "sim-curve", "sim-steps", "sim-progress", "sim-fixed-time", "sim-checkpoint", "nb201-noise"}},
	{"Broker and store", []string{"dir", "listen", "sync", "max-store", "nats", "connect", "connect-file", "replicas",
		"cluster-name", "server-name", "cluster-listen", "routes"}},
	{"Security", []string{"insecure", "auth", "trust", "credential-expiry", "creds", "nkey", "worker-creds", "reader-creds", "tls-cert", "tls-key", "tls-ca", "tls-verify"}},
	{"Output and observability", []string{"json", "progress", "idle-alarm", "metrics", "dashboard", "dashboard-token-file", "log-format", "log-level"}},
}

// OtherHeading is where a flag that FlagGroups does not name is listed.
const OtherHeading = "Other"

// HeadingOf maps a flag name to its heading in FlagGroups.
var HeadingOf = func() map[string]string {
	m := map[string]string{}
	for _, g := range FlagGroups {
		for _, f := range g.Flags {
			m[f] = g.Heading
		}
	}
	return m
}()

// PrintUsage is the -h text of command name: the synopsis, then the flags
// in the flag package's own format, grouped for the commands in
// GroupedHelp.
func PrintUsage(fs *flag.FlagSet, name, synopsis string) {
	out := fs.Output()
	fmt.Fprintf(out, "Usage: evoq %s [flags]\n\n%s\n", name, synopsis)
	if !GroupedHelp[name] {
		fmt.Fprintln(out, "\nFlags:")
		fs.PrintDefaults()
		return
	}
	for _, g := range groupFlags(fs) {
		fmt.Fprintf(out, "\n%s:\n", g.heading)
		g.fs.PrintDefaults()
	}
}

type flagGroup struct {
	heading string
	fs      *flag.FlagSet
}

// groupFlags splits fs into one flag set per heading that has flags, in
// FlagGroups' order and then OtherHeading. Each group is a flag set of its
// own because the flag package formats a flag (argument name taken from
// back quotes, default shown only when not the zero value) only through
// PrintDefaults; copying the flags reuses that format instead of
// imitating it.
func groupFlags(fs *flag.FlagSet) []flagGroup {
	sets := map[string]*flag.FlagSet{}
	fs.VisitAll(func(f *flag.Flag) {
		h, ok := HeadingOf[f.Name]
		if !ok {
			h = OtherHeading
		}
		g := sets[h]
		if g == nil {
			g = flag.NewFlagSet(h, flag.ContinueOnError)
			g.SetOutput(fs.Output())
			sets[h] = g
		}
		g.Var(f.Value, f.Name, f.Usage)
		// Var records the value's current text as the default; flags given
		// before -h have changed it, and -h shows the registered default.
		g.Lookup(f.Name).DefValue = f.DefValue
	})
	var groups []flagGroup
	for _, g := range FlagGroups {
		if sets[g.Heading] != nil {
			groups = append(groups, flagGroup{g.Heading, sets[g.Heading]})
		}
	}
	if sets[OtherHeading] != nil {
		groups = append(groups, flagGroup{OtherHeading, sets[OtherHeading]})
	}
	return groups
}
