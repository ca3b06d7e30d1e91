package worker

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Walltime defaults.
const (
	// WalltimeMarginDefault is how long before the allocation's end a worker
	// hands back unfinished designs and exits, before the batch system kills it.
	WalltimeMarginDefault = 30 * time.Second
	durationsKept         = 256
)

// BatchDeadline reads the end of the batch job from the environment: Slurm's
// SLURM_JOB_END_TIME (Unix seconds), or PBS's PBS_WALLTIME (seconds,
// counted from start, when the job started about now). It returns the zero
// time when neither is set; LSF exports no end time: pass --walltime there.
func BatchDeadline(getenv func(string) string, start time.Time) (time.Time, string, error) {
	if v := getenv("SLURM_JOB_END_TIME"); v != "" {
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil || sec <= 0 {
			return time.Time{}, "", fmt.Errorf("SLURM_JOB_END_TIME %q is not a Unix time", v)
		}
		return time.Unix(sec, 0), "SLURM_JOB_END_TIME", nil
	}
	if v := getenv("PBS_WALLTIME"); v != "" {
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil || sec <= 0 {
			return time.Time{}, "", fmt.Errorf("PBS_WALLTIME %q is not a number of seconds", v)
		}
		return start.Add(time.Duration(sec) * time.Second), "PBS_WALLTIME", nil
	}
	return time.Time{}, "", nil
}

// durations keeps the latest evaluation times of a worker, for the
// typical evaluation time the walltime check uses.
type durations struct {
	mu   sync.Mutex
	ring []time.Duration
	next int
}

func (d *durations) add(x time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ring) < durationsKept {
		d.ring = append(d.ring, x)
		return
	}
	d.ring[d.next] = x
	d.next = (d.next + 1) % durationsKept
}

// p90 is the 90th percentile of the kept durations, 0 when there are none.
func (d *durations) p90() time.Duration {
	d.mu.Lock()
	s := slices.Clone(d.ring)
	d.mu.Unlock()
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*9/10)]
}

// typicalEval is the time an evaluation is expected to take: the p90 of
// this worker's evaluations so far, at least MinEvalTime.
func (w *Worker) typicalEval() time.Duration { return max(w.evalTimes.p90(), w.cfg.MinEvalTime) }

// watchWalltime stops taking designs once the time left before the
// deadline, less the margin, is shorter than a typical evaluation, and at
// deadline - margin hands back what is still running, so the worker leaves
// before the batch system kills it.
func (w *Worker) watchWalltime() {
	defer w.bg.Done()
	if w.cfg.Deadline.IsZero() {
		<-w.slotsDone
		return
	}
	end := w.cfg.Deadline.Add(-w.cfg.WalltimeMargin)
	hard := time.NewTimer(time.Until(end))
	defer hard.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for soft := false; ; {
		if !soft && time.Until(end) < w.typicalEval() {
			soft = true
			w.log.WithFields(logrus.Fields{"left": time.Until(end).Round(time.Second), "typical_eval": w.typicalEval().Round(time.Millisecond)}).
				Warn("walltime: too little time left for another evaluation; taking no new designs")
			w.fetchCancel()
		}
		select {
		case <-w.slotsDone:
			return
		case <-hard.C:
			w.log.WithField("busy", w.busy.Load()).Warn("walltime: handing back the designs still running and leaving")
			w.evalCancel()
			<-w.slotsDone
			return
		case <-tick.C:
		}
	}
}
