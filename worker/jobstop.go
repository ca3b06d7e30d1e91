package worker

import (
	"time"

	"github.com/evoq/evoq/schema"
)

// JobSignalWait is how long a slot whose evaluator a batch system's signal
// ended waits for the worker to be told to stop as well: the batch system
// signals every process of the job at once (Slurm on a requeue, a
// preemption or the walltime; srun forwarding its warning), and the
// evaluator may die of it before the worker has read its own.
const JobSignalWait = 2 * time.Second

// jobSignals are the signals a batch system sends a job it stops or warns:
// SIGTERM and SIGINT to stop it, SIGHUP when its session ends, SIGUSR1 and
// SIGUSR2 as the warnings sites configure (Slurm's --signal, LSF's -wa).
var jobSignals = map[string]bool{"SIGTERM": true, "SIGINT": true, "SIGHUP": true, "SIGUSR1": true, "SIGUSR2": true}

// stoppedWithJob reports whether res is an evaluation that the job's end
// cut short, not the design's failure: its evaluator ended by one of
// jobSignals, which the worker itself never sends it (it stops an
// evaluator only when its own context is cancelled, see cancelled), and
// the worker was told to stop too, at most JobSignalWait later. Such a
// design is handed back for another try rather than counted or retried
// as an error: on a requeue every design in flight would otherwise be
// one failed attempt closer to its retry limit.
func (w *Worker) stoppedWithJob(res *schema.Result) bool {
	if res.Status != schema.StatusError || !jobSignals[res.Signal] {
		return false
	}
	t := time.NewTimer(JobSignalWait)
	defer t.Stop()
	select {
	case <-w.fetchCtx.Done():
		return true
	case <-t.C:
		return false
	}
}
