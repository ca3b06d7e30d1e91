package bench

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestWaitQuantiles(t *testing.T) {
	t.Parallel()
	waits := []wait{
		{Step: 1, Ms: 2, Continue: true}, {Step: 2, Ms: 0.5, Continue: true}, {Step: 3, Ms: 40, Continue: false},
		{Step: 1, Ms: 4, Continue: false}, {Step: 27, Ms: 0.7, Continue: true}, {Step: 9, Ms: 3, Continue: true},
	}
	rung, stop, other := waitQuantiles(waits, []int64{1, 3, 9})
	for _, tc := range []struct {
		name      string
		got, want *Quantiles
	}{
		{"rung", rung, &Quantiles{N: 4, P50: 3, P99: 40, Max: 40}},
		{"stop", stop, &Quantiles{N: 2, P50: 4, P99: 40, Max: 40}},
		{"other", other, &Quantiles{N: 2, P50: 0.5, P99: 0.7, Max: 0.7}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	if r, s, o := waitQuantiles(nil, []int64{1}); r != nil || s != nil || o != nil {
		t.Errorf("no waits: %v %v %v", r, s, o)
	}
}

func TestReadWaits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := readWaits(dir); err == nil {
		t.Error("readWaits of an empty directory: no error; a run whose evaluator never started would measure nothing")
	}
	write("waits-1.jsonl", `{"design":"a","step":1,"ms":1.5,"continue":true}`+"\n"+`{"design":"a","step":3,"ms":2,"continue":false}`+"\n")
	write("waits-2.jsonl", `{"design":"b","step":1,"ms":0.25,"continue":true}`+"\n")
	write("other.txt", "not a times file\n")
	got, err := readWaits(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []wait{{"a", 1, 1.5, true}, {"a", 3, 2, false}, {"b", 1, 0.25, true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("readWaits = %+v, want %+v", got, want)
	}
	write("waits-3.jsonl", "{\"design\":\"c\",\n")
	if _, err := readWaits(dir); err == nil || !strings.Contains(err.Error(), "waits-3.jsonl:1") {
		t.Errorf("readWaits of a bad line: %v, want an error naming the file and line", err)
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"/tmp/plain", "/tmp/with space/x.py", "it's", `$HOME "quoted" \back`, ""} {
		out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh -c printf %%s %s = %q, %v; want %q", shellQuote(s), out, err, s)
		}
	}
}

// go test runs in bench/: the helper is the repository's.
func TestFindEvalHelper(t *testing.T) {
	t.Parallel()
	want, err := filepath.Abs(filepath.Join("..", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := findEvalHelper(); err != nil || got != want {
		t.Errorf("findEvalHelper = %q, %v; want %q", got, err, want)
	}
}

// The evaluator, driven by hand in persistent mode, times each report()
// from the call to the answer and writes the times when its design ends.
func TestStopLatencyScript(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("no python3: %v", err)
	}
	helper, err := findEvalHelper()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "stoplatency.py")
	if err := os.WriteFile(script, StopLatencyScript, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), python, script, helper, dir, "0", "5")
	cmd.Env = append(os.Environ(), "EVOQ_PERSISTENT=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	next := func(want string) {
		t.Helper()
		if !lines.Scan() || !strings.Contains(lines.Text(), want) {
			t.Fatalf("evaluator said %q, want a line with %s; stderr:\n%s", lines.Text(), want, stderr.String())
		}
	}
	const held = 30 * time.Millisecond
	send := func(line string) {
		if _, err := stdin.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"id": "d-1", "attempt": 1, "genome": {"x": 0.5}}`)
	next(`"step": 1`)
	time.Sleep(held) // the answer is late: the time has to show it
	send(`{"continue": true}`)
	next(`"step": 2`)
	send(`{"continue": false, "reason": "asha at rung 2"}`)
	next(`"fitness"`)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("evaluator: %v\n%s", err, stderr.String())
	}
	got, err := readWaits(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Step != 1 || !got[0].Continue || got[1].Step != 2 || got[1].Continue || got[0].Design != "d-1" {
		t.Fatalf("times %+v, want step 1 answered continue, step 2 stop, of d-1", got)
	}
	if ms := float64(held.Milliseconds()); got[0].Ms < ms || got[1].Ms >= ms {
		t.Errorf("times %v and %v ms; want the first at least %v ms, the second under", got[0].Ms, got[1].Ms, ms)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines.Text()), &line); err != nil || line["metrics"] == nil {
		t.Errorf("result line %q: want the helper's stopped result", lines.Text())
	}
}
