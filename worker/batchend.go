package worker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The end of the batch job a worker or a controller runs in. The
// environment says it where the batch system exports it (Slurm from 23.02
// sets SLURM_JOB_END_TIME; some PBS sites set PBS_WALLTIME); elsewhere the
// batch system is asked, once, at start: Debian's Slurm 22.05 exports no
// end time, and a worker that does not know it is killed in the middle of
// its evaluations, and an operator-mode credential outlives the job.

// BatchLookupTimeout bounds the questions put to the batch system, all of
// them together: a slurmctld under load answers in seconds, and a worker
// that cannot learn its end runs without one rather than wait.
const BatchLookupTimeout = 10 * time.Second

// ErrBatchLookup means the process runs in a batch job whose end the batch
// system did not tell: the caller runs without a walltime and says to give
// it (--walltime), since a wrong guess would kill evaluations or credentials
// early.
var ErrBatchLookup = errors.New("the batch system did not tell the job's end")

// BatchCommand runs a batch system's command and returns its standard output.
type BatchCommand func(ctx context.Context, name string, args ...string) ([]byte, error)

// BatchDeadline is the end of the batch job this process runs in, and
// where it was found: SLURM_JOB_END_TIME (Unix seconds) or PBS_WALLTIME
// (seconds from start, the job having started about then) in the
// environment; else, in a Slurm, PBS or LSF job (SLURM_JOB_ID, PBS_JOBID,
// LSB_JOBID), what squeue or scontrol, qstat -f or bjobs say, within
// BatchLookupTimeout. It returns the zero time outside a batch job and for
// a job without a time limit; an environment value that is not a time is
// an error, and a batch system that did not answer is one wrapping
// ErrBatchLookup. The worker's walltime and the controller's credential
// expiry both come from here, so that they agree.
func BatchDeadline(ctx context.Context, getenv func(string) string, start time.Time) (time.Time, string, error) {
	ctx, cancel := context.WithTimeout(ctx, BatchLookupTimeout)
	defer cancel()
	return batchDeadline(ctx, getenv, runBatchCommand, start)
}

func batchDeadline(ctx context.Context, getenv func(string) string, run BatchCommand, start time.Time) (time.Time, string, error) {
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
	var (
		end time.Time
		src string
		err error
	)
	switch {
	case getenv("SLURM_JOB_ID") != "":
		end, src, err = slurmEnd(ctx, run, getenv("SLURM_JOB_ID"))
	case getenv("PBS_JOBID") != "":
		end, src, err = askBatch(ctx, run, start, "qstat", parseQstat, "-f", getenv("PBS_JOBID"))
	case getenv("LSB_JOBID") != "":
		end, src, err = askBatch(ctx, run, start, "bjobs", parseBjobs, "-noheader", "-o", "time_left", getenv("LSB_JOBID"))
	}
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: %w", ErrBatchLookup, err)
	}
	return end, src, nil
}

// slurmEnd asks squeue, then scontrol, for the end of a Slurm job.
func slurmEnd(ctx context.Context, run BatchCommand, job string) (time.Time, string, error) {
	end, src, err := askBatch(ctx, run, time.Time{}, "squeue", parseSqueue, "-h", "-j", job, "-o", "%e %l")
	if err == nil {
		return end, src, nil
	}
	end, src, err2 := askBatch(ctx, run, time.Time{}, "scontrol", parseScontrol, "show", "job", job)
	if err2 == nil {
		return end, src, nil
	}
	return time.Time{}, "", fmt.Errorf("%w; %w", err, err2)
}

// askBatch runs a batch system's command and parses what it says; the
// source it returns is the command line.
func askBatch(ctx context.Context, run BatchCommand, now time.Time, name string,
	parse func([]byte, time.Time) (time.Time, error), args ...string) (time.Time, string, error) {
	src := name + " " + strings.Join(args, " ")
	out, err := run(ctx, name, args...)
	if err == nil {
		var end time.Time
		if end, err = parse(out, now); err == nil {
			return end, src, nil
		}
	}
	return time.Time{}, "", fmt.Errorf("%s: %w", src, err)
}

// runBatchCommand runs a command, its standard error in the error.
func runBatchCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w (%s)", err, firstLine(msg))
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", BatchLookupTimeout, err)
		}
		return nil, err
	}
	return out, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// slurmTimeLayout is how squeue and scontrol print a time: in the local
// time zone, without naming it. They run as this process's children, with
// its TZ, so time.Local reads it back right.
const slurmTimeLayout = "2006-01-02T15:04:05"

// parseSqueue reads `squeue -h -j JOB -o "%e %l"`: the job's end and its
// time limit, which is UNLIMITED for a job without one (its end is then a
// year away, a guess of Slurm's, not a limit).
func parseSqueue(out []byte, _ time.Time) (time.Time, error) {
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return time.Time{}, fmt.Errorf("want the end and the time limit, got %q", strings.TrimSpace(string(out)))
	}
	return slurmEndTime(f[0], f[1])
}

// parseScontrol reads EndTime= and TimeLimit= of `scontrol show job JOB`.
func parseScontrol(out []byte, _ time.Time) (time.Time, error) {
	var end, limit string
	for _, f := range strings.Fields(string(out)) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "EndTime":
			end = v
		case "TimeLimit":
			limit = v
		}
	}
	if end == "" || limit == "" {
		return time.Time{}, fmt.Errorf("no EndTime= and TimeLimit= in %q", firstLine(strings.TrimSpace(string(out))))
	}
	return slurmEndTime(end, limit)
}

func slurmEndTime(end, limit string) (time.Time, error) {
	if limit == "UNLIMITED" {
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation(slurmTimeLayout, end, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("end %q is not a time", end)
	}
	return t, nil
}

// parseQstat reads `qstat -f JOB`: Torque's Walltime.Remaining (seconds),
// else PBS Pro's Resource_List.walltime counted from the job's start
// (stime), else that limit less resources_used.walltime, which the server
// updates only every few minutes and so puts the end a little late. No
// walltime limit is no end.
func parseQstat(out []byte, now time.Time) (time.Time, error) {
	attr := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " = ")
		if ok {
			attr[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if v, ok := attr["Walltime.Remaining"]; ok {
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("Walltime.Remaining %q is not a number of seconds", v)
		}
		return now.Add(time.Duration(sec) * time.Second), nil
	}
	if len(attr) == 0 {
		return time.Time{}, fmt.Errorf("no attributes in %q", firstLine(strings.TrimSpace(string(out))))
	}
	v, ok := attr["Resource_List.walltime"]
	if !ok {
		return time.Time{}, nil
	}
	limit, err := parseClock(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("Resource_List.walltime: %w", err)
	}
	if st, err := time.ParseInLocation(time.ANSIC, attr["stime"], time.Local); err == nil {
		return st.Add(limit), nil
	}
	var used time.Duration
	if u, ok := attr["resources_used.walltime"]; ok {
		if used, err = parseClock(u); err != nil {
			return time.Time{}, fmt.Errorf("resources_used.walltime: %w", err)
		}
	}
	return now.Add(limit - used), nil
}

// parseBjobs reads `bjobs -noheader -o time_left JOB`: "hours:minutes L"
// (or hh:mm:ss with LSB_HMS_TIME_FORMAT) when the job has a run limit, "-"
// when it has none. E and X mark an estimated run time, which LSF does not
// enforce: it is not the job's end.
func parseBjobs(out []byte, now time.Time) (time.Time, error) {
	f := strings.Fields(string(out))
	switch {
	case len(f) == 1 && f[0] == "-":
		return time.Time{}, nil
	case len(f) != 2:
		return time.Time{}, fmt.Errorf("want the time left and its kind, got %q", strings.TrimSpace(string(out)))
	case f[1] != "L":
		return time.Time{}, fmt.Errorf("time left %q is an estimated run time (%s), not the run limit", f[0], f[1])
	}
	left, err := parseClock(f[0])
	if strings.Count(f[0], ":") == 1 && err == nil {
		left *= 60 // hours:minutes, not minutes:seconds
	}
	if err != nil {
		return time.Time{}, err
	}
	return now.Add(left), nil
}

// parseClock reads [[hours:]minutes:]seconds, or seconds alone.
func parseClock(s string) (time.Duration, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return 0, fmt.Errorf("%q is not [[hours:]minutes:]seconds", s)
	}
	var d time.Duration
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q is not [[hours:]minutes:]seconds", s)
		}
		d = d*60 + time.Duration(n)
	}
	return d * time.Second, nil
}
