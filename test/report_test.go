package test

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReportInChromium runs a search with a worker joining mid-run, writes
// its report from the live broker, and opens it in headless Chromium: the
// page loads without a console message and every chart is drawn. With
// EVOQ_UPDATE_DOCS=1 the screenshot replaces docs/report.png.
func TestReportInChromium(t *testing.T) {
	t.Parallel()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("SKIPPED: chromium not found (apt-get install chromium)")
	}
	const run = "picture"
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", "400", "--init", "20", "--pool", "8", "--json")
	sim := []string{"--evaluator", "sim", "--sim-mean", "0.08", "--sim-fail", "0.25"}
	background(t, append([]string{"worker", "--nats", url, "--run", run, "--id", "w1", "--slots", "6"}, sim...)...)
	time.Sleep(1500 * time.Millisecond)
	background(t, append([]string{"worker", "--nats", url, "--run", run, "--id", "w2", "--slots", "6"}, sim...)...)
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	out := filepath.Join(t.TempDir(), "run.html")
	r := evoq(t, time.Minute, "report", "--nats", url, "--run", run, "--out", out)
	if r.code != 0 {
		t.Fatalf("report: exit %d\n%s", r.code, r.stderr)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	charts := []string{"best-evaluations", "best-time", "gantt", "utilization", "status"}
	for _, name := range charts {
		png := strings.TrimSuffix(out, ".html") + "-" + name + ".png"
		img := decodePNG(t, png)
		if w := img.Bounds().Dx(); w < 600 || img.Bounds().Dy() < 300 {
			t.Errorf("%s: %d×%d pixels, want at least 600×300", png, w, img.Bounds().Dy())
		}
		if !bytes.Contains(page, []byte(`<figure id="`+name+`">`)) {
			t.Errorf("page has no chart %s", name)
		}
	}
	if n := bytes.Count(page, []byte(`src="data:image/png;base64,`)); n != len(charts) {
		t.Errorf("page embeds %d PNGs, want %d", n, len(charts))
	}
	for _, want := range []string{"400 of 400 budget", "12 slots on 2 workers, 12 of them evaluated at least one design", "By host", "Top designs"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page lacks %q", want)
		}
	}
	if bytes.Contains(page, []byte("http://")) || bytes.Contains(page, []byte("https://")) {
		t.Error("page refers to an outside resource; it must be self-contained")
	}

	// The page as Chromium sees it once loaded.
	dom, logs := runChromium(t, chromium, "--dump-dom", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "file://"+out)
	body := regexp.MustCompile(`<body data-charts="(\d+)" data-charts-drawn="(\d+)">`).FindStringSubmatch(dom)
	if body == nil || body[1] != "5" || body[2] != "5" {
		t.Errorf("Chromium drew %v charts (want data-charts=5 data-charts-drawn=5)\n%s", body, tail(dom, 500))
	}
	if strings.Contains(dom, `<p class="broken">`) {
		t.Error("Chromium flagged a chart it could not draw")
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, ":CONSOLE") {
			t.Errorf("console message while loading the page: %s", l)
		}
	}
	shot := filepath.Join(t.TempDir(), "report.png")
	runChromium(t, chromium, "--hide-scrollbars", "--window-size=1100,3600", "--screenshot="+shot, "file://"+out)
	img := decodePNG(t, shot)
	if colours := distinctColours(img); colours < 50 {
		t.Errorf("screenshot has %d colours: the page looks blank", colours)
	}
	if os.Getenv("EVOQ_UPDATE_DOCS") == "1" {
		data, _ := os.ReadFile(shot)
		if err := os.WriteFile("../docs/report.png", data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote ../docs/report.png")
	}
}

// runChromium runs headless Chromium once and returns its standard output
// and log.
func runChromium(t *testing.T, chromium string, args ...string) (stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(chromium, append([]string{"--headless", "--no-sandbox", "--disable-gpu",
		"--user-data-dir=" + t.TempDir()}, args...)...)
	cmd.Stdout, cmd.Stderr = &o, &e
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, tail(e.String(), 3000))
		}
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("chromium %v: still running after 90 s", args)
	}
	return o.String(), e.String()
}

func decodePNG(t *testing.T, name string) image.Image {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return img
}

func distinctColours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
		}
	}
	return len(seen)
}
