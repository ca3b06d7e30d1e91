package cli

import (
	"flag"
	"io"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/evoq/evoq/schema"
)

// recordedFlags are the flags whose settings decide what a result is, or
// which results count, with where the run's record (schema.Run) keeps
// each: a run that continues, and a worker that joins it, take them from
// there, and a default never replaces them.
var recordedFlags = map[string]string{
	"config": "space_yaml", "budget": "budget", "init": "init", "pool": "pool", "replace": "replace",
	"tournament": "tournament", "seed": "seed", "fail-fast": "fail_fast", "from-run": "seeds_from",
	"constraint": "constraints", "objectives": "objectives", "hv-ref": "hv_ref",
	"crossover": "variation.crossover", "mutation-rate": "variation.mutation_rate", "novel": "variation.novel", "cost-tie": "variation.cost_tie",
	"early-stop": "early_stop.rule", "eta": "early_stop.eta", "max-step": "early_stop.max_step", "min-step": "early_stop.min_step",
	"max-step-gene": "early_stop.max_step_gene", "rung-select": "early_stop.select", "brackets": "early_stop.brackets",
	"checkpoint-dir": "checkpoints.dir", "inherit": "checkpoints.inherit", "keep-checkpoints": "checkpoints.keep",
	"max-checkpoint": "checkpoints.max",
	"ack-wait":       "ack_wait_ns", "error-retries": "error_retries", "margin": "margin", "max-deliver": "max_deliver",
	"quarantine-after": "quarantine_after",
	"target":           "target", "plateau": "plateau", "time-budget": "time_budget_ns",
	"evaluator": "evaluator.builtin", "eval-cmd": "evaluator.cmd", "persistent": "evaluator.persistent",
	"eval-timeout": "evaluator.timeout_ns", "stop-grace": "evaluator.stop_grace_ns",
	"sim-mean": "evaluator.sim.mean_ns", "sim-sigma": "evaluator.sim.sigma", "sim-fail": "evaluator.sim.fail",
	"sim-curve": "evaluator.sim.curve", "sim-steps": "evaluator.sim.steps", "sim-checkpoint": "evaluator.sim.checkpoint",
	"sim-progress": "evaluator.sim.progress", "sim-fixed-time": "evaluator.sim.fixed_time",
	"nb201-noise": "evaluator.nb201.noise",
}

// processFlags are the flags that belong to one process, each with why it
// cannot change a result: where the process runs, how it reaches the
// broker, how it reports, how many slots it serves.
var processFlags = map[string]string{
	"run":               "names the run; its record is kept under that name",
	"creds":             "the credential this process reaches a site's broker with",
	"nkey":              "as creds",
	"worker-creds":      "the credential handed to the workers in their connect file; as creds",
	"reader-creds":      "as worker-creds, for readers",
	"resume":            "picks the stored run to continue; its settings come from its record",
	"expect-slots":      "sizes the consumer's limits, which are raised as slots join; a limit decides no result",
	"wait-slots":        "delays the first design until slots join; the designs are the same",
	"workers":           "how many local worker processes share the slots",
	"gpus":              "which GPUs this process's slots use",
	"slots":             "how many designs this process evaluates at once",
	"slots-per-gpu":     "how many slots share a GPU",
	"drain-timeout":     "how long a stopping worker lets its evaluations finish; an unfinished design is handed back and evaluated elsewhere",
	"walltime":          "when this worker leaves; a design it cannot finish is handed back, not judged",
	"walltime-margin":   "how long before its walltime this worker leaves; as walltime",
	"min-eval-time":     "the evaluation time this worker assumes for its walltime check; as walltime",
	"checkpoint-mount":  "where this node mounts the run's recorded checkpoint directory",
	"eval-logs":         "where evaluators' output is kept",
	"id":                "names this worker in results and heartbeats",
	"host":              "names this worker's node in results, so that failures are charged to it",
	"wait-for-run":      "how long a worker waits for its run to start",
	"connect":           "how the process reaches the broker",
	"connect-file":      "where the controller writes how workers reach the broker",
	"nats":              "how the process reaches the broker",
	"dir":               "where the embedded broker keeps its store",
	"listen":            "where the embedded broker listens",
	"max-store":         "how large the embedded broker's store may grow; a full store stops the run, with everything stored kept",
	"sync":              "how often the embedded broker's store is flushed to disk",
	"replicas":          "how many copies of the streams a broker cluster keeps",
	"auth":              "how the embedded broker checks its clients",
	"insecure":          "how the embedded broker checks its clients",
	"trust":             "how the embedded broker checks its clients",
	"credential-expiry": "when the workers' credentials expire",
	"tls-ca":            "how the connection is encrypted",
	"tls-cert":          "how the connection is encrypted",
	"tls-key":           "how the connection is encrypted",
	"tls-verify":        "how the connection is encrypted",
	"idle-alarm":        "when the controller warns of idle slots",
	"progress":          "how often the progress line is logged",
	"json":              "how the summary is printed",
	"log-format":        "how the log is written",
	"log-level":         "what the log shows",
	"metrics":           "where Prometheus metrics are served",

	// The live dashboard reads the run and changes nothing.
	"dashboard":            "where the read-only live dashboard is served",
	"dashboard-token-file": "what the read-only dashboard asks of a browser",
}

// recordPaths are the msgpack paths of every field of schema.Run, nested
// structs included: "evaluator.sim.mean_ns".
func recordPaths(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeOf(schema.Run{}).PkgPath() {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[prefix+name] = true
		recordPaths(f.Type, prefix+name+".", out)
	}
}

// Every flag of run, controller and worker either is recorded with the
// run, where the record has a field for it, or is on the reviewed list of
// flags that cannot change a result, with the reason. A new flag fails
// this test until it is put on one of the two lists: deciding which is
// deciding whether a restart may silently drop it.
func TestEveryFlagRecordedOrReviewed(t *testing.T) {
	t.Parallel()
	paths := map[string]bool{}
	recordPaths(reflect.TypeOf(schema.Run{}), "", paths)
	env := Env{Stdout: io.Discard, Stderr: io.Discard}
	sets := map[string]*flag.FlagSet{
		"run":        (&runCmd{controllerCmd: controllerCmd{env: env}}).flagSet(),
		"controller": (&controllerCmd{env: env}).flagSet(),
		"worker":     (&workerCmd{env: env}).flagSet(),
		"run extend": (&runExtendCmd{env: env}).flagSet(),
	}
	seen := map[string]bool{}
	for cmd, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			seen[f.Name] = true
			path, recorded := recordedFlags[f.Name]
			why, reviewed := processFlags[f.Name]
			switch {
			case recorded && reviewed:
				t.Errorf("evoq %s --%s is on both lists", cmd, f.Name)
			case !recorded && !reviewed:
				t.Errorf("evoq %s --%s is neither recorded with the run nor on the reviewed list of flags that cannot change a result: decide which, and add it to recordedFlags or processFlags", cmd, f.Name)
			case recorded && !paths[path]:
				t.Errorf("evoq %s --%s: recorded as %q, which schema.Run has no field for", cmd, f.Name, path)
			case reviewed && strings.TrimSpace(why) == "":
				t.Errorf("evoq %s --%s: reviewed without a reason", cmd, f.Name)
			}
		})
	}
	var stale []string
	for name := range recordedFlags {
		if !seen[name] {
			stale = append(stale, name)
		}
	}
	for name := range processFlags {
		if !seen[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("listed flags that no command has: %v", stale)
	}
}
