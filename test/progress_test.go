package test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// On a terminal (tmux) `evoq run` draws a live progress line and keeps the
// log to warnings; the summary follows on a clean line.
func TestLiveProgressLineOnTerminal(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("SKIPPED: tmux not found (apt-get install tmux)")
	}
	session := fmt.Sprintf("evoq%d", time.Now().UnixNano())
	cmd := fmt.Sprintf("%s run --dir %s --listen 127.0.0.1:0 --evaluator sim --sim-mean 0.05 --slots 2 --budget 120 --init 10 --pool 5; sleep 60",
		evoqBin, t.TempDir())
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "30", cmd).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: tmux cannot start a session here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", session).Run() })
	pane := func() string {
		out, _ := exec.Command("tmux", "capture-pane", "-p", "-t", session).Output()
		return string(out)
	}
	var live string
	waitFor(t, 30*time.Second, func() bool {
		p := pane()
		if strings.Contains(p, "slots busy") {
			live = p
		}
		return strings.Contains(p, "best of the random initial designs")
	})
	if live == "" || !strings.Contains(live, "/120 evaluations") || !strings.Contains(live, "ETA") {
		t.Fatalf("no live progress line was seen; last pane:\n%s", pane())
	}
	final := pane()
	if strings.Contains(final, "level=info") || !strings.HasPrefix(strings.TrimSpace(final), "run ") {
		t.Errorf("on a terminal the screen should hold only the summary, without info logs:\n%s", final)
	}
}

// Off a terminal, progress comes as plain periodic log lines with the rate
// and the ETA.
func TestPlainProgressLines(t *testing.T) {
	t.Parallel()
	r := evoq(t, time.Minute, "run", "--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--evaluator", "sim",
		"--sim-mean", "0.05", "--slots", "2", "--budget", "80", "--init", "10", "--pool", "5", "--progress", "300ms")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, tail(r.stderr, 2000))
	}
	n := 0
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.Contains(l, "msg=progress") && strings.Contains(l, "rate=") && strings.Contains(l, "eta=") {
			n++
		}
	}
	if n < 2 {
		t.Fatalf("%d progress lines with rate and ETA, want several:\n%s", n, tail(r.stderr, 2000))
	}
}
