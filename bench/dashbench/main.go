// dashbench runs one 10,000-slot sim run (broker, controller and workers
// as separate evoq processes) with the controller's dashboard off, or on
// with N pages following its events, and prints the controller's CPU per
// result and the run's util_steady and gap p99.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	evoq := flag.String("evoq", "./evoq", "")
	pages := flag.Int("pages", -1, "-1: no dashboard; else pages open")
	budget := flag.Int("budget", 30000, "")
	procs := flag.Int("procs", 20, "")
	slots := flag.Int("slots", 10000, "")
	mean := flag.String("sim-mean", "2", "")
	sigma := flag.String("sim-sigma", "0.8", "")
	addr := flag.String("addr", "127.0.0.1:18765", "")
	flag.Parse()
	dir, _ := os.MkdirTemp("", "dashbench")
	defer os.RemoveAll(dir)
	br := exec.Command(*evoq, "broker", "--dir", filepath.Join(dir, "store"), "--listen", "127.0.0.1:0")
	out, _ := br.StdoutPipe()
	br.Stderr = io.Discard
	must(br.Start())
	defer func() { br.Process.Signal(syscall.SIGTERM); br.Wait() }()
	url, err := bufio.NewReader(out).ReadString('\n')
	must(err)
	url = strings.TrimSpace(url)
	const run = "bench"
	var ws []*exec.Cmd
	for i := range *procs {
		w := exec.Command(*evoq, "worker", "--nats", url, "--run", run, "--id", fmt.Sprintf("w%d", i), "--gpus", "none",
			"--slots", fmt.Sprint(*slots / *procs), "--evaluator", "sim", "--sim-mean", *mean, "--sim-sigma", *sigma, "--sim-fail", "0.3",
			"--log-level", "warn")
		w.Stdout, w.Stderr = io.Discard, io.Discard
		must(w.Start())
		ws = append(ws, w)
	}
	defer func() {
		for _, w := range ws {
			w.Process.Kill()
			w.Wait()
		}
	}()
	args := []string{"controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(*budget), "--init", "100", "--pool", "50",
		"--wait-slots", fmt.Sprint(*slots), "--expect-slots", fmt.Sprint(*slots), "--json", "--log-level", "warn"}
	if *pages >= 0 {
		args = append(args, "--dashboard", *addr)
	}
	ctl := exec.Command(*evoq, args...)
	var stdout strings.Builder
	ctl.Stdout = &stdout
	errPipe, _ := ctl.StderrPipe()
	must(ctl.Start())
	var got atomic.Int64
	var snaps atomic.Int64
	var wg sync.WaitGroup
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "dashboard of run") {
				for range *pages {
					wg.Add(1)
					go func() {
						defer wg.Done()
						resp, err := http.Get("http://" + *addr + "/events")
						if err != nil {
							fmt.Fprintln(os.Stderr, "page:", err)
							return
						}
						defer resp.Body.Close()
						r := bufio.NewReaderSize(resp.Body, 1<<20)
						for {
							line, err := r.ReadString('\n')
							got.Add(int64(len(line)))
							if strings.HasPrefix(line, "event: snapshot") {
								snaps.Add(1)
							}
							if err != nil {
								return
							}
						}
					}()
				}
			}
		}
	}()
	start := time.Now()
	err = ctl.Wait()
	wall := time.Since(start)
	ru := ctl.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var s struct {
		Evaluations int     `json:"evaluations"`
		Util        float64 `json:"util_steady"`
		GapP99      float64 `json:"gap_p99_ms"`
		Slots       int     `json:"slots"`
		Rate        float64 `json:"evals_per_s"`
	}
	if len(lines) > 0 {
		json.Unmarshal([]byte(lines[len(lines)-1]), &s)
	}
	mode := "off"
	if *pages >= 0 {
		mode = fmt.Sprintf("%d pages", *pages)
	}
	fmt.Printf("dashboard=%-9s exit=%v evaluations=%d slots=%d util_steady=%.4f gap_p99_ms=%.1f evals_per_s=%.0f wall_s=%.1f controller_cpu_s=%.2f cpu_per_result_us=%.1f snapshots_to_pages=%d bytes_to_pages=%d\n",
		mode, err, s.Evaluations, s.Slots, s.Util, s.GapP99, s.Rate, wall.Seconds(), cpu.Seconds(), float64(cpu.Microseconds())/float64(max(s.Evaluations, 1)), snaps.Load(), got.Load())
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
