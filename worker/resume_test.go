package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/schema"
	"github.com/sirupsen/logrus"
)

func TestProgressLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		step int64
		ok   bool
	}{
		{`{"progress": {"step": 3}}`, 3, true},
		{` {"progress":{"step":0}} `, 0, true},
		{`{"progress": {"step": -1}}`, 0, false},
		{`{"progress": {"step": 1.5}}`, 0, false},
		{`{"progress": {}}`, 0, false},
		{`{"progress": {"step": 2}, "fitness": 1}`, 0, false}, // a result, not a save
		{`{"report": {"step": 2, "fitness": 1}}`, 0, false},
		{`training progress: 30%`, 0, false},
		{`{"progress": 3}`, 0, false},
	} {
		step, ok := progressLine(tc.line)
		if ok != tc.ok || step != tc.step {
			t.Errorf("progressLine(%q) = %d, %v; want %d, %v", tc.line, step, ok, tc.step, tc.ok)
		}
	}
}

// progressBundle is a worker's side of a shared-directory store.
func progressBundle(t *testing.T) *ckpts {
	t.Helper()
	s, err := checkpoint.OpenDir(t.TempDir(), "r")
	if err != nil {
		t.Fatal(err)
	}
	return &ckpts{store: s, cfg: schema.Checkpoints{Store: schema.CheckpointDir, Max: 1 << 20}, progDir: t.TempDir()}
}

// A save stored by one attempt is what the next attempt of the design
// starts from, byte for byte, with its step and training time; the newest
// save replaces the one before.
func TestProgressRoundTrip(t *testing.T) {
	t.Parallel()
	c := progressBundle(t)
	ctx, log := context.Background(), logrus.New()
	d := &schema.Design{Run: "r", ID: "r-1", Seq: 1}
	first := c.progressFor(ctx, log, d, design{}, "w-0-0-1")
	if first.in != "" || first.note != "" {
		t.Fatalf("a design with no saved progress: in %q, note %q", first.in, first.note)
	}
	for _, s := range []struct {
		step int64
		body string
	}{{1, "one"}, {2, "two"}} {
		if err := os.WriteFile(first.out, []byte(s.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := first.store(ctx, s.step, first.saved); err != nil {
			t.Fatal(err)
		}
		first.saved = s.step
	}
	if err := first.store(ctx, 2, first.saved); err == nil {
		t.Error("a save at a step not after the last was stored")
	}
	next := c.progressFor(ctx, log, d, design{}, "w-0-0-2")
	got, err := os.ReadFile(next.in)
	if err != nil || string(got) != "two" || next.from != 2 || next.fromSec < 0 {
		t.Fatalf("the next attempt starts from %q (%v) at step %d; want the last save, two, at 2", got, err, next.from)
	}
	res := &schema.Result{}
	next.firstReport(3)
	next.settle(res)
	if res.ResumedFrom != 2 || res.Metrics[ProgressMetric] != nil {
		t.Errorf("result: resumed_from %d, metrics %v; want 2", res.ResumedFrom, res.Metrics)
	}
	if _, err := os.Stat(next.in); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the attempt's progress file outlived it: %v", err)
	}
	// An evaluator whose first report is at or before the resume point
	// did not resume: it trained from scratch.
	again := c.progressFor(ctx, log, d, design{}, "w-0-0-3")
	again.firstReport(1)
	res = &schema.Result{}
	again.settle(res)
	if res.ResumedFrom != 0 {
		t.Errorf("an attempt that reported from step 1 resumed_from %d, want 0", res.ResumedFrom)
	}
}

// A progress object that cannot be used makes the design start from
// scratch, its result saying why; never an error.
func TestProgressUnusable(t *testing.T) {
	t.Parallel()
	c := progressBundle(t)
	ctx, log := context.Background(), logrus.New()
	put := func(design, data string) {
		p := c.store.OutPath(progressName(design), "t")
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.store.Put(ctx, progressName(design), p); err != nil {
			t.Fatal(err)
		}
	}
	put("r-1", "garbage with no header")
	put("r-2", `{"evoq_progress":1,"design":"r-9","step":3,"size":1,"sha256":"00"}`+"\nx")
	put("r-3", `{"evoq_progress":2,"design":"r-3","step":3,"size":1,"sha256":"00"}`+"\nx")
	put("r-4", `{"evoq_progress":1,"design":"r-4","step":3,"size":1,"sha256":"00"}`+"\nx")
	put("r-5", `{"evoq_progress":1,"design":"r-5","step":3,"size":5,"sha256":"00"}`+"\nx")
	for id, want := range map[string]string{"r-1": "no header", "r-2": "of design", "r-3": "format 2",
		"r-4": "SHA-256", "r-5": "1 bytes"} {
		a := c.progressFor(ctx, log, &schema.Design{Run: "r", ID: id}, design{}, "t2")
		res := &schema.Result{}
		a.settle(res)
		why, _ := res.Metrics[ProgressMetric].(string)
		if a.in != "" || res.ResumedFrom != 0 || !strings.Contains(why, want) {
			t.Errorf("%s: in %q, resumed_from %d, %s %q; want from scratch, saying %q", id, a.in, res.ResumedFrom, ProgressMetric, why, want)
		}
		if left, _ := filepath.Glob(filepath.Join(c.progDir, id+"*")); len(left) != 0 {
			t.Errorf("%s: files left: %v", id, left)
		}
	}
}

// TestStoreWaitGrowsWithSize: a save has the fixed wait for its commit plus
// its upload at ProgressUploadRate, so that a large progress file is not
// cut off by the wait meant for the commit.
func TestStoreWaitGrowsWithSize(t *testing.T) {
	for _, c := range []struct {
		size int64
		want time.Duration
	}{
		{0, ProgressStoreWait},
		{-1, ProgressStoreWait},
		{ProgressUploadRate, ProgressStoreWait + time.Second},
		{50 * ProgressUploadRate, ProgressStoreWait + 50*time.Second},
		{ProgressUploadRate / 2, ProgressStoreWait + 500*time.Millisecond},
	} {
		if got := storeWait(c.size); got != c.want {
			t.Errorf("storeWait(%d) = %v, want %v", c.size, got, c.want)
		}
	}
	// A 1 GiB file, which needs more than the fixed wait to upload, has
	// time for it.
	if got := storeWait(1 << 30); got <= ProgressStoreWait+100*time.Second {
		t.Errorf("storeWait(1 GiB) = %v, not more than the fixed wait plus 100 s", got)
	}
}
