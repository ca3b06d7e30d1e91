package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr, token string
		want        error
		bad         bool
	}{
		{addr: "127.0.0.1:0"},
		{addr: "localhost:8080"},
		{addr: "[::1]:8080"},
		{addr: "0.0.0.0:8080", want: ErrTokenNeeded},
		{addr: ":8080", want: ErrTokenNeeded},
		{addr: "192.0.2.1:8080", want: ErrTokenNeeded},
		{addr: "0.0.0.0:8080", token: "0123456789abcdef"},
		{addr: "8080", bad: true},
	} {
		err := Config{Addr: tc.addr, Token: tc.token}.Validate()
		switch {
		case tc.bad && err == nil:
			t.Errorf("%q: no error, want one", tc.addr)
		case !tc.bad && !errors.Is(err, tc.want):
			t.Errorf("%q token %q: %v, want %v", tc.addr, tc.token, err, tc.want)
		}
	}
}

func TestListenPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Listen(Config{Addr: ln.Addr().String()}, NewHub(), func() *Model { return nil })
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("listen on a port in use: %v, want ErrAddrInUse", err)
	}
}

// Every page gets the latest snapshot; one that does not read loses the
// ones in between, never the last, and never holds up the others.
func TestHubFanOut(t *testing.T) {
	t.Parallel()
	h := NewHub()
	var chans []<-chan []byte
	for range 20 {
		ch, stop := h.Subscribe()
		defer stop()
		chans = append(chans, ch)
	}
	for i := range 100 {
		h.Publish([]byte(fmt.Sprint(i)))
	}
	for i, ch := range chans {
		if got := string(<-ch); got != "99" {
			t.Errorf("page %d got %q, want the latest, 99", i, got)
		}
	}
	late, stop := h.Subscribe()
	if got := string(<-late); got != "99" {
		t.Errorf("a page opened late got %q, want 99", got)
	}
	stop()
	if n := h.Pages(); n != 20 {
		t.Errorf("%d pages, want 20", n)
	}
}

// testModel is a model of a run of n workers of slots slots each, with
// results from each slot and slot 0 of worker w0 quarantined.
func testModel(t testing.TB, workers, slots int) *Model {
	t.Helper()
	const run = "r"
	quarantineAfter := 3
	rec := &schema.Run{Run: run, Budget: 1 << 20, Init: 10, Pool: 10, Replace: "worst", Phase: schema.PhaseRunning, QuarantineAfter: &quarantineAfter}
	m, err := NewModel(run, rec)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var seq uint64
	add := func(w string, slot int, st schema.Status, fit float64) {
		seq++
		r := &schema.Result{Run: run, DesignID: schema.DesignID(run, seq), Design: schema.Design{Run: run, ID: schema.DesignID(run, seq), Seq: seq,
			Genome: map[string]any{"x": float64(seq)}, Origin: schema.OriginRandom}, Status: st, Fitness: fit, Worker: w, Host: "h" + w, Slot: slot,
			Attempt: 1, Start: t0.Add(time.Duration(seq) * time.Millisecond), Stop: t0.Add(time.Duration(seq+5) * time.Millisecond)}
		if st == schema.StatusError {
			r.Error = "CUDA error"
		}
		m.Result(seq, r.Stop, r, nil)
	}
	var ps []schema.Presence
	var seen []time.Time
	for w := range workers {
		id := fmt.Sprintf("w%d", w)
		for s := range min(slots, 3) {
			add(id, s, schema.StatusOK, float64(seq%97)/97)
		}
		ps = append(ps, schema.Presence{Run: run, Worker: id, Host: "h" + id, Slots: slots, Busy: slots / 2, Interval: time.Second})
		seen = append(seen, t0)
	}
	for range 3 {
		add("w0", 0, schema.StatusError, 0)
	}
	m.Workers(ps, seen, t0)
	return m
}

func TestSnapshotSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		workers, slots   int
		perCell, maxRect int
	}{
		{"a cell a slot", 3, 4, 1, 12},
		{"aggregated", 100, 100, 25, MaxCells},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := testModel(t, tc.workers, tc.slots)
			v := m.Snapshot(time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC))
			s := v.Slots
			if s.Total != tc.workers*tc.slots || s.PerCell != tc.perCell {
				t.Errorf("strip: %d slots, %d a cell; want %d, %d", s.Total, s.PerCell, tc.workers*tc.slots, tc.perCell)
			}
			if s.Quarantined != 1 {
				t.Errorf("%d slots quarantined, want 1", s.Quarantined)
			}
			if n := len(s.Cells); n > tc.maxRect || n < 1 {
				t.Errorf("%d cells, want 1 to %d", n, tc.maxRect)
			}
			if n := strings.Count(s.Cells, "q"); n != 1 {
				t.Errorf("cells %q: %d quarantined, want 1", s.Cells, n)
			}
			if strings.Trim(s.Cells, "qgbi123456789") != "" {
				t.Errorf("cells %q: a character that is no state", s.Cells)
			}
			if len(v.Warnings) == 0 || !strings.Contains(v.Warnings[0], "slot 0 of worker w0 (host hw0) quarantined after 3 failures: CUDA error") {
				t.Errorf("warnings %q do not start with the quarantine", v.Warnings)
			}
			if _, err := json.Marshal(v); err != nil {
				t.Errorf("snapshot does not encode: %v", err)
			}
		})
	}
}

// The page and its events, served end to end from a model.
func TestServer(t *testing.T) {
	t.Parallel()
	m := testModel(t, 2, 4)
	h := NewHub()
	srv, err := Listen(Config{Addr: "127.0.0.1:0"}, h, func() *Model { return m })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx) }()
	base := "http://" + srv.Addr() + "/"
	for path, want := range map[string]string{"": "<title>evoq dashboard</title>", "app.js": "EventSource", "design/1": `"attempts"`} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = fmt.Fprint(&b, readAll(t, resp))
		if resp.StatusCode != 200 || !strings.Contains(b.String(), want) {
			t.Errorf("GET /%s: %s, body lacks %q", path, resp.Status, want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET /%s: Content-Security-Policy %q", path, csp)
		}
	}
	if resp, err := http.Get(base + "design/999"); err != nil || resp.StatusCode != 404 {
		t.Errorf("an unknown design: %v %v, want 404", resp, err)
	}
	data, _ := json.Marshal(m.Snapshot(time.Now()))
	h.Publish(data)
	resp, err := http.Get(base + "events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	got := ""
	for !strings.Contains(got, "event: snapshot\ndata: {") {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("events: %v after %q", err, got)
		}
		got += string(buf[:n])
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// BenchmarkSnapshot10kSlots is the cost of one snapshot, encoded, of a
// run of 10,000 slots: what the dashboard adds per second, whatever the
// number of pages.
func BenchmarkSnapshot10kSlots(b *testing.B) {
	m := testModel(b, 100, 100)
	now := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	for b.Loop() {
		if _, err := json.Marshal(m.Snapshot(now)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublish is the cost of handing one snapshot to 1 or 20 open
// pages.
func BenchmarkPublish(b *testing.B) {
	for _, pages := range []int{1, 20} {
		b.Run(fmt.Sprintf("pages=%d", pages), func(b *testing.B) {
			h := NewHub()
			for range pages {
				_, stop := h.Subscribe()
				defer stop()
			}
			data := make([]byte, 64<<10)
			for b.Loop() {
				h.Publish(data)
			}
		})
	}
}

// The model keeps the pool's designs and the last ones evaluated, not
// every design of a long run.
func TestModelBounded(t *testing.T) {
	t.Parallel()
	const run = "r"
	m, err := NewModel(run, &schema.Run{Run: run, Budget: 1 << 20, Init: 10, Pool: 5, Replace: "worst", Phase: schema.PhaseRunning})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 * 2 * keptDesigns
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= n; seq++ {
		id := schema.DesignID(run, seq)
		fit := float64(seq)
		if seq == 7 {
			fit = 1e12 // stays in the pool
		}
		r := &schema.Result{Run: run, DesignID: id, Design: schema.Design{Run: run, ID: id, Seq: seq}, Status: schema.StatusOK,
			Fitness: fit, Worker: "w", Attempt: 1, Start: t0, Stop: t0.Add(time.Second)}
		m.Result(seq, r.Stop, r, nil)
		m.Report(&schema.Report{Run: run, DesignID: id, Seq: seq, Step: 1, Fitness: fit})
	}
	if len(m.designs) > 2*(keptDesigns+5) {
		t.Errorf("%d designs kept of %d, want at most %d", len(m.designs), n, 2*(keptDesigns+5))
	}
	if len(m.curves) > 2*keptCurves {
		t.Errorf("%d curves kept, want at most %d", len(m.curves), 2*keptCurves)
	}
	for _, seq := range []uint64{7, n, n - keptDesigns + 1} {
		if _, ok := m.Design(seq); !ok {
			t.Errorf("design %d forgotten", seq)
		}
	}
	if v := m.Snapshot(t0.Add(time.Minute)); v.Evaluations != n || !strings.Contains(v.Charts["curves"], "the 40 most recent") {
		t.Errorf("snapshot: %d evaluations, curves chart %q", v.Evaluations, v.Charts["curves"][:min(200, len(v.Charts["curves"]))])
	}
}

// BenchmarkResult is the cost of one stored result to the dashboard:
// decoding it and folding it in, what the follower spends per result.
func BenchmarkResult(b *testing.B) {
	const run = "r"
	m, err := NewModel(run, &schema.Run{Run: run, Budget: 1 << 40, Init: 100, Pool: 50, Replace: "worst", Phase: schema.PhaseRunning})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	data := make([][]byte, b.N)
	for i := range data {
		seq := uint64(i + 1)
		id := schema.DesignID(run, seq)
		r := &schema.Result{Run: run, DesignID: id, Design: schema.Design{Run: run, ID: id, Seq: seq, Origin: schema.OriginRandom, Created: t0,
			Genome: map[string]any{"lr": 0.01, "batch": 32, "layers": []any{map[string]any{"units": 40, "activation": "relu"}}}},
			Status: schema.StatusOK, Fitness: float64(seq % 1000), Worker: "w1", Host: "h", Slot: int(seq % 500), Attempt: 1, Start: t0, Stop: t0.Add(time.Second)}
		if data[i], err = schema.EncodeResult(r); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		got, err := schema.DecodeResult(data[i])
		m.Result(uint64(i+1), t0, got, err)
	}
}

// A worker whose slots idle while the budget has designs left is warned of
// once it has idled IdleWarnAfter, not before, and no longer once busy.
func TestIdleWarning(t *testing.T) {
	t.Parallel()
	m := testModel(t, 2, 4)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := func(at time.Time, busy int) []string {
		m.Workers([]schema.Presence{
			{Run: "r", Worker: "w0", Host: "hw0", Slots: 4, Busy: 3, Done: 5, Interval: time.Hour, Quarantined: []int{0}},
			{Run: "r", Worker: "w1", Host: "hw1", Slots: 4, Busy: busy, Done: 5, Interval: time.Hour},
		}, []time.Time{at, at}, at)
		var out []string
		for _, w := range m.Snapshot(at).Warnings {
			if strings.Contains(w, "idle slots") {
				out = append(out, w)
			}
		}
		return out
	}
	if w := idle(t0, 1); len(w) != 0 {
		t.Errorf("warned at once: %q", w)
	}
	if w := idle(t0.Add(IdleWarnAfter/2), 2); len(w) != 0 {
		t.Errorf("warned before %s: %q", IdleWarnAfter, w)
	}
	w := idle(t0.Add(IdleWarnAfter), 1)
	if len(w) != 1 || !strings.Contains(w[0], "worker w1 has 3 idle slots while the budget has") {
		t.Errorf("after %s: %q, want worker w1's 3 idle slots (w0's quarantined slot is not idle)", IdleWarnAfter, w)
	}
	if w := idle(t0.Add(IdleWarnAfter+time.Second), 4); len(w) != 0 {
		t.Errorf("warned of a worker busy again: %q", w)
	}
}
