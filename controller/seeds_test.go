package controller

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// storeResult publishes one result of design seq of run with genome g.
func (bu *bundle) storeResult(t *testing.T, run string, seq uint64, status schema.Status, fitness float64, g map[string]any) {
	t.Helper()
	d := schema.Design{V: schema.Version, Run: run, ID: schema.DesignID(run, seq), Seq: seq,
		Genome: g, Origin: schema.OriginRandom, Created: epoch}
	r := &schema.Result{V: schema.Version, Run: run, DesignID: d.ID, Design: d, Status: status,
		Fitness: fitness, Worker: "w", Attempt: 1, Start: epoch, Stop: epoch.Add(time.Second), Gap: -1}
	data, err := schema.EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bu.js.Publish(bu.ctx, schema.ResultSubject(run), data); err != nil {
		t.Fatal(err)
	}
}

// record stores run's record with budget, as its controller would.
func (bu *bundle) record(t *testing.T, run string, budget int) {
	t.Helper()
	kv, err := bu.js.KeyValue(bu.ctx, schema.RunBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := schema.EncodeRun(&schema.Run{Run: run, Phase: schema.PhaseDone, Budget: budget, Created: epoch, Updated: epoch})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(bu.ctx, run, data); err != nil {
		t.Fatal(err)
	}
}

func TestSeedsFrom(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	for _, run := range []string{"old", "alien", "failed"} {
		bu.record(t, run, 10)
	}
	r := rand.New(rand.NewPCG(1, 2))
	fitness := []float64{0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6} // designs 1..8, ok
	genomes := map[uint64]map[string]any{}
	for i, f := range fitness {
		seq := uint64(i + 1)
		genomes[seq] = bu.space.Random(r)
		bu.storeResult(t, "old", seq, schema.StatusOK, f, genomes[seq])
	}
	bu.storeResult(t, "old", 9, schema.StatusError, schema.InfeasibleFitness, bu.space.Random(r))
	// The best, but outside the space: left out.
	bu.storeResult(t, "old", 10, schema.StatusOK, 0.95, map[string]any{"x": int64(1)})
	// Design 2 evaluated again, better: the first result counts.
	bu.storeResult(t, "old", 2, schema.StatusOK, 0.99, bu.space.Random(r))
	bu.storeResult(t, "alien", 1, schema.StatusOK, 0.5, map[string]any{"x": int64(1)})
	bu.storeResult(t, "failed", 1, schema.StatusError, schema.InfeasibleFitness, bu.space.Random(r))

	want := func(seqs ...uint64) []map[string]any {
		var out []map[string]any
		for _, s := range seqs {
			g, err := bu.space.Validate(genomes[s])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, g)
		}
		return out
	}
	cases := []struct {
		name    string
		run     string
		n       int
		want    []map[string]any
		wantErr error
	}{
		{name: "best n less those outside the space", run: "old", n: 3, want: want(2, 6)},
		{name: "n defaults to InitDefault", run: "old", n: 0, want: want(2, 6, 4, 8, 1, 5, 7, 3)},
		{name: "every design outside the space", run: "alien", n: 5, wantErr: ErrNoSeeds},
		{name: "no design evaluated ok", run: "failed", n: 5, wantErr: ErrNoSeeds},
		{name: "no such run", run: "none", n: 5, wantErr: ErrNoSeeds},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SeedsFrom(bu.ctx, bu.js, tc.run, bu.space, tc.n, bu.log)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("SeedsFrom: %v, want %v", err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("seeds:\n%v\nwant:\n%v", got, tc.want)
			}
		})
	}
	if _, err := SeedsFrom(bu.ctx, bu.js, "old", nil, 3, bu.log); !errors.Is(err, ErrConfig) {
		t.Fatalf("SeedsFrom without a space: %v, want ErrConfig", err)
	}
}
