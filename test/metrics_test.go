package test

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The controller's and a worker's Prometheus metrics, checked with the real
// promtool while a run is going.
func TestPrometheusMetrics(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("SKIPPED: promtool not found (apt-get install prometheus)")
	}
	_, url := startBroker(t, t.TempDir())
	cAddr, wAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctl := background(t, "controller", "--nats", url, "--run", "prom", "--budget", "400", "--init", "10", "--pool", "5",
		"--metrics", cAddr, "--json")
	background(t, "worker", "--nats", url, "--run", "prom", "--id", "pw", "--slots", "3", "--evaluator", "sim",
		"--sim-mean", "0.05", "--sim-fail", "0.2", "--metrics", wAddr)
	var ctlBody, wBody string
	waitFor(t, 30*time.Second, func() bool {
		ctlBody, wBody = scrape(cAddr), scrape(wAddr)
		return strings.Contains(ctlBody, `evoq_slots_live{run="prom"} 3`) && strings.Contains(wBody, "evoq_dispatch_gap_seconds_count")
	})
	for name, body := range map[string]string{"controller": ctlBody, "worker": wBody} {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on the %s: %v\n%s", name, err, out)
		}
	}
	for _, want := range []string{"evoq_queue_depth", "evoq_in_flight", "evoq_slots_busy", `evoq_evaluations_total{run="prom",status="ok"}`, "evoq_best_fitness"} {
		if !strings.Contains(ctlBody, want) {
			t.Errorf("controller metrics lack %s", want)
		}
	}
	for _, want := range []string{`evoq_evaluation_duration_seconds_bucket{run="prom",status="ok",worker="pw"`, `evoq_worker_slots{run="prom",worker="pw"} 3`, "evoq_worker_slots_busy"} {
		if !strings.Contains(wBody, want) {
			t.Errorf("worker metrics lack %s", want)
		}
	}
	if err := ctl.wait(t, time.Minute); err != nil {
		t.Fatalf("controller: %v", err)
	}
}

func scrape(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
