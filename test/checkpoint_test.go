package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/internal/evaluators"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

// ckptSize is the size of the sim evaluator's checkpoints in these tests:
// several object store chunks.
const ckptSize = 300 << 10

// checkpointStore opens run's store in a stopped store directory dir, the
// way the controller does.
func checkpointStore(t *testing.T, b *testutil.Broker, run string) checkpoint.Store {
	t.Helper()
	rec := runRecord(t, b, run)
	if rec.Checkpoints == nil {
		t.Fatalf("run %s records no checkpoint settings", run)
	}
	s, err := checkpoint.Open(testutil.Context(t, 10*time.Second), b.JS, run, rec.Checkpoints, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func runRecord(t *testing.T, b *testutil.Broker, run string) *schema.Run {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := b.JS.KeyValue(ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := schema.DecodeRun(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func listed(t *testing.T, s checkpoint.Store) []string {
	t.Helper()
	refs, err := s.List(testutil.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range refs {
		ids = append(ids, r.Design)
	}
	slices.Sort(ids)
	return ids
}

func poolIDs(f *runstate.Fold) []string {
	var ids []string
	for _, m := range f.Pool().Members() {
		ids = append(ids, m.Design.ID)
	}
	slices.Sort(ids)
	return ids
}

// putBytes stores data as design's checkpoint, as a worker would, over
// any it had. Of the object store, with the run's controller stopped: the
// test deletes the checkpoint and commits the new one itself, as only
// the admin may.
func putBytes(t *testing.T, b *testutil.Broker, s checkpoint.Store, design string, data []byte) {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	p := s.OutPath(design, "test")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if o, ok := s.(*checkpoint.Object); ok {
		if err := o.Delete(ctx, design); err != nil {
			t.Fatal(err)
		}
		sub, err := o.Serve(b.JS.Conn(), testutil.Logger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	if _, err := s.Put(ctx, design, p); err != nil {
		t.Fatal(err)
	}
}

var storeCheckedRE = regexp.MustCompile(`checkpoint store checked" checkpoints=(\d+)(?: deleted=\S+)? leftovers=(\d+) orphans=(\d+)`)

// Both stores, end to end with real processes: every mutant of a run with
// --inherit gets its parent's checkpoint, byte for byte (the sim evaluator
// checks them); after 2,000 designs the store holds the pool's 20
// checkpoints and nothing else; a controller that continues the run
// deletes an orphan planted in the store (and, in a directory, an old
// partial file); and a parent checkpoint corrupted in the store gives
// children that train from scratch and say why, not errors.
func TestCheckpoints(t *testing.T) {
	t.Parallel()
	for _, store := range []string{schema.CheckpointObject, schema.CheckpointDir} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			const run, budget, more, init, pool = "ck", 2000, 2300, 40, 20
			dir := t.TempDir()
			args := []string{"run", "--dir", dir, "--listen", "127.0.0.1:0", "--json", "--run", run, "--evaluator", "sim",
				"--sim-mean", "0.004", "--sim-checkpoint", "300KB", "--workers", "2", "--slots", "4", "--gpus", "none"}
			if store == schema.CheckpointObject {
				// The local workers connect with a worker credential: its
				// permissions must cover the run's checkpoint bucket.
				args = append(args, "--auth")
			}
			first := append(slices.Clone(args), "--budget", "2000", "--init", "40", "--pool", "20", "--inherit")
			if store == schema.CheckpointDir {
				first = append(first, "--checkpoint-dir", t.TempDir())
			}
			r := evoq(t, 4*time.Minute, first...)
			if r.code != 0 {
				t.Fatalf("first run: exit %d\n%s", r.code, tail(r.stderr, 3000))
			}
			s := lastJSON(t, r.stdout)
			if s.Evaluations != budget || s.OK != budget {
				t.Fatalf("first run: %d evaluations, %d ok; want %d ok", s.Evaluations, s.OK, budget)
			}
			c := s.Checkpoints
			if c == nil || c.Stored != pool || c.Mutants < budget/2 || c.Inherited != c.Mutants {
				t.Fatalf("first run's checkpoints %+v: want the pool's %d stored, and every mutant (over half the budget) inherited\n%s", c, pool, warnLines(r.stderr))
			}
			st := evoq(t, time.Minute, "status", "--dir", dir, "--run", run, "--json")
			var status struct {
				Checkpoints struct{ Count int } `json:"checkpoints"`
			}
			if err := json.Unmarshal([]byte(st.stdout), &status); err != nil || st.code != 0 {
				t.Fatalf("status --json: exit %d, %v\n%s", st.code, err, st.stderr)
			}
			if status.Checkpoints.Count != pool {
				t.Errorf("status counts %d checkpoints after the run, want the pool's %d", status.Checkpoints.Count, pool)
			}

			b := testutil.StartBrokerDir(t, dir)
			results := storedResults(t, b.JS, run)
			checkOneResultEach(t, results, budget)
			f := fold(results, run, budget, init, pool, runstate.ReplaceWorst)
			cs := checkpointStore(t, b, run)
			if got, want := listed(t, cs), poolIDs(f); !slices.Equal(got, want) {
				t.Fatalf("the store holds %v; want exactly the pool %v", got, want)
			}
			for _, res := range results {
				checkInherited(t, res, ckptSize)
			}

			// Every pool member's bytes change in the store: its children
			// after the restart must find out. An orphan: the checkpoint
			// of a design that left the pool long ago, as a deletion cut
			// short would leave it.
			corrupted := poolIDs(f)
			orphan := results[0].DesignID
			if slices.Contains(corrupted, orphan) {
				t.Fatalf("design %s is still in the pool; pick another orphan", orphan)
			}
			evil := make([]byte, ckptSize)
			for _, id := range corrupted {
				switch store {
				case schema.CheckpointObject:
					putBytes(t, b, cs, id, evil)
				case schema.CheckpointDir:
					rec := runRecord(t, b, run)
					if err := os.WriteFile(filepath.Join(rec.Checkpoints.Dir, run, id+schema.CheckpointSuffix), evil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if store == schema.CheckpointDir {
				rec := runRecord(t, b, run)
				old := filepath.Join(rec.Checkpoints.Dir, run, orphan+".w9-0-0-1"+schema.CheckpointPartial)
				if err := os.WriteFile(old, []byte("half"), 0o644); err != nil {
					t.Fatal(err)
				}
				long := time.Now().Add(-time.Hour)
				if err := os.Chtimes(old, long, long); err != nil {
					t.Fatal(err)
				}
			}
			putBytes(t, b, cs, orphan, evaluators.SimCheckpoint(orphan, ckptSize))
			// The saved progress of a design that ended goes too.
			putBytes(t, b, cs, schema.ProgressName(orphan), []byte("progress"))
			b.NC.Close()
			b.Shutdown()

			// Continued: the settings come from the record, --inherit too.
			r = evoq(t, 4*time.Minute, append(slices.Clone(args), "--budget", "2300")...)
			if r.code != 0 {
				t.Fatalf("continued run: exit %d\n%s", r.code, tail(r.stderr, 3000))
			}
			// A done run can leave one design unacked (its ack lost as the
			// run ended): the continued run evaluates it again, a
			// duplicate that counts once, whose checkpoint may be stored
			// before the store is checked. It is an orphan too.
			m := storeCheckedRE.FindStringSubmatch(r.stderr)
			wantLeft := map[string]string{schema.CheckpointObject: "0", schema.CheckpointDir: "1"}[store]
			deleted := regexp.MustCompile(`deleted="?([^" ]+)`).FindStringSubmatch(lineWith(r.stderr, "checkpoint store checked"))
			if m == nil || m[2] != wantLeft || deleted == nil || !slices.Contains(strings.Split(deleted[1], ","), orphan) ||
				!slices.Contains(strings.Split(deleted[1], ","), schema.ProgressName(orphan)) {
				t.Errorf("the continuing controller's check of the store: want the orphan %s and its progress deleted and %s leftovers\n%s",
					orphan, wantLeft, lineWith(r.stderr, "checkpoint store"))
			}
			if m != nil && (atoi(m[1]) < 21 || m[3] != fmt.Sprint(atoi(m[1])-20)) {
				t.Errorf("the store held %s checkpoints, %s orphans, at the restart; want the pool's 20 and the orphans", m[1], m[3])
			}
			for _, id := range corrupted {
				if deleted != nil && slices.Contains(strings.Split(deleted[1], ","), id) {
					t.Errorf("the restart deleted the checkpoint of pool member %s", id)
				}
			}
			s = lastJSON(t, r.stdout)
			if s.Evaluations != more || s.Error != 0 || s.Checkpoints == nil || s.Checkpoints.Stored != pool {
				t.Fatalf("continued run: %d evaluations, %d errors, checkpoints %+v; want %d, none, the pool's %d", s.Evaluations, s.Error, s.Checkpoints, more, pool)
			}
			firstRun := len(results)
			b = testutil.StartBrokerDir(t, dir)
			results = storedResults(t, b.JS, run)
			f = fold(results, run, more, init, pool, runstate.ReplaceWorst)
			if f.Terminal() != more || f.Count(schema.StatusOK) != more {
				t.Fatalf("the continued run's results count %d designs, %d ok; want %d ok", f.Terminal(), f.Count(schema.StatusOK), more)
			}
			if got, want := listed(t, checkpointStore(t, b, run)), poolIDs(f); !slices.Equal(got, want) {
				t.Errorf("after the continued run the store holds %v; want exactly the pool %v", got, want)
			}
			fromScratch := 0
			// A leftover design evaluated again (see above) stores its
			// checkpoint again, whole: its children may find either.
			again := map[string]bool{}
			for _, res := range results[firstRun:] {
				again[res.DesignID] = true
			}
			for i, res := range results {
				if res.Design.Inherit != nil && again[res.Design.Inherit.Design] {
					continue
				}
				if i < firstRun || res.Design.Inherit == nil || !slices.Contains(corrupted, res.Design.Inherit.Design) {
					checkInherited(t, res, ckptSize)
					continue
				}
				fromScratch++
				why, _ := res.Metrics["inherit_reason"].(string)
				if res.Status != schema.StatusOK || res.Metrics["inherited"] != false || !strings.Contains(why, "corrupt") {
					t.Errorf("child %s of the corrupted %s: status %s, metrics %v; want ok, inherited false, a reason naming the corruption",
						res.DesignID, res.Design.Inherit.Design, res.Status, res.Metrics)
				}
			}
			if fromScratch == 0 {
				t.Errorf("no design of the continued run was a child of a corrupted pool member: nothing was tested")
			}
		})
	}
}

// checkInherited checks that an ok mutant that was told of its parent's
// checkpoint got exactly those bytes (the sim evaluator compares them).
func checkInherited(t *testing.T, res *schema.Result, size int64) {
	t.Helper()
	if res.Status != schema.StatusOK {
		return
	}
	if res.Checkpoint == nil || res.Checkpoint.Size != size {
		t.Errorf("%s: ok without its %d-byte checkpoint stored: %+v %s", res.DesignID, size, res.Checkpoint, res.CheckpointError)
	}
	if res.Design.Origin != schema.OriginMutant || res.Design.Inherit == nil {
		return
	}
	if res.Design.Inherit.Design != res.Design.Parents[0] || res.Metrics["inherited"] != true ||
		res.Metrics[evaluators.MetricParentBytes] != int64(size) {
		t.Errorf("mutant %s of %s: inherit %+v, metrics %v; want its parent's %d bytes, inherited", res.DesignID,
			res.Design.Parents[0], res.Design.Inherit, res.Metrics, size)
	}
}

// The default run, its embedded broker without auth: the local workers
// store checkpoints through the controller's commits, and every mutant
// inherits its parent's.
func TestCheckpointsNoAuth(t *testing.T) {
	t.Parallel()
	s, _ := runJSON(t, 2*time.Minute, "--run", "na", "--evaluator", "sim", "--sim-mean", "0.01", "--sim-checkpoint", "200KB",
		"--inherit", "--budget", "40", "--init", "10", "--pool", "5", "--slots", "2", "--gpus", "none")
	if s.OK != 40 || s.Checkpoints == nil || s.Checkpoints.Stored != 5 || s.Checkpoints.Mutants == 0 ||
		s.Checkpoints.Inherited != s.Checkpoints.Mutants {
		t.Errorf("%d ok, checkpoints %+v; want 40, the pool's 5 stored, every mutant inherited", s.OK, s.Checkpoints)
	}
}

// A checkpoint over --max-checkpoint is refused: the result counts and
// says why, and the store stays empty.
func TestCheckpointTooLarge(t *testing.T) {
	t.Parallel()
	const run = "big"
	s, dir := runJSON(t, 2*time.Minute, "--run", run, "--evaluator", "sim", "--sim-mean", "0.01", "--sim-checkpoint", "64KB",
		"--max-checkpoint", "32KB", "--budget", "30", "--init", "10", "--pool", "5", "--slots", "2", "--gpus", "none")
	if s.OK != 30 || s.Checkpoints == nil || s.Checkpoints.Stored != 0 {
		t.Fatalf("%d ok, checkpoints %+v; want 30 ok and none stored", s.OK, s.Checkpoints)
	}
	exp := evoq(t, time.Minute, "export", "--dir", dir, "--run", run, "--format", "csv")
	_, rows := readCSVRows(t, exp.stdout)
	if exp.code != 0 || len(rows) != 30 {
		t.Fatalf("export: exit %d, %d rows\n%s", exp.code, len(rows), exp.stderr)
	}
	for _, row := range rows {
		if row["checkpoint_bytes"] != "" || !strings.Contains(row["checkpoint_error"], "over the run's limit") {
			t.Errorf("export row of %s: checkpoint_bytes %q, checkpoint_error %q", row["design_id"], row["checkpoint_bytes"], row["checkpoint_error"])
		}
	}
	b := openStore(t, dir)
	for _, res := range storedResults(t, b.JS, run) {
		if res.Checkpoint != nil || !strings.Contains(res.CheckpointError, "over the run's limit of 32768 bytes") {
			t.Errorf("%s: checkpoint %+v, error %q; want none stored and the limit named", res.DesignID, res.Checkpoint, res.CheckpointError)
		}
	}
	if ids := listed(t, checkpointStore(t, b, run)); len(ids) != 0 {
		t.Errorf("the store holds %v", ids)
	}
}

// warnLines are the first distinct warning and error lines of a log.
func warnLines(log string) string {
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(log, "\n") {
		_, rest, ok := strings.Cut(l, "level=")
		if !ok || !(strings.HasPrefix(rest, "warn") || strings.HasPrefix(rest, "error")) || seen[rest] || len(out) == 20 {
			continue
		}
		seen[rest] = true
		out = append(out, rest)
	}
	return strings.Join(out, "\n")
}
