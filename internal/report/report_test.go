package report

import (
	"bytes"
	"image/png"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func result(seq uint64, worker string, slot int, from, to float64, st schema.Status, fit float64) Entry {
	return Entry{Seq: seq, Result: &schema.Result{Run: "r", DesignID: schema.DesignID("r", seq),
		Design: schema.Design{Run: "r", ID: schema.DesignID("r", seq), Seq: seq, Origin: schema.OriginRandom, Genome: map[string]any{"x": seq}},
		Status: st, Fitness: fit, Worker: worker, Slot: slot, Start: at(from), Stop: at(to)}}
}

// sample: three designs on two slots of w1, design 1 evaluated a second time
// on w2, and a ghost worker whose one slot never gets a design.
func sample() Input {
	return Input{RunID: "r", Run: &schema.Run{Run: "r", Phase: schema.PhaseDone, Budget: 3, Init: 2},
		Results: []Entry{
			result(1, "w1", 0, 0, 2, schema.StatusOK, 0.5),
			result(2, "w1", 1, 0, 4, schema.StatusOK, 0.9),
			result(1, "w2", 0, 1, 3, schema.StatusOK, 0.7), // a duplicate: not counted
			result(3, "w1", 0, 2, 4, schema.StatusInfeasible, 0),
		},
		Workers:   []Worker{{ID: "ghost", Slots: 1, Started: at(0), Heartbeat: at(4)}},
		Generated: at(5),
	}
}

func TestAnalyze(t *testing.T) {
	a := Analyze(sample())
	if a.Evaluations != 3 || a.Duplicates != 1 || a.Counts[schema.StatusOK] != 2 || a.Counts[schema.StatusInfeasible] != 1 {
		t.Errorf("evaluations %d duplicates %d counts %v; want 3, 1, ok 2 infeasible 1", a.Evaluations, a.Duplicates, a.Counts)
	}
	if a.Best == nil || *a.Best != 0.9 || a.BestID != "r-2" {
		t.Errorf("best %v %s, want 0.9 r-2", a.Best, a.BestID)
	}
	if a.Slots != 4 || a.SlotsUsed != 3 || a.Workers != 3 {
		t.Errorf("slots %d used %d workers %d; want 4, 3, 3", a.Slots, a.SlotsUsed, a.Workers)
	}
	// Busy 2+4+2+2 = 10 slot-seconds; live w1/0 4 + w1/1 4 + w2/0 2 + ghost 4 = 14.
	if want := 10.0 / 14; math.Abs(a.Utilization-want) > 1e-9 {
		t.Errorf("utilization %v, want %v", a.Utilization, want)
	}
	if a.spanSeconds != 4 || a.Rate != 0.75 {
		t.Errorf("span %v rate %v, want 4 s and 0.75/s", a.spanSeconds, a.Rate)
	}
	wantTime := []point{{2, 0.5}, {4, 0.9}, {4, 0.9}}
	if len(a.bestByTime) != len(wantTime) {
		t.Fatalf("best by time %v, want %v", a.bestByTime, wantTime)
	}
	for i := range wantTime {
		if a.bestByTime[i] != wantTime[i] {
			t.Errorf("best by time %v, want %v", a.bestByTime, wantTime)
		}
	}
	if len(a.Top) != 2 || a.Top[0].ID != "r-2" || a.Top[1].ID != "r-1" || a.Top[1].Fitness != 0.5 || a.Top[0].Genome != "x=2" {
		t.Errorf("top %+v, want r-2 then r-1 (its first result, 0.5)", a.Top)
	}
	// The time-binned busy slots average to the busy slot-time over the span.
	var sum float64
	for _, p := range a.busy {
		sum += p.y
	}
	if got := sum / occupancyBins * a.spanSeconds; math.Abs(got-10) > 1e-6 {
		t.Errorf("binned busy slot-time %v, want 10", got)
	}
}

func TestChartsAndPage(t *testing.T) {
	for name, in := range map[string]Input{
		"run":   sample(),
		"empty": {RunID: "<b>new</b>", Generated: t0},
	} {
		t.Run(name, func(t *testing.T) {
			a := Analyze(in)
			charts, err := a.Charts()
			if err != nil {
				t.Fatal(err)
			}
			if len(charts) != 5 {
				t.Fatalf("%d charts, want 5", len(charts))
			}
			for _, c := range charts {
				img, err := png.Decode(bytes.NewReader(c.PNG))
				if err != nil {
					t.Fatalf("chart %s: %v", c.Name, err)
				}
				if img.Bounds().Dx() != c.Width || img.Bounds().Dy() != c.Height || c.Width < 600 {
					t.Errorf("chart %s: %v, recorded %d×%d", c.Name, img.Bounds(), c.Width, c.Height)
				}
			}
			var page bytes.Buffer
			if err := WriteHTML(&page, a, charts, t0); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(page.String(), "data:image/png;base64,"); n != 5 {
				t.Errorf("page embeds %d charts, want 5", n)
			}
			if strings.Contains(page.String(), "<b>new</b>") {
				t.Error("run ID not escaped")
			}
		})
	}
}

func TestGanttScalesToManySlots(t *testing.T) {
	in := Input{RunID: "r", Run: &schema.Run{Run: "r", Budget: 1}, Generated: t0}
	for w := range 20 {
		in.Workers = append(in.Workers, Worker{ID: "w" + string(rune('a'+w)), Slots: 500, Started: at(0), Heartbeat: at(10)})
	}
	in.Results = append(in.Results, result(1, "wa", 0, 0, 5, schema.StatusOK, 1))
	a := Analyze(in)
	c, err := a.ganttChart()
	if err != nil {
		t.Fatal(err)
	}
	if a.Slots != 10000 || !strings.Contains(c.Caption, "9999 slots never got a design") ||
		!strings.Contains(c.Caption, "each row aggregates 34 consecutive slots") {
		t.Errorf("slots %d, caption %q", a.Slots, c.Caption)
	}
	if c.Height > 18*chartDPI {
		t.Errorf("Gantt chart %d pixels high for 10,000 slots, want at most %d", c.Height, 18*chartDPI)
	}
}

// onHost puts a sample result on a host and GPU.
func onHost(e Entry, host, gpu, uuid string) Entry {
	e.Result.Host, e.Result.GPU, e.Result.GPUUUID = host, gpu, uuid
	return e
}

// hostSample: node-a evaluates well on two GPUs (two workers share GPU 0,
// known by index only); node-b fails its designs, once on a design that
// node-a then finishes (a duplicate for the counting rule, still node-b's
// failure); one design is lost; a foreign result is no part of the run.
func hostSample() Input {
	foreign := result(9, "w9", 0, 0, 1, schema.StatusError, schema.InfeasibleFitness)
	foreign.Result.Run, foreign.Result.Design.Run = "other", "other"
	foreign.Result.DesignID = schema.DesignID("other", 9)
	foreign.Result.Design.ID = foreign.Result.DesignID
	lost := result(6, "", 0, 0, 0, schema.StatusLost, schema.InfeasibleFitness)
	lost.Result.Start, lost.Result.Stop = time.Time{}, time.Time{}
	return Input{RunID: "r", Run: &schema.Run{Run: "r", Phase: schema.PhaseDone, Budget: 6, Init: 2},
		Results: []Entry{
			onHost(result(1, "b1", 0, 0, 1, schema.StatusError, schema.InfeasibleFitness), "node-b", "0", "GPU-b0"),
			onHost(result(1, "a1", 0, 0, 2, schema.StatusOK, 0.5), "node-a", "0", ""),
			onHost(result(2, "a2", 0, 0, 2, schema.StatusOK, 0.6), "node-a", "0", ""),
			onHost(result(3, "a1", 1, 0, 2, schema.StatusInfeasible, schema.InfeasibleFitness), "node-a", "1", ""),
			onHost(result(4, "b1", 0, 1, 2, schema.StatusTimeout, schema.InfeasibleFitness), "node-b", "0", "GPU-b0"),
			onHost(result(5, "b1", 0, 2, 3, schema.StatusOK, 0.7), "node-b", "0", "GPU-b0"),
			lost,
			onHost(foreign, "node-x", "0", ""),
		},
		Generated: at(5),
	}
}

func TestHostBreakdown(t *testing.T) {
	t.Parallel()
	a := Analyze(hostSample())
	type row struct {
		name                            string
		workers, gpus, results          int
		ok, infeasible, errs, tmo, lost int
	}
	var got []row
	for _, h := range a.Hosts {
		c := h.Counts
		got = append(got, row{h.Name, h.Workers, h.GPUs, h.Results,
			c[schema.StatusOK], c[schema.StatusInfeasible], c[schema.StatusError], c[schema.StatusTimeout], c[schema.StatusLost]})
	}
	want := []row{
		{"node-b", 1, 1, 3, 1, 0, 1, 1, 0}, // 2 of 3 failed: first
		{"", 0, 0, 1, 0, 0, 0, 0, 1},       // lost: no failure of a host
		{"node-a", 2, 2, 3, 2, 1, 0, 0, 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hosts\n got %+v\nwant %+v", got, want)
	}
	if f := a.Hosts[0].Failed(); math.Abs(f-2.0/3) > 1e-9 {
		t.Errorf("node-b failed %v, want 2/3", f)
	}

	var page bytes.Buffer
	if err := WriteHTML(&page, a, nil, t0); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	b, none, aa := strings.Index(html, "<code>node-b</code>"), strings.Index(html, "<code>none (lost designs)</code>"), strings.Index(html, "<code>node-a</code>")
	if b < 0 || none < b || aa < none || strings.Contains(html, "node-x") {
		t.Errorf("host rows at %d, %d, %d (node-x: %v); want node-b, lost, node-a in that order, no foreign host",
			b, none, aa, strings.Contains(html, "node-x"))
	}
	// node-b's bar: a third ok, a third error, a third timeout.
	for _, seg := range []string{`title="ok: 1"`, `title="error: 1"`, `title="timeout: 1"`, "width: 33.333%"} {
		if !strings.Contains(html[b:none], seg) {
			t.Errorf("node-b's row lacks %s:\n%s", seg, html[b:none])
		}
	}
	if !strings.Contains(html[b:none], "66.7%") {
		t.Errorf("node-b's row lacks its failed share 66.7%%:\n%s", html[b:none])
	}
}

// A status the report does not know (written by a later evoq) gets a
// column of its own rather than vanishing from the host table.
func TestHostStatusesKeepUnknown(t *testing.T) {
	t.Parallel()
	hosts := []Host{{Name: "n", Results: 2, Counts: map[schema.Status]int{schema.StatusOK: 1, "retried": 1}}}
	cols := hostStatuses(hosts)
	if !slices.Equal(cols, append(append([]schema.Status(nil), statusOrder...), "retried")) {
		t.Errorf("columns %v", cols)
	}
	if rows := hostRows(hosts, cols); len(rows) != 1 || rows[0].Counts[len(cols)-1] != 1 || len(rows[0].Segments) != 2 {
		t.Errorf("rows %+v", rows)
	}
}

// A slot that failed its designs in a row while another succeeded is
// marked quarantined from the failure that quarantined it, and the
// retried attempts count as the run records its rules.
func TestGanttMarksQuarantine(t *testing.T) {
	in := Input{RunID: "r", Run: &schema.Run{Run: "r", Phase: schema.PhaseDone, Budget: 4, Init: 2,
		ErrorRetries: new(1), QuarantineAfter: new(3)}, Generated: at(10)}
	in.Results = append(in.Results,
		result(1, "good", 0, 0, 1, schema.StatusOK, 0.5),
		result(2, "bad", 0, 0, 0.1, schema.StatusError, 0),
		result(3, "bad", 0, 0.1, 0.2, schema.StatusError, 0),
		result(4, "bad", 0, 0.2, 0.3, schema.StatusError, 0),
		result(2, "good", 0, 1, 2, schema.StatusOK, 0.6),
		result(3, "good", 0, 2, 3, schema.StatusOK, 0.7),
		result(4, "good", 0, 3, 4, schema.StatusOK, 0.8))
	for _, e := range in.Results {
		e.Result.Design.V, e.Result.Design.Created = schema.Version, t0 // a design that validates: retried
	}
	a := Analyze(in)
	if a.Quarantined != 1 || a.Retried != 3 || a.Evaluations != 4 || a.Counts[schema.StatusOK] != 4 {
		t.Errorf("quarantined %d, retried %d, evaluations %d, ok %d; want 1, 3, 4, 4", a.Quarantined, a.Retried, a.Evaluations, a.Counts[schema.StatusOK])
	}
	for _, r := range a.rows {
		if q := !math.IsNaN(r.quarantined); q != (r.key.worker == "bad") || (q && math.Abs(r.quarantined-0.3) > 1e-9) {
			t.Errorf("slot %s/%d quarantined at %v; want bad/0 only, at its third failure (0.3 s)", r.key.worker, r.key.slot, r.quarantined)
		}
	}
	c, err := a.ganttChart()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Caption, "1 slots quarantined") {
		t.Errorf("caption %q does not mention the quarantined slot", c.Caption)
	}
}

// TestGanttHeat checks the aggregated Gantt chart's cells: the busy share
// of the group's live time in each bin.
func TestGanttHeat(t *testing.T) {
	rows := []slotRow{
		{from: 0, to: 10, spans: []span{{start: 0, stop: 5}}},
		{from: 0, to: 10, spans: []span{{start: 0, stop: 2.5}, {start: 7.5, stop: 10}}},
		{from: 5, to: 10}, // a second group: alive from 5 s only, never busy
	}
	h := heat(rows, 2, 2, 10)
	want := [][]float64{{(5 + 2.5) / 10, 2.5 / 10}, {math.NaN(), 0}}
	if h.groups != 2 || len(h.busy) != 2 {
		t.Fatalf("groups %d, %v", h.groups, h.busy)
	}
	for i := range want {
		for j := range want[i] {
			got, w := h.busy[i][j], want[i][j]
			if math.IsNaN(w) != math.IsNaN(got) || (!math.IsNaN(w) && math.Abs(got-w) > 1e-12) {
				t.Errorf("cell %d,%d = %v, want %v", i, j, got, w)
			}
		}
	}
	if c := blend(idleColor, statusColors[schema.StatusOK], 1); c != statusColors[schema.StatusOK] {
		t.Errorf("blend at 1 = %v", c)
	}
}
