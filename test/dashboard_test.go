package test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeLoopbackAddr is an address on 127.0.0.1 that nothing listens on
// now, for a dashboard that must come back on the same port.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dashboardURL waits for p to say where its dashboard is.
func dashboardURL(t *testing.T, p *proc) string {
	t.Helper()
	line := waitLine(t, p, time.Minute, "dashboard", "http://127.0.0.1:")
	u := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(line)
	if u == "" {
		t.Fatalf("no dashboard address in %q", line)
	}
	return u
}

// artefact keeps data as a test artefact: under $EVOQ_TEST_ARTEFACTS,
// else the system's temporary directory, named in the test's log.
func artefact(t *testing.T, name string, data []byte) string {
	t.Helper()
	dir := os.Getenv("EVOQ_TEST_ARTEFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "evoq-test-artefacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("artefact: %s", path)
	return path
}

// TestDashboardInChromium opens the live dashboard of a controller in
// headless Chromium while a healthy worker and one with a broken GPU run:
// the page loads, its evaluation count rises, the broken slot shows
// quarantined (in the strip and the warnings), and no request leaves for
// another origin. The controller is then killed: the page says its
// process is gone; a controller restarted on the same address takes the
// page back, and the count rises past where it was. With
// EVOQ_UPDATE_DOCS=1 the screenshot replaces docs/dashboard.png.
func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("SKIPPED: chromium not found (apt-get install chromium)")
	}
	const run = "watched"
	_, url := startBroker(t, t.TempDir())
	addr := freeLoopbackAddr(t)
	ctlArgs := []string{"controller", "--nats", url, "--run", run, "--budget", "3000", "--init", "20", "--pool", "10",
		"--wait-slots", "5", "--dashboard", addr, "--json"}
	ctl := background(t, ctlArgs...)
	background(t, "worker", "--nats", url, "--run", run, "--id", "healthy", "--gpus", "none", "--slots", "4",
		"--evaluator", "sim", "--sim-mean", "0.2")
	background(t, "worker", "--nats", url, "--run", run, "--id", "broken", "--gpus", "3", "--eval-cmd", brokenGPU)
	page := dashboardURL(t, ctl)

	b := startCDP(t, chromium)
	s := b.page()
	b.call(s, "Page.navigate", map[string]any{"url": page}, nil)
	evals := func() int {
		n, _ := strconv.Atoi(b.eval(s, `document.body.dataset.evaluations || ""`))
		return n
	}
	show := func() string {
		return "page: " + tail(b.eval(s, `document.body.innerText`), 2000) + "\ncontroller:\n" + tail(ctl.stderr.String(), 2000)
	}
	waitShowing(t, 2*time.Minute, func() bool { return evals() > 0 }, show)
	first := evals()
	waitShowing(t, 2*time.Minute, func() bool { return evals() > first }, show)
	waitShowing(t, 2*time.Minute, func() bool {
		return b.eval(s, `document.body.dataset.quarantined`) == "1" &&
			strings.Contains(b.eval(s, `document.getElementById("warnings").innerText`), "slot 0 of worker broken")
	}, show)
	if n := b.eval(s, `document.querySelectorAll('#strip rect[data-state="quarantined"]').length`); n != "1" {
		t.Errorf("the slot strip has %s quarantined cells, want 1", n)
	}
	for _, chart := range []string{"best-evaluations", "best-time"} {
		if b.eval(s, `!!document.querySelector("#chart-`+chart+` svg polyline")`) != "true" {
			t.Errorf("chart %s has no line", chart)
		}
	}
	// A design's row opens its genome and attempts.
	b.eval(s, `document.querySelector("#pool tbody a").click()`)
	waitShowing(t, time.Minute, func() bool {
		return strings.Contains(b.eval(s, `document.getElementById("design-body").textContent`), `"attempts"`)
	}, show)

	var shot struct {
		Data string `json:"data"`
	}
	b.call(s, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatal(err)
	}
	path := artefact(t, "dashboard.png", png)
	if colours := distinctColours(decodePNG(t, path)); colours < 20 {
		t.Errorf("screenshot has %d colours: the page looks blank", colours)
	}
	if os.Getenv("EVOQ_UPDATE_DOCS") == "1" {
		if err := os.WriteFile("../docs/dashboard.png", png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote ../docs/dashboard.png")
	}

	// The controller dies: the page says so, and a new one on the same
	// address takes it back.
	if err := ctl.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = ctl.wait(t, 30*time.Second)
	before := evals()
	waitShowing(t, time.Minute, func() bool {
		return strings.Contains(b.eval(s, `document.getElementById("conn").className`), "lost")
	}, show)
	ctlArgs[slices.Index(ctlArgs, "--wait-slots")+1] = "4"
	ctl = background(t, ctlArgs...)
	waitShowing(t, 2*time.Minute, func() bool {
		return !strings.Contains(b.eval(s, `document.getElementById("conn").className`), "lost") && evals() > before
	}, show)

	origin := strings.TrimSuffix(page, "/")
	for _, e := range b.eventsOf("Network.requestWillBeSent") {
		var p struct {
			Request struct {
				URL string `json:"url"`
			} `json:"request"`
		}
		_ = json.Unmarshal(e.Params, &p)
		u := p.Request.URL
		if u != origin && !strings.HasPrefix(u, origin+"/") && !strings.HasPrefix(u, "data:") && u != "about:blank" {
			t.Errorf("the page requested %s, outside the dashboard's origin %s", u, origin)
		}
	}
	if n := len(b.eventsOf("Network.requestWillBeSent")); n < 3 {
		t.Errorf("saw %d requests; the DevTools events are not arriving", n)
	}
	for _, e := range b.eventsOf("Runtime.exceptionThrown") {
		t.Errorf("script error on the page: %s", e.Params)
	}
}

// sseSnapshot is the part of a dashboard snapshot the tests read.
type sseSnapshot struct {
	Evaluations int               `json:"evaluations"`
	Results     int               `json:"results"`
	Phase       string            `json:"phase"`
	Controller  string            `json:"controller"`
	Warnings    []string          `json:"warnings"`
	Charts      map[string]string `json:"charts"`
	Hypervolume *float64          `json:"hypervolume"`
	Front       []struct {
		ID string `json:"id"`
	} `json:"front"`
}

// followSSE reads a dashboard's snapshots as a page does, sending each
// to the returned channel until the stream ends (then it is closed).
func followSSE(t *testing.T, url string) <-chan sseSnapshot {
	t.Helper()
	resp, err := http.Get(url + "events")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %sevents: %s, %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	ch := make(chan sseSnapshot, 1024)
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: {")
			if !ok {
				continue
			}
			var v sseSnapshot
			if json.Unmarshal([]byte("{"+data), &v) == nil {
				ch <- v
			}
		}
	}()
	return ch
}

// nextSnapshot waits for a snapshot for which ok holds.
func nextSnapshot(t *testing.T, ch <-chan sseSnapshot, limit time.Duration, what string, ok func(sseSnapshot) bool) sseSnapshot {
	t.Helper()
	deadline := time.After(limit)
	var last sseSnapshot
	for {
		select {
		case v, open := <-ch:
			if !open {
				t.Fatalf("the dashboard's stream ended before %s; last snapshot %+v", what, last)
			}
			if last = v; ok(v) {
				return v
			}
		case <-deadline:
			t.Fatalf("no snapshot within %s with %s; last %+v", limit, what, last)
		}
	}
}

// TestDashboardFollowsAcrossRestart serves the dashboard from `evoq
// dashboard` on the broker while the run's controller is killed and
// started again: the snapshots say the controller is gone while it is,
// and go on counting after the restart, to the run's end.
func TestDashboardFollowsAcrossRestart(t *testing.T) {
	t.Parallel()
	const run = "followed"
	_, url := startBroker(t, t.TempDir())
	ctlArgs := []string{"controller", "--nats", url, "--run", run, "--budget", "400", "--init", "20", "--pool", "10", "--json"}
	ctl := background(t, ctlArgs...)
	background(t, "worker", "--nats", url, "--run", run, "--slots", "4", "--evaluator", "sim", "--sim-mean", "0.1")
	waitLine(t, ctl, time.Minute, "worker joined")
	dash := background(t, "dashboard", "--nats", url, "--run", run, "--dashboard", "127.0.0.1:0")
	snaps := followSSE(t, dashboardURL(t, dash))
	live := nextSnapshot(t, snaps, time.Minute, "evaluations and a live controller", func(v sseSnapshot) bool {
		return v.Evaluations > 0 && strings.HasPrefix(v.Controller, "controller ")
	})
	if err := ctl.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = ctl.wait(t, 30*time.Second)
	gone := nextSnapshot(t, snaps, time.Minute, "the controller gone", func(v sseSnapshot) bool {
		return strings.Contains(v.Controller, "is gone") && len(v.Warnings) > 0 && strings.Contains(v.Warnings[0], "is gone")
	})
	if gone.Evaluations < live.Evaluations {
		t.Errorf("the count went back from %d to %d", live.Evaluations, gone.Evaluations)
	}
	ctl = background(t, ctlArgs...)
	nextSnapshot(t, snaps, 2*time.Minute, "the run done at its budget", func(v sseSnapshot) bool {
		return v.Phase == "done" && v.Evaluations == 400
	})
	if strings.Contains(dash.stderr.String(), "level=error") {
		t.Errorf("evoq dashboard logged an error:\n%s", tail(dash.stderr.String(), 3000))
	}
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("restarted controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
}

// TestDashboardWithReaderCredential serves the dashboard of a run on a
// broker that checks its clients, with the reader's connect file: the
// reader may follow the run, and its snapshots count to the run's end.
func TestDashboardWithReaderCredential(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfPath := filepath.Join(dir, "run.json")
	ctl := background(t, "controller", "--dir", filepath.Join(dir, "store"), "--listen", "0.0.0.0:0", "--connect-file", cfPath,
		"--run", "guarded", "--budget", "150", "--init", "10", "--pool", "5", "--json")
	waitConnectFile(t, cfPath, ctl)
	reader := filepath.Join(dir, "run-reader.json")
	waitConnectFile(t, reader, ctl)
	background(t, "worker", "--connect", cfPath, "--slots", "3", "--evaluator", "sim", "--sim-mean", "0.05")
	// The connect files come before the run's record; like every reader,
	// evoq dashboard needs the run to be there.
	waitLine(t, ctl, time.Minute, "work queue ready")
	dash := background(t, "dashboard", "--connect", reader, "--dashboard", "127.0.0.1:0")
	snaps := followSSE(t, dashboardURL(t, dash))
	// The controller's embedded broker goes with it at the run's end, so
	// the count, not the phase, is what the reader is sure to see.
	nextSnapshot(t, snaps, 2*time.Minute, "the run's whole budget counted", func(v sseSnapshot) bool {
		return v.Evaluations == 150
	})
	if strings.Contains(dash.stderr.String(), "ermission") {
		t.Errorf("the reader's dashboard met a permissions violation:\n%s", tail(dash.stderr.String(), 3000))
	}
}

// TestDashboardMisconfigured: a dashboard other hosts could reach without
// a token is refused, naming the flag; one on a port in use is refused,
// saying so; a page without the token is turned away.
func TestDashboardMisconfigured(t *testing.T) {
	t.Parallel()
	r := evoq(t, 30*time.Second, "controller", "--dir", t.TempDir(), "--budget", "10", "--dashboard", "0.0.0.0:0")
	if r.code != 2 || !strings.Contains(r.stderr, "--dashboard 0.0.0.0:0 is not a loopback address") || !strings.Contains(r.stderr, "--dashboard-token-file") {
		t.Errorf("controller --dashboard 0.0.0.0:0 without a token: exit %d\n%s", r.code, r.stderr)
	}
	r = evoq(t, 30*time.Second, "run", "--dir", t.TempDir(), "--budget", "10", "--dashboard-token-file", filepath.Join(t.TempDir(), "none"), "--dashboard", "127.0.0.1:0")
	if r.code != 2 || !strings.Contains(r.stderr, "--dashboard-token-file") {
		t.Errorf("run with a missing token file: exit %d\n%s", r.code, r.stderr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r = evoq(t, time.Minute, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--budget", "10", "--init", "5", "--pool", "3", "--slots", "1", "--evaluator", "noop", "--dashboard", ln.Addr().String())
	if r.code != 2 || !strings.Contains(r.stderr, "--dashboard "+ln.Addr().String()) || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("run --dashboard on a port in use: exit %d\n%s", r.code, tail(r.stderr, 2000))
	}

	// With a token, on every interface: a page without it is refused,
	// one with it served.
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", "tok", "--budget", "10000", "--dashboard", "0.0.0.0:0", "--dashboard-token-file", token)
	line := waitLine(t, ctl, time.Minute, "dashboard of run tok at http://")
	port := regexp.MustCompile(`:(\d+)/`).FindStringSubmatch(line)
	if port == nil {
		t.Fatalf("no port in %q", line)
	}
	base := "http://127.0.0.1:" + port[1] + "/"
	for _, tc := range []struct {
		url  string
		want int
	}{{base, http.StatusUnauthorized}, {base + "events", http.StatusUnauthorized}, {base + "?token=wrong", http.StatusUnauthorized},
		{base + "?token=0123456789abcdef0123", http.StatusOK}} {
		resp, err := http.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s: %s, want %d", tc.url, resp.Status, tc.want)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"?token=0123456789abcdef0123", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST to the dashboard: %v %v, want 405: it is read-only", resp, err)
	}
}

// TestDashboardFrontAndCurves: a run of two objectives shows its front
// and hypervolume; a run with early stopping its learning curves, stopped
// ones marked.
func TestDashboardFrontAndCurves(t *testing.T) {
	t.Parallel()
	zdt := background(t, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--evaluator", "zdt1", "--budget", "1000000", "--slots", "2",
		"--dashboard", "127.0.0.1:0")
	snaps := followSSE(t, dashboardURL(t, zdt))
	nextSnapshot(t, snaps, 2*time.Minute, "a front of several designs and its hypervolume", func(v sseSnapshot) bool {
		return v.Hypervolume != nil && *v.Hypervolume > 0 && len(v.Front) > 3 &&
			strings.Count(v.Charts["front"], "<circle") == len(v.Front) && strings.Contains(v.Charts["hypervolume"], "<polyline")
	})
	asha := background(t, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--evaluator", "sim", "--sim-curve", "--sim-mean", "0.2",
		"--early-stop", "asha", "--budget", "1000000", "--init", "10", "--pool", "5", "--slots", "4", "--dashboard", "127.0.0.1:0")
	snaps = followSSE(t, dashboardURL(t, asha))
	nextSnapshot(t, snaps, 2*time.Minute, "learning curves with a stopped one", func(v sseSnapshot) bool {
		c := v.Charts["curves"]
		return strings.Count(c, "<polyline") > 5 && strings.Contains(c, "stroke-dasharray") && strings.Contains(c, "<circle")
	})
}

// TestDashboardResume: a run stopped and continued with --resume
// --dashboard counts, on its page, the evaluations of before the stop (the
// controller hands its dashboard the results it replays) and those after.
func TestDashboardResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--run", "again", "--budget", "100000", "--init", "10", "--pool", "5",
		"--slots", "2", "--evaluator", "sim", "--sim-mean", "0.02"}
	first := background(t, args...)
	waitLine(t, first, time.Minute, "msg=progress")
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = first.wait(t, time.Minute)
	m := regexp.MustCompile(`interrupted after (\d+) of`).FindStringSubmatch(first.stderr.String())
	if m == nil {
		t.Fatalf("the first run did not say how far it got:\n%s", tail(first.stderr.String(), 3000))
	}
	before, _ := strconv.Atoi(m[1])
	second := background(t, append(args, "--resume", "--dashboard", "127.0.0.1:0")...)
	snaps := followSSE(t, dashboardURL(t, second))
	// Every result of this run counts (sim, no failures), so the page's
	// count is the stream's: the replayed results are on the page too.
	nextSnapshot(t, snaps, 2*time.Minute, "the evaluations of before the stop and more, every stored result counted", func(v sseSnapshot) bool {
		return v.Evaluations > before && v.Evaluations == v.Results
	})
}
