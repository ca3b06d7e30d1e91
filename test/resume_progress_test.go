package test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// progressEval is the evaluator that saves its progress every step
// (testdata/progress/evaluate.py): 12 steps of 0.5 s unless env says
// otherwise.
func progressEval(t *testing.T) string {
	return python3(t) + " " + filepath.Join("testdata", "progress", "evaluate.py")
}

// liveReports reads run's reports so far through a running broker.
func liveReports(t *testing.T, js jetstream.JetStream, run string) []*schema.Report {
	t.Helper()
	var out []*schema.Report
	err := broker.ReadReports(testutil.Context(t, 30*time.Second), js, run, func(_ uint64, _ time.Time, r *schema.Report, err error) error {
		if err == nil {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitReports waits until cond holds of run's reports so far, reading them
// every quarter second: each reading is a consumer on the reports stream,
// and the broker caps how many a stream has at once.
func waitReports(t *testing.T, limit time.Duration, js jetstream.JetStream, run string, cond func([]*schema.Report) bool) {
	t.Helper()
	next := time.Now()
	waitFor(t, limit, func() bool {
		if time.Now().Before(next) {
			return false
		}
		next = time.Now().Add(250 * time.Millisecond)
		return cond(liveReports(t, js, run))
	})
}

// reportedPast says whether every one of n designs has a report at or past
// step.
func reportedPast(reps []*schema.Report, n int, step int64) bool {
	past := map[string]bool{}
	for _, r := range reps {
		if r.Step >= step {
			past[r.DesignID] = true
		}
	}
	return len(past) >= n
}

// checkResumed checks an interrupted run's record: every design counted
// once; each of the designs in resumed resumed (resumed_from set, its
// evaluator started there, and it trained only the steps after); and each
// design's reports, in stream order across its attempts, have steps that
// strictly increase, the resumed attempt's marked with its resume point.
func checkResumed(t *testing.T, results []*schema.Result, reps []*schema.Report, run string, budget int, resumed map[string]bool) {
	t.Helper()
	checkResumedSteps(t, results, reps, run, budget, resumed, true)
}

// checkResumedSteps is checkResumed; with strict false, a step an earlier
// attempt reported after its last stored save may be reported again, but
// no attempt that resumed reports a step at or before its resume point.
func checkResumedSteps(t *testing.T, results []*schema.Result, reps []*schema.Report, run string, budget int, resumed map[string]bool, strict bool) {
	t.Helper()
	f := fold(results, run, budget, budget, budget, runstate.ReplaceWorst)
	if f.Terminal() != budget || f.Figures().Duplicates != 0 {
		t.Errorf("%d results fold to %d terminal, %d duplicates; want %d designs counted once", len(results), f.Terminal(), f.Figures().Duplicates, budget)
	}
	for _, r := range results {
		if r.Status != schema.StatusOK {
			t.Errorf("%s: %s %s", r.DesignID, r.Status, r.Error)
			continue
		}
		started, _ := r.Metrics["started_at"].(float64)
		t.Logf("%s: attempt %d, resumed_from %d after %.2f s of training, its evaluator started at %v", r.DesignID, r.Attempt, r.ResumedFrom, r.ResumedSeconds, started)
		switch {
		case !resumed[r.DesignID]:
			if r.ResumedFrom != 0 {
				t.Errorf("%s was not interrupted, yet resumed_from %d", r.DesignID, r.ResumedFrom)
			}
		case r.ResumedFrom <= 0 || r.Attempt < 2 || int64(started) != r.ResumedFrom || r.ResumedSeconds <= 0:
			t.Errorf("%s: attempt %d, resumed_from %d (%.2f s), its evaluator started at %v; want a later attempt resumed where the last saved",
				r.DesignID, r.Attempt, r.ResumedFrom, r.ResumedSeconds, started)
		case r.Metrics[worker_ProgressMetric] != nil:
			t.Errorf("%s resumed, yet says %v", r.DesignID, r.Metrics[worker_ProgressMetric])
		}
		if r.Fitness != float64(r.Design.Seq*78) { // sum of step*seq over 12 steps, whatever the attempts
			t.Errorf("%s: fitness %v, want %d: the resumed training lost or repeated steps", r.DesignID, r.Fitness, r.Design.Seq*78)
		}
	}
	last := map[string]*schema.Report{}
	for _, r := range reps {
		if p := last[r.DesignID]; strict && p != nil && r.Step <= p.Step && !(r.Last && r.Step == p.Step) {
			t.Errorf("%s: report at step %d (attempt %d) after step %d (attempt %d): a step reported twice", r.DesignID, r.Step, r.Attempt, p.Step, p.Attempt)
		}
		if r.ResumedFrom > 0 && r.Step <= r.ResumedFrom {
			t.Errorf("%s: attempt %d resumed from step %d reported step %d", r.DesignID, r.Attempt, r.ResumedFrom, r.Step)
		}
		if p := last[r.DesignID]; p != nil && r.Attempt != p.Attempt && r.ResumedFrom == 0 && resumed[r.DesignID] {
			t.Errorf("%s: attempt %d's reports do not say where it resumed", r.DesignID, r.Attempt)
		}
		last[r.DesignID] = r
	}
}

// worker_ProgressMetric is worker.ProgressMetric, the metric that says a
// design's saved progress could not be used.
const worker_ProgressMetric = "progress_unusable"

// progressLeft lists the progress objects left in run's store: the
// object store, or the directory ckptDir when it is not "".
func progressLeft(t *testing.T, js jetstream.JetStream, run, ckptDir string) []string {
	t.Helper()
	var s checkpoint.Store
	var err error
	if ckptDir != "" {
		s, err = checkpoint.OpenDir(ckptDir, run)
	} else {
		s, err = checkpoint.OpenObject(testutil.Context(t, 10*time.Second), js, run, t.TempDir())
	}
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, id := range listed(t, s) {
		if strings.HasSuffix(id, schema.ProgressSuffix) {
			left = append(left, id)
		}
	}
	return left
}

// The acceptance test of progress checkpoints: a Python evaluator of 12
// steps of 0.5 s saves its progress every step; its worker is SIGKILLed
// with both designs past step 3, and another worker started: each design
// resumes on it where it was saved last, reports no step twice, ends with
// the fitness of a whole training, and counts once; the summary counts
// both as resumed, and the store keeps no progress after the run.
// One-shot and --persistent alike, and with the store in a directory
// (--checkpoint-dir) as well as in the broker.
func TestProgressResumesAfterWorkerKilled(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name     string
		extra    []string
		ckptDirs bool
	}{{"one-shot", nil, false}, {"persistent", []string{"--persistent"}, false}, {"checkpoint-dir", nil, true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			const run, budget = "resume", 2
			eval := progressEval(t)
			_, url := startBroker(t, t.TempDir())
			ctlArgs := []string{"controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "2",
				"--pool", "2", "--ack-wait", "3s", "--json"}
			ckptDir := ""
			if mode.ckptDirs {
				ckptDir = t.TempDir()
				ctlArgs = append(ctlArgs, "--checkpoint-dir", ckptDir)
			}
			ctl := background(t, ctlArgs...)
			victim := background(t, append([]string{"worker", "--nats", url, "--run", run, "--id", "victim", "--slots", "2",
				"--eval-cmd", eval}, mode.extra...)...)
			_, js := connectJS(t, url)
			waitReports(t, time.Minute, js, run, func(reps []*schema.Report) bool { return reportedPast(reps, budget, 3) })
			_ = victim.cmd.Process.Signal(syscall.SIGKILL)
			<-victim.done
			background(t, append([]string{"worker", "--nats", url, "--run", run, "--id", "rescuer", "--slots", "2",
				"--eval-cmd", eval}, mode.extra...)...)
			if err := ctl.wait(t, 2*time.Minute); err != nil {
				t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
			}
			results := storedResults(t, js, run)
			both := map[string]bool{schema.DesignID(run, 1): true, schema.DesignID(run, 2): true}
			checkResumed(t, results, liveReports(t, js, run), run, budget, both)
			s := lastJSON(t, ctl.stderr.String())
			if s.Progress == nil || s.Progress.Resumed != 2 || s.Progress.ResumedSavedS <= 0 || s.Progress.FromScratch != 0 {
				t.Errorf("summary's progress %+v, want 2 resumed, slot-seconds saved, none from scratch", s.Progress)
			}
			if left := progressLeft(t, js, run, ckptDir); len(left) != 0 {
				t.Errorf("progress left in the store after the run: %v", left)
			}
		})
	}
}

// At the walltime the worker asks its evaluations to save their progress
// before it hands their designs back: an evaluator that saves every 3rd
// step also saves when asked, within the margin, and the next worker
// resumes each design from there.
func TestProgressSavedAtWalltime(t *testing.T) {
	t.Parallel()
	const run, budget = "wallsave", 2
	eval := progressEval(t)
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "2",
		"--pool", "2", "--json")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "work queue ready") })
	// Steps of 1.6 s: the first save, at step 3, comes well before the
	// hand-back 16 s after the worker's start, which asks for another (a
	// worker whose evaluations never saved does not wait for one); the 12
	// steps, 19.2 s, run past it. (With steps of 0.8 s and the hand-back at
	// 6 s, a Python started on a loaded machine had not reached step 3.)
	env := []string{"SAVE_EVERY=3", "STEP_S=1.6"}
	w := backgroundEnv(t, env, "worker", "--nats", url, "--run", run, "--id", "w", "--slots", "2",
		"--walltime", "20s", "--walltime-margin", "4s", "--min-eval-time", "1s", "--eval-cmd", eval)
	if err := w.wait(t, time.Minute); err != nil {
		t.Fatalf("worker at its walltime: %v\n%s", err, tail(w.stderr.String(), 3000))
	}
	if !strings.Contains(w.stderr.String(), "saved their progress before the hand-back") {
		t.Errorf("the worker did not see its evaluations save before the hand-back:\n%s", tail(w.stderr.String(), 3000))
	}
	backgroundEnv(t, env, "worker", "--nats", url, "--run", run, "--id", "next", "--slots", "2", "--eval-cmd", eval)
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	_, js := connectJS(t, url)
	both := map[string]bool{schema.DesignID(run, 1): true, schema.DesignID(run, 2): true}
	checkResumed(t, storedResults(t, js, run), liveReports(t, js, run), run, budget, both)
}

// A controller SIGKILLed with its worker, both started again: the new
// controller's check of the store keeps the progress of the designs in
// flight, and each resumes on the new worker where it was saved last.
func TestProgressResumesAcrossControllerRestart(t *testing.T) {
	t.Parallel()
	const run, budget = "ctlresume", 2
	eval := progressEval(t)
	_, url := startBroker(t, t.TempDir())
	ctlArgs := []string{"controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "2",
		"--pool", "2", "--ack-wait", "3s", "--json"}
	first := background(t, ctlArgs...)
	victim := background(t, "worker", "--nats", url, "--run", run, "--id", "victim", "--slots", "2", "--eval-cmd", eval)
	_, js := connectJS(t, url)
	waitReports(t, time.Minute, js, run, func(reps []*schema.Report) bool { return reportedPast(reps, budget, 3) })
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	<-victim.done
	second := background(t, ctlArgs...)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(second.stderr.String(), "checkpoint store checked") })
	background(t, "worker", "--nats", url, "--run", run, "--id", "rescuer", "--slots", "2", "--eval-cmd", eval)
	if err := second.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(second.stderr.String(), 3000))
	}
	both := map[string]bool{schema.DesignID(run, 1): true, schema.DesignID(run, 2): true}
	checkResumed(t, storedResults(t, js, run), liveReports(t, js, run), run, budget, both)
	if left := progressLeft(t, js, run, ""); len(left) != 0 {
		t.Errorf("progress left in the store after the run: %v", left)
	}
}

// A progress object that cannot be used never fails its design: one that
// is not a progress object at all (the worker's check) and one whose bytes
// the evaluator cannot load (another code version: the helper's check)
// each make the design train from scratch, say why in its result, and
// count once.
func TestProgressCorruptTrainsFromScratch(t *testing.T) {
	t.Parallel()
	const run, budget = "corrupt", 2
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "2",
		"--pool", "2", "--json")
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(ctl.stderr.String(), "work queue ready") })
	_, js := connectJS(t, url)
	s, err := checkpoint.OpenObject(testutil.Context(t, 10*time.Second), js, run, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Stored as a worker stores progress: the run's controller commits it.
	put := func(name string, data []byte) {
		p := s.OutPath(name, "test")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(testutil.Context(t, 30*time.Second), name, p); err != nil {
			t.Fatal(err)
		}
	}
	put(schema.DesignID(run, 1)+schema.ProgressSuffix, []byte("not a progress object"))
	payload := []byte("\x80\x04not a pickle")
	sum := sha256.Sum256(payload)
	header := fmt.Sprintf(`{"evoq_progress":1,"design":%q,"step":5,"seconds":2.5,"size":%d,"sha256":%q}`+"\n",
		schema.DesignID(run, 2), len(payload), hex.EncodeToString(sum[:]))
	put(schema.DesignID(run, 2)+schema.ProgressSuffix, append([]byte(header), payload...))
	backgroundEnv(t, []string{"STEP_S=0.05"}, "worker", "--nats", url, "--run", run, "--slots", "2", "--eval-cmd", progressEval(t))
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	results := storedResults(t, js, run)
	if len(results) != budget {
		t.Fatalf("%d results, want %d: each design once", len(results), budget)
	}
	for _, r := range results {
		why, _ := r.Metrics[worker_ProgressMetric].(string)
		if r.Status != schema.StatusOK || r.ResumedFrom != 0 || r.Metrics["trained_steps"] != float64(12) || why == "" {
			t.Errorf("%s: %s, resumed_from %d, trained %v steps, %s %q; want ok from scratch, and why",
				r.DesignID, r.Status, r.ResumedFrom, r.Metrics["trained_steps"], worker_ProgressMetric, why)
		}
		t.Logf("%s: %s", r.DesignID, why)
	}
}

// Early stopping across a resume: a run with asha whose worker is
// SIGKILLed once its designs passed the rung at step 3 resumes them on
// another worker; no step is reported twice, the rungs up to the resume
// point are not judged again, and evoq replay folds the stored streams to
// the controller's pool and rungs digests.
func TestProgressResumeWithEarlyStopReplays(t *testing.T) {
	t.Parallel()
	const run, budget = "esresume", 4
	eval := progressEval(t)
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "4",
		"--pool", "4", "--ack-wait", "3s", "--early-stop", "asha", "--max-step", "12", "--eta", "3", "--json")
	env := []string{"STEP_S=0.3"}
	victim := backgroundEnv(t, env, "worker", "--nats", url, "--run", run, "--id", "victim", "--slots", "2", "--eval-cmd", eval)
	_, js := connectJS(t, url)
	waitReports(t, time.Minute, js, run, func(reps []*schema.Report) bool { return reportedPast(reps, 2, 4) })
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	<-victim.done
	backgroundEnv(t, env, "worker", "--nats", url, "--run", run, "--id", "rescuer", "--slots", "2", "--eval-cmd", eval)
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	s := lastJSON(t, ctl.stderr.String())
	results, reps := storedResults(t, js, run), liveReports(t, js, run)
	if s.Evaluations != budget || s.Progress == nil || s.Progress.Resumed == 0 {
		t.Fatalf("summary: %d evaluations, progress %+v; want %d, some resumed", s.Evaluations, s.Progress, budget)
	}
	resumed := 0
	for _, r := range results {
		if r.ResumedFrom > 0 {
			resumed++
		}
	}
	if resumed != s.Progress.Resumed {
		t.Errorf("%d results resumed, the summary says %d", resumed, s.Progress.Resumed)
	}
	last := map[string]*schema.Report{}
	for _, r := range reps {
		if p := last[r.DesignID]; p != nil && r.Step <= p.Step && !(r.Last && r.Step == p.Step) {
			t.Errorf("%s: report at step %d (attempt %d) after step %d (attempt %d)", r.DesignID, r.Step, r.Attempt, p.Step, p.Attempt)
		}
		last[r.DesignID] = r
	}
	rep := evoq(t, time.Minute, "replay", "--nats", url, "--run", run, "--json")
	var out struct {
		PoolDigest string `json:"pool_digest"`
		EarlyStop  *struct {
			Digest string `json:"rungs_digest"`
		} `json:"early_stop"`
	}
	if err := json.Unmarshal([]byte(lastLine(rep.stdout)), &out); err != nil || out.EarlyStop == nil {
		t.Fatalf("replay: %v\n%s%s", err, rep.stdout, rep.stderr)
	}
	if s.EarlyStop == nil || s.EarlyStop.Digest != out.EarlyStop.Digest || s.PoolDigest != out.PoolDigest {
		t.Errorf("controller's digests: pool %s, rungs %+v; replay's: pool %s, rungs %s", s.PoolDigest, s.EarlyStop, out.PoolDigest, out.EarlyStop.Digest)
	}
}

// Inheritance across a resume: mutants of a run with --inherit, resumed
// after their worker is SIGKILLed, are not handed their parent's
// checkpoint again (their own progress is further on), and their results
// still say that they inherited, as their first attempt recorded.
func TestProgressResumedMutantDoesNotInheritAgain(t *testing.T) {
	t.Parallel()
	const run, budget = "inhresume", 10
	eval := progressEval(t)
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "2",
		"--pool", "2", "--ack-wait", "3s", "--inherit", "--json")
	env := []string{"STEP_S=0.3"}
	victim := backgroundEnv(t, env, "worker", "--nats", url, "--run", run, "--id", "victim", "--slots", "2", "--eval-cmd", eval)
	_, js := connectJS(t, url)
	// The evaluator's reports say which designs are mutants: the victim's
	// two slots both train one, past a save and not near its end (step
	// 12), once two mutants' latest reports are at steps 1 to 10. (The first
	// designs are random: the controller publishes the slots and its
	// margin ahead.)
	var mutants map[string]bool
	waitReports(t, 3*time.Minute, js, run, func(reps []*schema.Report) bool {
		latest := map[string]int64{}
		mutants = map[string]bool{}
		for _, r := range reps {
			if m, _ := r.Metrics["mutant"].(float64); m == 1 {
				latest[r.DesignID] = r.Step
			}
		}
		for id, step := range latest {
			if step >= 1 && step <= 10 {
				mutants[id] = true
			}
		}
		return len(mutants) >= 2
	})
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	<-victim.done
	backgroundEnv(t, env, "worker", "--nats", url, "--run", run, "--id", "rescuer", "--slots", "2", "--eval-cmd", eval)
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	results := storedResults(t, js, run)
	checkResumed(t, results, liveReports(t, js, run), run, budget, mutants)
	for _, r := range results {
		if !mutants[r.DesignID] {
			continue
		}
		if r.Design.Origin != schema.OriginMutant || r.Metrics["parent_handed"] != false || r.Metrics["inherited"] != true {
			t.Errorf("%s (%s): parent handed to the resumed attempt %v, inherited %v (%v); want a mutant not handed its parent again, and inherited true",
				r.DesignID, r.Design.Origin, r.Metrics["parent_handed"], r.Metrics["inherited"], r.Metrics["inherit_reason"])
		}
	}
}

// loggedPast says whether n designs logged a step at or past step in the
// progress evaluator's STEP_LOG.
func loggedPast(t *testing.T, file string, n int, step int) bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	past := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		var id string
		var s int
		if _, err := fmt.Sscanf(line, "%s %d", &id, &s); err == nil && s >= step {
			past[id] = true
		}
	}
	return len(past) >= n
}

// An interrupted evoq run (Ctrl-C) hands its designs back as its workers
// drain, and `evoq run --resume` resumes each from its last saved step.
// The evaluator saves at step 2 and when asked: its controller stays up
// while the workers drain and commits the save each makes when asked, so
// a design resumes past step 2, its last save before the interrupt.
func TestProgressResumesAfterInterruptAndResume(t *testing.T) {
	t.Parallel()
	const run, budget = "intresume", 2
	dir, steps := t.TempDir(), filepath.Join(t.TempDir(), "steps")
	env := []string{"STEP_LOG=" + steps, "SAVE_AT=2"}
	args := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0"}
	p := newProc(nil, append(args, "--run", run, "--budget", fmt.Sprint(budget), "--init", "2", "--pool", "2", "--slots", "2",
		"--ack-wait", "90s", "--drain-timeout", "1s", "--eval-cmd", progressEval(t))...)
	p.cmd.Stdout = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's foreground group
	p.start(t, env)
	waitFor(t, time.Minute, func() bool { return loggedPast(t, steps, budget, 3) })
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
	_ = p.wait(t, time.Minute)
	r := evoqEnv(t, 2*time.Minute, env, append(args, "--resume", "--json")...)
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	s := lastJSON(t, r.stdout)
	if s.Progress == nil || s.Progress.Resumed != budget {
		t.Errorf("summary's progress %+v, want %d resumed", s.Progress, budget)
	}
	both := map[string]bool{schema.DesignID(run, 1): true, schema.DesignID(run, 2): true}
	results := readResults(t, dir, run)
	checkResumedSteps(t, results, storedReports(t, dir, run), run, budget, both, false)
	for _, r := range results {
		if r.ResumedFrom <= 2 {
			t.Errorf("%s resumed from step %d: the save its evaluator made when asked, as its worker drained, was not stored", r.DesignID, r.ResumedFrom)
		}
	}
}

// A worker whose evaluator saves no progress behaves as before: its
// designs, redelivered after it is SIGKILLed, train again from scratch on
// another worker. The summary counts them and what that cost, and the
// run's warnings, in the summary and evoq status, say so.
func TestNoProgressRetrainsFromScratchWarns(t *testing.T) {
	t.Parallel()
	const run, budget = "scratch", 2
	eval := `sleep 4; echo '{"fitness": 1}'`
	_, url := startBroker(t, t.TempDir())
	ctl := background(t, "controller", "--nats", url, "--run", run, "--budget", fmt.Sprint(budget), "--init", "2",
		"--pool", "2", "--ack-wait", "3s", "--json")
	victim := background(t, "worker", "--nats", url, "--run", run, "--id", "victim", "--slots", "2", "--eval-cmd", eval)
	_, js := connectJS(t, url)
	waitFor(t, 30*time.Second, func() bool { return ackPending(t, js, run) == budget })
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	<-victim.done
	background(t, "worker", "--nats", url, "--run", run, "--id", "rescuer", "--slots", "2", "--eval-cmd", eval)
	if err := ctl.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(ctl.stderr.String(), 3000))
	}
	for _, r := range storedResults(t, js, run) {
		if r.Attempt != 2 || r.ResumedFrom != 0 || r.ProgressStep != 0 {
			t.Errorf("%s: attempt %d, resumed_from %d, progress_step %d; want a second attempt from scratch", r.DesignID, r.Attempt, r.ResumedFrom, r.ProgressStep)
		}
	}
	s := lastJSON(t, ctl.stderr.String())
	if s.Progress == nil || s.Progress.FromScratch != budget || s.Progress.FromScratchCostS < 4 || s.Progress.Resumed != 0 {
		t.Errorf("summary's progress %+v, want %d from scratch costing about 4 s each (half an evaluation per earlier attempt)", s.Progress, budget)
	}
	all := strings.Join(s.Warnings, "\n")
	if !strings.Contains(all, "2 interrupted designs were retrained from scratch") || !strings.Contains(all, "evoq_eval.save_progress") {
		t.Errorf("summary warnings do not say that interrupted designs were retrained from scratch:\n%s", all)
	}
	st := evoq(t, time.Minute, "status", "--nats", url, "--run", run)
	if !strings.Contains(st.stdout, "retrained from scratch") {
		t.Errorf("evoq status does not show the warning:\n%s%s", st.stdout, st.stderr)
	}
}
