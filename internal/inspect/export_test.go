package inspect

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// exportRows is one result of each status: ok and stopped with a real
// fitness, the others with the placeholder fitness evoq writes for them.
func exportRows() []exportRow {
	var rows []exportRow
	for i, st := range schema.Statuses {
		seq := uint64(i + 1)
		r := &schema.Result{V: schema.Version, Run: "ex", DesignID: schema.DesignID("ex", seq), Status: st,
			Fitness: schema.InfeasibleFitness, Worker: "w", Attempt: 1, Start: time.Unix(0, 0), Stop: time.Unix(1, 0),
			Design: schema.Design{V: schema.Version, Run: "ex", ID: schema.DesignID("ex", seq), Seq: seq,
				Genome: map[string]any{"lr": 0.1}, Origin: schema.OriginRandom, Created: time.Unix(0, 0)}}
		switch st {
		case schema.StatusOK:
			r.Fitness = -2.5
		case schema.StatusStopped: // the last fitness it reported
			r.Fitness, r.Error = 0.25, "below the median at step 9"
		}
		rows = append(rows, exportRow{seq: seq, res: r, verdict: runstate.Counted})
	}
	return rows
}

// Only an ok or a stopped result has a fitness in the export: the others
// show an empty cell in CSV and null in JSON lines, never
// InfeasibleFitness.
func TestExportFitnessOnlyWhenMeaningful(t *testing.T) {
	t.Parallel()
	want := map[string]string{"ok": "-2.5", "stopped": "0.25", "infeasible": "", "error": "", "timeout": "", "lost": ""}
	t.Run("csv", func(t *testing.T) {
		t.Parallel()
		var b bytes.Buffer
		if err := writeCSV(&b, nil, exportRows()); err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(&b).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		col := map[string]int{}
		for i, c := range recs[0] {
			col[c] = i
		}
		for _, rec := range recs[1:] {
			if st, got := rec[col["status"]], rec[col["fitness"]]; got != want[st] {
				t.Errorf("%s result: fitness %q, want %q", st, got, want[st])
			}
		}
		if len(recs) != len(schema.Statuses)+1 {
			t.Errorf("%d records, want a header and %d rows", len(recs), len(schema.Statuses))
		}
	})
	t.Run("jsonl", func(t *testing.T) {
		t.Parallel()
		var b bytes.Buffer
		if err := writeJSONL(&b, exportRows()); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		for _, l := range lines {
			var row map[string]json.RawMessage
			if err := json.Unmarshal([]byte(l), &row); err != nil {
				t.Fatalf("line is not JSON: %v\n%s", err, l)
			}
			var st string
			_ = json.Unmarshal(row["status"], &st)
			wantRaw := want[st]
			if wantRaw == "" {
				wantRaw = "null"
			}
			if got := string(row["fitness"]); got != wantRaw {
				t.Errorf("%s result: fitness %s, want %s", st, got, wantRaw)
			}
			if string(row["seq"]) == "" || string(row["counted"]) != "true" || string(row["design_id"]) == "" {
				t.Errorf("line lacks its sequence, counted flag or result: %s", l)
			}
		}
		if len(lines) != len(schema.Statuses) {
			t.Errorf("%d lines, want %d", len(lines), len(schema.Statuses))
		}
	})
}
