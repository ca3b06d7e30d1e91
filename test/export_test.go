package test

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// exportArgs are the search the export and replay tests read back.
var exportArgs = []string{"--evaluator", "sim", "--sim-mean", "0.01", "--sim-fail", "0.3",
	"--budget", "80", "--init", "10", "--pool", "5", "--run", "ex"}

// TestExportReplay runs one sim search and reads it back. The subtests run
// one after the other: each starts an embedded broker on the same store.
func TestExportReplay(t *testing.T) {
	t.Parallel()
	sum, dir := runJSON(t, 60*time.Second, exportArgs...)
	if sum.Evaluations != 80 {
		t.Fatalf("search: %d evaluations, want 80", sum.Evaluations)
	}
	t.Run("csv", func(t *testing.T) { testExportCSV(t, sum, dir) })
	t.Run("jsonl", func(t *testing.T) { testExportJSONL(t, sum, dir) })
	t.Run("replay", func(t *testing.T) { testReplay(t, sum, dir) })
}

// replayOut is the part of `evoq replay --json` the tests check.
type replayOut struct {
	Run         string         `json:"run"`
	Results     int            `json:"results"`
	Evaluations int            `json:"evaluations"`
	Duplicates  int            `json:"duplicates"`
	Counts      map[string]int `json:"counts"`
	LastSeq     uint64         `json:"last_seq"`
	PoolDigest  string         `json:"pool_digest"`
	Pool        []struct {
		DesignID string  `json:"design_id"`
		Fitness  float64 `json:"fitness"`
	} `json:"pool"`
	Malformed []uint64 `json:"malformed"`
	Integrity string   `json:"integrity"`
}

func readCSVRows(t *testing.T, out string) ([]string, []map[string]string) {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("export is not CSV: %v\n%s", err, tail(out, 2000))
	}
	var rows []map[string]string
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for i, c := range recs[0] {
			row[c] = rec[i]
		}
		rows = append(rows, row)
	}
	return recs[0], rows
}

func testExportCSV(t *testing.T, sum *runstate.Summary, dir string) {
	r := evoq(t, 30*time.Second, "export", "--dir", dir, "--format", "csv")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	header, rows := readCSVRows(t, r.stdout)
	for _, c := range []string{"seq", "design_id", "counted", "status", "fitness", "attempt", "worker", "host",
		"slot", "gpu", "start", "stop", "duration_s", "origin", "parents", "error", "layers", "lr", "epochs"} {
		if !slices.Contains(header, c) {
			t.Errorf("header lacks column %q: %v", c, header)
		}
	}
	counted, byStatus, designs := 0, map[string]int{}, map[string]bool{}
	var last uint64
	for _, row := range rows {
		seq, err := strconv.ParseUint(row["seq"], 10, 64)
		if err != nil || seq <= last {
			t.Fatalf("seq %q after %d: not increasing", row["seq"], last)
		}
		last = seq
		if row["counted"] == "true" {
			counted++
			byStatus[row["status"]]++
			if designs[row["design_id"]] {
				t.Errorf("design %s counted twice", row["design_id"])
			}
			designs[row["design_id"]] = true
		}
		if row["status"] == "ok" && (row["lr"] == "" || !strings.HasPrefix(row["layers"], "[")) {
			t.Errorf("row %s: parameters not exported: lr %q layers %q", row["seq"], row["lr"], row["layers"])
		}
		meaningful := row["status"] == "ok" || row["status"] == "stopped"
		if _, err := strconv.ParseFloat(row["fitness"], 64); meaningful != (err == nil) {
			t.Errorf("row %s: %s result with fitness %q; want a number for ok and stopped, empty otherwise", row["seq"], row["status"], row["fitness"])
		}
	}
	if counted != sum.Evaluations || byStatus["ok"] != sum.OK || byStatus["infeasible"] != sum.Infeasible {
		t.Errorf("counted rows %d (%v), summary %d evaluations (%d ok, %d infeasible)",
			counted, byStatus, sum.Evaluations, sum.OK, sum.Infeasible)
	}
	if !strings.Contains(r.stderr, "0 malformed") {
		t.Errorf("stderr lacks the malformed count: %s", r.stderr)
	}
}

func testExportJSONL(t *testing.T, sum *runstate.Summary, dir string) {
	out := t.TempDir() + "/results.jsonl"
	r := evoq(t, 30*time.Second, "export", "--dir", dir, "--format", "jsonl", "--out", out)
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(readText(t, out)), "\n")
	counted := 0
	for _, l := range lines {
		var row struct {
			schema.Result
			Seq     uint64 `json:"seq"`
			Counted bool   `json:"counted"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("line is not JSON: %v\n%s", err, l)
		}
		if row.Run != "ex" || row.Design.Genome["lr"] == nil {
			t.Fatalf("line lacks its result: %s", l)
		}
		if row.Counted {
			counted++
		}
		var fitness struct {
			Fitness *float64 `json:"fitness"`
		}
		if err := json.Unmarshal([]byte(l), &fitness); err != nil || (row.Status == schema.StatusOK) != (fitness.Fitness != nil) {
			t.Errorf("%s result with fitness %v; want a number for ok, null otherwise: %s", row.Status, fitness.Fitness, l)
		}
	}
	if counted != sum.Evaluations {
		t.Errorf("counted lines %d, want %d", counted, sum.Evaluations)
	}
}

func replayJSON(t *testing.T, want int, args ...string) replayOut {
	t.Helper()
	r := evoq(t, 30*time.Second, append([]string{"replay", "--json"}, args...)...)
	if r.code != want {
		t.Fatalf("replay %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, want, r.stdout, r.stderr)
	}
	var out replayOut
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &out); err != nil {
		t.Fatalf("replay output is not JSON: %v\n%s", err, r.stdout)
	}
	return out
}

func testReplay(t *testing.T, sum *runstate.Summary, dir string) {
	// --init, --pool and --replace come from the run's recorded state.
	full := replayJSON(t, 0, "--dir", dir)
	if full.PoolDigest != sum.PoolDigest || full.Integrity != "ok" || full.Evaluations != sum.Evaluations ||
		full.Counts["ok"] != sum.OK || len(full.Pool) != sum.PoolSize {
		t.Fatalf("replay %+v\ndoes not match the controller's summary %+v", full, sum)
	}
	if sum.BestFitness == nil || full.Pool[0].Fitness != *sum.BestFitness {
		t.Errorf("pool not best first: %+v, best %v", full.Pool, sum.BestFitness)
	}
	half := replayJSON(t, 0, "--dir", dir, "--until", strconv.FormatUint(full.LastSeq/2, 10))
	if half.Evaluations >= full.Evaluations || half.Results != int(full.LastSeq/2) || half.Integrity != "ok" {
		t.Errorf("--until %d: %d evaluations from %d results, want fewer than %d", full.LastSeq/2, half.Evaluations, half.Results, full.Evaluations)
	}
	other := replayJSON(t, 0, "--dir", dir, "--init", "10", "--pool", "3")
	if other.PoolDigest == sum.PoolDigest {
		t.Errorf("--pool 3 gave the run's pool digest %s", other.PoolDigest)
	}
}

func TestExportReplayBadInput(t *testing.T) {
	t.Parallel()
	missing := t.TempDir() + "/nope"
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"export format", []string{"export", "--format", "xml"}, 2, "--format"},
		{"export unknown flag", []string{"export", "--bogus"}, 2, "-bogus"},
		{"export two sources", []string{"export", "--dir", missing, "--nats", "nats://127.0.0.1:1"}, 2, "--dir"},
		{"replay until", []string{"replay", "--until", "yesterday"}, 2, "--until"},
		{"replay replace", []string{"replay", "--replace", "best"}, 2, "--replace"},
		{"replay pool", []string{"replay", "--pool", "0"}, 2, "--pool"},
		{"export missing store", []string{"export", "--dir", missing}, 1, missing + " does not exist"},
		{"replay missing store", []string{"replay", "--dir", missing}, 1, missing + " does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := evoq(t, 30*time.Second, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("evoq %v: exit %d, want %d naming %q\nstderr:\n%s", tc.args, r.code, tc.code, tc.want, r.stderr)
			}
		})
	}
}

// TestExportReplayDuplicateAndMalformed reads a live broker (--nats) whose
// results stream holds a duplicate result and a malformed message.
func TestExportReplayDuplicateAndMalformed(t *testing.T) {
	t.Parallel()
	sum, dir := runJSON(t, 60*time.Second, exportArgs...)
	results := readResults(t, dir, "ex") // leaves the store's broker running
	b := testutil.StartBrokerDir(t, t.TempDir())
	ctx := testutil.Context(t, 30*time.Second)
	publish := func(data []byte) {
		t.Helper()
		if _, err := b.JS.Publish(ctx, schema.ResultSubject("ex"), data); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	for i, r := range results {
		data, err := schema.EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		publish(data)
		if i == 3 {
			publish(data)                   // a duplicate
			publish([]byte("not a result")) // malformed
		}
	}
	runState, err := schema.EncodeRun(&schema.Run{V: schema.Version, Run: "ex", Phase: schema.PhaseDone, Budget: 80,
		Space: "mlp", Created: time.Now(), Updated: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := b.JS.KeyValue(ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "ex", runState); err != nil {
		t.Fatal(err)
	}
	url := b.ClientURL()

	r := evoq(t, 30*time.Second, "export", "--nats", url, "--format", "csv")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	_, rows := readCSVRows(t, r.stdout)
	counted := 0
	for _, row := range rows {
		if row["counted"] == "true" {
			counted++
		}
	}
	if len(rows) != sum.Evaluations+1 || counted != sum.Evaluations {
		t.Errorf("export: %d rows, %d counted; want %d and %d", len(rows), counted, sum.Evaluations+1, sum.Evaluations)
	}
	if !strings.Contains(r.stderr, "skipping malformed result") || !strings.Contains(r.stderr, "1 malformed results skipped") {
		t.Errorf("export stderr does not report the malformed result:\n%s", r.stderr)
	}

	rep := replayJSON(t, 1, "--nats", url, "--init", "10", "--pool", "5")
	if rep.Integrity != "failed" || len(rep.Malformed) != 1 || rep.Duplicates != 1 ||
		rep.Evaluations != sum.Evaluations || rep.PoolDigest != sum.PoolDigest {
		t.Errorf("replay: %+v\nwant failed integrity, 1 malformed, 1 duplicate, digest %s", rep, sum.PoolDigest)
	}
}

// TestExportNodeColumns: export tells the nodes apart. On a node whose
// nvidia-smi lists two GPUs, each row carries its GPU's index and UUID,
// and how the evaluator ended: exit 0 for ok, exit 3 for the design
// whose evaluator fails, SIGKILL for the one whose evaluator is killed.
func TestExportNodeColumns(t *testing.T) {
	t.Parallel()
	space := filepath.Join(t.TempDir(), "space.yaml")
	write(t, space, "params:\n  x: {type: float, min: 0, max: 1}\n")
	dir := t.TempDir()
	r := evoqEnv(t, time.Minute, []string{"PATH=" + fakeSMI(t, 2), "CUDA_VISIBLE_DEVICES="},
		"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--run", "nodes", "--gpus", "auto",
		"--config", space, "--budget", "12", "--init", "6", "--pool", "3",
		"--eval-cmd", `case "$EVOQ_DESIGN_ID" in *-5) echo "CUDA error: uncorrectable ECC error" >&2; exit 3;; *-7) kill -KILL $$;; esac; echo '{"fitness": 0.5}'`)
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	// want is what a row says of its node and its evaluator's end.
	want := func(design, gpu string) string {
		end := "exit 0 signal "
		switch {
		case strings.HasSuffix(design, "-5"):
			end = "exit 3 signal "
		case strings.HasSuffix(design, "-7"):
			end = "exit  signal SIGKILL"
		}
		return fmt.Sprintf("host %s gpu_uuid GPU-fake-%s %s", hostname(t), gpu, end)
	}

	e := evoq(t, 30*time.Second, "export", "--dir", dir, "--format", "csv")
	if e.code != 0 {
		t.Fatalf("export: exit %d\n%s", e.code, e.stderr)
	}
	header, rows := readCSVRows(t, e.stdout)
	for _, c := range []string{"host", "gpu", "gpu_uuid", "exit", "signal"} {
		if !slices.Contains(header, c) {
			t.Errorf("header lacks column %q: %v", c, header)
		}
	}
	ends := map[string]int{}
	for _, row := range rows {
		got := fmt.Sprintf("host %s gpu_uuid %s exit %s signal %s", row["host"], row["gpu_uuid"], row["exit"], row["signal"])
		if w := want(row["design_id"], row["gpu"]); got != w || (row["gpu"] != "0" && row["gpu"] != "1") {
			t.Errorf("%s (%s) on GPU %q: %s; want %s", row["design_id"], row["status"], row["gpu"], got, w)
		}
		ends[row["exit"]+row["signal"]]++
	}
	if ends["0"] == 0 || ends["3"] == 0 || ends["SIGKILL"] == 0 {
		t.Errorf("evaluator ends %v; want exit 0, exit 3 and SIGKILL each at least once", ends)
	}

	out := filepath.Join(t.TempDir(), "results.jsonl")
	if e := evoq(t, 30*time.Second, "export", "--dir", dir, "--format", "jsonl", "--out", out); e.code != 0 {
		t.Fatalf("export: exit %d\n%s", e.code, e.stderr)
	}
	lines := strings.Split(strings.TrimSpace(readText(t, out)), "\n")
	if len(lines) != len(rows) {
		t.Errorf("%d JSON lines, %d CSV rows", len(lines), len(rows))
	}
	for _, l := range lines {
		var row struct {
			DesignID string `json:"design_id"`
			Host     string `json:"host"`
			GPU      string `json:"gpu"`
			GPUUUID  string `json:"gpu_uuid"`
			Exit     *int   `json:"exit"`
			Signal   string `json:"signal"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("line is not JSON: %v\n%s", err, l)
		}
		exit := ""
		if row.Exit != nil {
			exit = strconv.Itoa(*row.Exit)
		}
		got := fmt.Sprintf("host %s gpu_uuid %s exit %s signal %s", row.Host, row.GPUUUID, exit, row.Signal)
		if w := want(row.DesignID, row.GPU); got != w {
			t.Errorf("JSON line of %s: %s; want %s", row.DesignID, got, w)
		}
	}
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}
