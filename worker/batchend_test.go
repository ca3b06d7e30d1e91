package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The samples in testdata/batch: squeue and scontrol recorded from
// Debian's Slurm 22.05 (the one .ci/run installs); qstat -f of PBS Pro and
// Torque and bjobs -o time_left written after their manuals' formats, for
// lack of such a system here.
func sample(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "batch", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func localTime(t *testing.T, layout, value string) time.Time {
	t.Helper()
	v, err := time.ParseInLocation(layout, value, time.Local)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Each batch system's answer parses to the job's end; a job without a
// time limit to no end; an answer that says something else to an error.
func TestParseBatchAnswers(t *testing.T) {
	t.Parallel()
	now := localTime(t, time.DateTime, "2024-03-05 10:36:14")
	slurmEnd := localTime(t, slurmTimeLayout, "2026-12-04T22:45:48")
	for _, tc := range []struct {
		name    string
		parse   func([]byte, time.Time) (time.Time, error)
		sample  string
		want    time.Time
		wantErr string
	}{
		{"squeue", parseSqueue, "squeue-22.05.txt", slurmEnd, ""},
		{"squeue, no time limit", parseSqueue, "squeue-22.05-unlimited.txt", time.Time{}, ""},
		{"scontrol", parseScontrol, "scontrol-22.05.txt", slurmEnd, ""},
		{"scontrol, no time limit", parseScontrol, "scontrol-22.05-unlimited.txt", time.Time{}, ""},
		// stime + Resource_List.walltime.
		{"qstat, PBS Pro", parseQstat, "qstat-pbspro.txt", localTime(t, time.DateTime, "2024-03-05 12:31:02"), ""},
		// Resource_List.walltime - resources_used.walltime, from now.
		{"qstat, PBS Pro without stime", parseQstat, "qstat-pbspro-nostime.txt", now.Add(2*time.Hour - 5*time.Minute - 12*time.Second), ""},
		{"qstat, no walltime limit", parseQstat, "qstat-pbspro-nolimit.txt", time.Time{}, ""},
		// Walltime.Remaining.
		{"qstat, Torque", parseQstat, "qstat-torque.txt", now.Add(7080 * time.Second), ""},
		{"bjobs, hours:minutes", parseBjobs, "bjobs-time_left.txt", now.Add(time.Hour + 54*time.Minute), ""},
		{"bjobs, LSB_HMS_TIME_FORMAT", parseBjobs, "bjobs-time_left-hms.txt", now.Add(time.Hour + 54*time.Minute + 30*time.Second), ""},
		{"bjobs, no run limit", parseBjobs, "bjobs-time_left-nolimit.txt", time.Time{}, ""},
		{"bjobs, estimated run time", parseBjobs, "bjobs-time_left-estimated.txt", time.Time{}, "estimated run time"},
		{"squeue, an error on stdout", parseSqueue, "bjobs-time_left-nolimit.txt", time.Time{}, "want the end and the time limit"},
		{"scontrol, not a job", parseScontrol, "squeue-22.05.txt", time.Time{}, "no EndTime="},
		{"qstat, not qstat -f", parseQstat, "squeue-22.05.txt", time.Time{}, "no attributes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.parse(sample(t, tc.sample), now)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error saying %q", got, err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case !got.Equal(tc.want):
				t.Fatalf("end %v, want %v", got, tc.want)
			}
		})
	}
}

// fakeBatch answers each command from a table, and records the calls.
type fakeBatch struct {
	answers map[string]string // command name: sample file; absent: fails
	calls   []string
}

func (f *fakeBatch) run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	s, ok := f.answers[name]
	if !ok {
		return nil, errors.New("exit status 1 (slurm_load_jobs error: Invalid job id specified)")
	}
	return os.ReadFile(filepath.Join("testdata", "batch", s))
}

// The environment goes first; a job ID then asks its batch system; squeue
// that fails falls back to scontrol; a batch system that answers nothing
// useful is ErrBatchLookup naming each command, and a bad environment
// value a plain error.
func TestBatchDeadlineSources(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	slurmEnd := localTime(t, slurmTimeLayout, "2026-12-04T22:45:48")
	for _, tc := range []struct {
		name      string
		env       map[string]string
		answers   map[string]string
		want      time.Time
		wantSrc   string
		wantCalls []string
		wantErr   string
		lookupErr bool
	}{
		{name: "outside a batch job", want: time.Time{}},
		{name: "SLURM_JOB_END_TIME first", env: map[string]string{"SLURM_JOB_END_TIME": "1700007200", "SLURM_JOB_ID": "7"},
			want: time.Unix(1700007200, 0), wantSrc: "SLURM_JOB_END_TIME"},
		{name: "PBS_WALLTIME", env: map[string]string{"PBS_WALLTIME": "3600", "PBS_JOBID": "4321.pbs01"},
			want: now.Add(time.Hour), wantSrc: "PBS_WALLTIME"},
		{name: "bad SLURM_JOB_END_TIME", env: map[string]string{"SLURM_JOB_END_TIME": "soon"}, wantErr: "is not a Unix time"},
		{name: "squeue", env: map[string]string{"SLURM_JOB_ID": "7"}, answers: map[string]string{"squeue": "squeue-22.05.txt"},
			want: slurmEnd, wantSrc: "squeue -h -j 7 -o %e %l", wantCalls: []string{"squeue -h -j 7 -o %e %l"}},
		{name: "scontrol when squeue fails", env: map[string]string{"SLURM_JOB_ID": "7"}, answers: map[string]string{"scontrol": "scontrol-22.05.txt"},
			want: slurmEnd, wantSrc: "scontrol show job 7", wantCalls: []string{"squeue -h -j 7 -o %e %l", "scontrol show job 7"}},
		{name: "Slurm does not answer", env: map[string]string{"SLURM_JOB_ID": "7"},
			wantCalls: []string{"squeue -h -j 7 -o %e %l", "scontrol show job 7"}, wantErr: "squeue -h -j 7 -o %e %l: exit status 1", lookupErr: true},
		{name: "qstat", env: map[string]string{"PBS_JOBID": "1234.torque01"}, answers: map[string]string{"qstat": "qstat-torque.txt"},
			want: now.Add(7080 * time.Second), wantSrc: "qstat -f 1234.torque01", wantCalls: []string{"qstat -f 1234.torque01"}},
		{name: "bjobs", env: map[string]string{"LSB_JOBID": "55"}, answers: map[string]string{"bjobs": "bjobs-time_left.txt"},
			want: now.Add(114 * time.Minute), wantSrc: "bjobs -noheader -o time_left 55", wantCalls: []string{"bjobs -noheader -o time_left 55"}},
		{name: "bjobs, an estimate only", env: map[string]string{"LSB_JOBID": "55"}, answers: map[string]string{"bjobs": "bjobs-time_left-estimated.txt"},
			wantCalls: []string{"bjobs -noheader -o time_left 55"}, wantErr: "not the run limit", lookupErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fb := &fakeBatch{answers: tc.answers}
			got, src, err := batchDeadline(context.Background(), func(k string) string { return tc.env[k] }, fb.run, now)
			if !slices.Equal(fb.calls, tc.wantCalls) {
				t.Errorf("commands %q, want %q", fb.calls, tc.wantCalls)
			}
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.Is(err, ErrBatchLookup) != tc.lookupErr {
					t.Fatalf("got %v from %q, error %v; want an error saying %q (ErrBatchLookup: %t)", got, src, err, tc.wantErr, tc.lookupErr)
				}
			case err != nil:
				t.Fatal(err)
			case !got.Equal(tc.want) || src != tc.wantSrc:
				t.Fatalf("end %v from %q, want %v from %q", got, src, tc.want, tc.wantSrc)
			}
		})
	}
}
