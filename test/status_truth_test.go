package test

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

// statusTruth is the part of `evoq status --json` these tests check.
type statusTruth struct {
	Run            string `json:"run"`
	Phase          string `json:"phase"`
	Done           int    `json:"done"`
	CountedBy      string `json:"counted_by"`
	ControllerLive bool   `json:"controller_live"`
	ControllerGone *struct {
		Since   time.Time `json:"since"`
		PIDGone bool      `json:"pid_gone"`
	} `json:"controller_gone"`
	Controller *struct {
		PID int `json:"pid"`
	} `json:"controller"`
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
}

func parseStatus(t *testing.T, line string) statusTruth {
	t.Helper()
	var st statusTruth
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		t.Fatalf("status --json printed %q: %v", line, err)
	}
	return st
}

// exportCounted is the number of counted rows in `evoq export` of a run on
// a live broker, and its rows.
func exportCounted(t *testing.T, url, run string) (int, []map[string]string) {
	t.Helper()
	r := evoq(t, time.Minute, "export", "--nats", url, "--run", run)
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	_, rows := readCSVRows(t, r.stdout)
	n := 0
	for _, row := range rows {
		if row["counted"] == "true" {
			n++
		}
	}
	return n, rows
}

// statusNow runs `evoq status --json` once.
func statusNow(t *testing.T, url, run string, args ...string) (statusTruth, string) {
	t.Helper()
	r := evoq(t, time.Minute, append([]string{"status", "--nats", url, "--run", run}, args...)...)
	if r.code != 0 {
		t.Fatalf("status: exit %d\n%s", r.code, r.stderr)
	}
	if len(args) > 0 && args[0] == "--json" {
		return parseStatus(t, strings.TrimSpace(r.stdout)), r.stdout
	}
	return statusTruth{}, r.stdout
}

// A controller killed with SIGKILL mid-run: `evoq status` at once says
// the controller is gone, not running, and counts the stored results
// (at least those stored before it began) instead of the dead
// controller's last figures; a status --watch shows the switch. Once a
// restarted controller ends the run, status's count is export's.
func TestStatusAfterControllerKill(t *testing.T) {
	t.Parallel()
	const run, budget = "stkill", 300
	_, url := startBroker(t, t.TempDir())
	ctl := newRestartable(t, "controller", "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget),
		"--init", "10", "--pool", "5", "--json")
	background(t, "worker", "--nats", url, "--run", run, "--slots", "4", "--evaluator", "sim", "--sim-mean", "0.1")
	_, js := connectJS(t, url)
	waitFor(t, time.Minute, func() bool { return subjectCount(t, js, run) >= 40 })
	watch := background(t, "status", "--nats", url, "--run", run, "--watch", "200ms", "--json")
	watched := func() []statusTruth {
		var out []statusTruth
		for _, l := range strings.Split(strings.TrimSpace(watch.stderr.String()), "\n") {
			if strings.HasPrefix(l, "{") {
				out = append(out, parseStatus(t, l))
			}
		}
		return out
	}
	waitShowing(t, 30*time.Second, func() bool {
		w := watched()
		return len(w) > 0 && w[len(w)-1].ControllerLive
	}, func() string { return watch.stderr.String() })

	ctl.kill()
	killed := time.Now()
	before := subjectCount(t, js, run)
	st, _ := statusNow(t, url, run, "--json")
	answered, first := time.Since(killed), st
	if st.ControllerLive || st.ControllerGone == nil || !st.ControllerGone.PIDGone {
		t.Errorf("status right after the controller's SIGKILL: controller_live %v, controller_gone %+v; want gone, its pid gone",
			st.ControllerLive, st.ControllerGone)
	}
	if st.CountedBy != "results" || st.Done < before {
		t.Errorf("status counted %d by %s; want the stored results, at least the %d stored before it began", st.Done, st.CountedBy, before)
	}
	if st.ControllerGone != nil && (st.ControllerGone.Since.After(killed) || killed.Sub(st.ControllerGone.Since) > 3*time.Second) {
		t.Errorf("controller gone since %s; killed at %s", st.ControllerGone.Since, killed)
	}
	_, text := statusNow(t, url, run)
	header := strings.SplitN(text, "\n", 2)[0]
	if !regexp.MustCompile(`^run stkill: (running|draining) \(controller gone since [0-9:]+\); \d+ of 300 done`).MatchString(header) {
		t.Errorf("status header %q; want the phase with 'controller gone since'", header)
	}
	for _, want := range []string{"is gone from this host", "no live controller"} {
		if !strings.Contains(text, want) {
			t.Errorf("status does not say %q:\n%s", want, text)
		}
	}
	waitShowing(t, 30*time.Second, func() bool {
		w := watched()
		return len(w) > 0 && !w[len(w)-1].ControllerLive && w[len(w)-1].CountedBy == "results"
	}, func() string { return watch.stderr.String() })
	prev := -1
	for _, w := range watched() {
		if w.Done < prev {
			t.Errorf("status --watch went back from %d to %d", prev, w.Done)
		}
		prev = w.Done
	}

	// The workers finish the designs they hold and the queue's: then
	// status counts what export counts.
	waitFor(t, time.Minute, func() bool {
		st, _ = statusNow(t, url, run, "--json")
		return st.InFlight == 0 && st.Queued == 0
	})
	// That status may have read the results just before the last one came.
	st, _ = statusNow(t, url, run, "--json")
	if counted, _ := exportCounted(t, url, run); st.Done != counted || st.ControllerLive {
		t.Errorf("with the controller dead and the queue empty, status counts %d (controller live %v), export %d", st.Done, st.ControllerLive, counted)
	}

	st0 := st
	ctl.start()
	if err := ctl.cur.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("restarted controller: %v\n%s", err, tail(ctl.output(), 3000))
	}
	st, _ = statusNow(t, url, run, "--json")
	counted, _ := exportCounted(t, url, run)
	if st.Phase != "done" || st.Done != budget || st.Done != counted || st.ControllerLive {
		t.Errorf("status after the run: %s, %d done, controller live %v; export counts %d, budget %d", st.Phase, st.Done, st.ControllerLive, counted, budget)
	}
	t.Logf("status answered %s after the kill: %d done, %d stored before it began; %d once the workers were done; %d redraws watched",
		answered.Round(time.Millisecond), first.Done, before, st0.Done, len(watched()))
}

// Workers killed with SIGKILL and started again (each under a new ID):
// util_steady is the figure recomputed from `evoq export`'s rows, each
// slot counted from its worker's first design to its own last result,
// `evoq replay` gives the same, and slots never exceeds the slots that
// existed at once, whatever the killed workers' heartbeats left behind.
func TestUtilSteadyAfterWorkerKills(t *testing.T) {
	t.Parallel()
	const run, budget, perWorker = "utilkill", 400, 3
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget),
		"--init", "10", "--pool", "5", "--ack-wait", "3s", "--json")
	var workers []*restartable
	for range 2 {
		workers = append(workers, newRestartable(t, "worker", "worker", "--nats", url, "--run", run,
			"--slots", fmt.Sprint(perWorker), "--evaluator", "sim", "--sim-mean", "0.1"))
	}
	_, js := connectJS(t, url)
	at := 0
	for i := range 4 {
		at += 60
		waitFor(t, 2*time.Minute, func() bool { return subjectCount(t, js, run) >= at })
		if ctl.exited() {
			break
		}
		w := workers[i%2]
		w.kill() // dead and reaped before its replacement starts
		w.start()
	}
	if err := ctl.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	s := lastJSON(t, ctl.stderr.String())
	if s.Evaluations != budget {
		t.Fatalf("run ended with %d evaluations, want %d", s.Evaluations, budget)
	}
	counted, rows := exportCounted(t, url, run)
	want := steadyFromExport(t, rows)
	if math.Abs(s.UtilSteady-want.util) > 1.5e-4 || math.Abs(s.IdleBeforeFirst-want.beforeFirst) > 1.5e-4 {
		t.Errorf("summary util_steady %v, idle_before_first %v; recomputed from the export %.4f, %.4f",
			s.UtilSteady, s.IdleBeforeFirst, want.util, want.beforeFirst)
	}
	if s.SlotsUsed != want.slotsUsed {
		t.Errorf("summary slots_used %d; the export's counted rows name %d worker slots", s.SlotsUsed, want.slotsUsed)
	}
	if want.slotsUsed <= 2*perWorker {
		t.Errorf("the export names %d worker slots: the killed workers' replacements did not evaluate under new IDs", want.slotsUsed)
	}
	if s.Slots > 2*perWorker || s.Slots < want.maxSlots {
		t.Errorf("summary slots %d; at most %d existed at once, and the results show %d at once", s.Slots, 2*perWorker, want.maxSlots)
	}
	r := evoq(t, time.Minute, "replay", "--nats", url, "--run", run, "--json")
	if r.code != 0 {
		t.Fatalf("replay: exit %d\n%s", r.code, r.stderr)
	}
	var rep struct {
		SlotsUsed       int     `json:"slots_used"`
		UtilSteady      float64 `json:"util_steady"`
		IdleBeforeFirst float64 `json:"idle_before_first"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("replay --json: %v\n%s", err, r.stdout)
	}
	if rep.UtilSteady != s.UtilSteady || rep.IdleBeforeFirst != s.IdleBeforeFirst || rep.SlotsUsed != s.SlotsUsed {
		t.Errorf("replay: util_steady %v, idle_before_first %v, slots_used %d; the summary's %v, %v, %d",
			rep.UtilSteady, rep.IdleBeforeFirst, rep.SlotsUsed, s.UtilSteady, s.IdleBeforeFirst, s.SlotsUsed)
	}
	st, _ := statusNow(t, url, run, "--json")
	if st.Done != counted {
		t.Errorf("status after the run counts %d, export %d", st.Done, counted)
	}
	t.Logf("after %s: slots %d (results show %d at once), slots_used %d, util_steady %v (export %.4f; over max(slots, slots_used) it would read %.4f), idle_before_first %v",
		killCount(workers...), s.Slots, want.maxSlots, s.SlotsUsed, s.UtilSteady, want.util, want.naive, s.IdleBeforeFirst)
}

// steady are the steady-state figures recomputed from export rows.
type steady struct {
	util, beforeFirst, naive float64
	slotsUsed, maxSlots      int
}

// steadyFromExport recomputes util_steady from the counted rows with a
// start: the window runs from the first start to the last; each slot is
// live from its worker's first start to its own last stop (up to the
// window's end), and busy for its evaluations clipped to the window.
func steadyFromExport(t *testing.T, rows []map[string]string) steady {
	t.Helper()
	type span struct{ first, last time.Time }
	parse := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("export time %q: %v", s, err)
		}
		return v
	}
	type eval struct {
		slot        string
		start, stop time.Time
	}
	var evals []eval
	slots, workerOf, workerFirst := map[string]*span{}, map[string]string{}, map[string]time.Time{}
	var first, last time.Time
	for _, row := range rows {
		if row["counted"] != "true" || row["start"] == "" || row["status"] == "lost" {
			continue
		}
		start, stop := parse(row["start"]), parse(row["stop"])
		if start.IsZero() {
			continue
		}
		key := row["worker"] + "/" + row["slot"]
		evals = append(evals, eval{key, start, stop})
		workerOf[key] = row["worker"]
		if sp := slots[key]; sp == nil {
			slots[key] = &span{start, stop}
		} else {
			sp.first, sp.last = minT(sp.first, start), maxT(sp.last, stop)
		}
		if f, ok := workerFirst[row["worker"]]; !ok || start.Before(f) {
			workerFirst[row["worker"]] = start
		}
		if first.IsZero() || start.Before(first) {
			first = start
		}
		last = maxT(last, start)
	}
	var busy, live, before float64
	for _, e := range evals {
		busy += math.Max(minT(e.stop, last).Sub(e.start).Seconds(), 0)
	}
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for key, sp := range slots {
		joined := workerFirst[workerOf[key]]
		live += math.Max(minT(sp.last, last).Sub(joined).Seconds(), 0)
		before += math.Max(minT(sp.first, last).Sub(joined).Seconds(), 0)
		edges = append(edges, edge{joined, 1}, edge{sp.last, -1})
	}
	out := steady{slotsUsed: len(slots)}
	if live > 0 {
		out.util, out.beforeFirst = busy/live, before/live
		out.naive = busy / (float64(len(slots)) * last.Sub(first).Seconds())
	}
	for i := range edges {
		for j := i + 1; j < len(edges); j++ {
			a, b := edges[i], edges[j]
			if b.at.Before(a.at) || (b.at.Equal(a.at) && b.d < a.d) {
				edges[i], edges[j] = b, a
			}
		}
	}
	n := 0
	for _, e := range edges {
		n += e.d
		out.maxSlots = max(out.maxSlots, n)
	}
	return out
}

func minT(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxT(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Workers that join a few seconds after the controller published its
// first designs: the summary keeps wall_s, says how long the run waited
// for its first live slot, and evals_per_s is the evaluations over the
// rest, the time slots could work.
func TestRateOverWorkingTime(t *testing.T) {
	t.Parallel()
	const run, budget, delay = "latejoin", 120, 3 * time.Second
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget),
		"--init", "10", "--pool", "5", "--progress", "200ms", "--json")
	// A progress line with designs in flight: the controller's clock runs.
	inFlight := regexp.MustCompile(`msg=progress .*in_flight=[1-9]`)
	waitShowing(t, time.Minute, func() bool { return inFlight.MatchString(ctl.stderr.String()) },
		func() string { return ctl.stderr.String() })
	time.Sleep(delay) // the workers are late: that is the case under test
	background(t, "worker", "--nats", url, "--run", run, "--slots", "4", "--evaluator", "sim", "--sim-mean", "0.05")
	if err := ctl.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	s := lastJSON(t, ctl.stderr.String())
	if s.Evaluations != budget {
		t.Fatalf("run ended with %d evaluations, want %d", s.Evaluations, budget)
	}
	if s.WaitFirstSlotS < delay.Seconds() || s.WaitFirstSlotS >= s.WallS {
		t.Fatalf("wait_first_slot_s %v, wall_s %v; want at least the workers' %v delay, and less than the wall time", s.WaitFirstSlotS, s.WallS, delay)
	}
	// wall_s and wait_first_slot_s are rounded to 1 ms, evals_per_s to 0.1.
	work := s.WallS - s.WaitFirstSlotS
	lo, hi := budget/(work+0.001)-0.05, budget/(work-0.001)+0.05
	if s.EvalsPerS < lo || s.EvalsPerS > hi {
		t.Errorf("evals_per_s %v; want %d evaluations over wall_s %v less wait_first_slot_s %v: %.1f to %.1f",
			s.EvalsPerS, budget, s.WallS, s.WaitFirstSlotS, lo, hi)
	}
	t.Logf("wall_s %v, wait_first_slot_s %v, evals_per_s %v (over the wall time it would read %.1f)", s.WallS, s.WaitFirstSlotS, s.EvalsPerS, float64(budget)/s.WallS)
}
