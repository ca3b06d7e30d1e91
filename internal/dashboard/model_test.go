package dashboard

import (
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
)

// A budget raised by `evoq run extend` (or a continued run's larger
// budget) counts the designs beyond the old one, whether the controller
// hands it over with its results or the record says so; without it they
// would be foreign to the fold, and the page's count would stop.
func TestModelBudgetRaised(t *testing.T) {
	t.Parallel()
	rec := &schema.Run{V: schema.Version, Run: "r", Budget: 10, Init: 5, Pool: 5, Replace: "worst", Phase: schema.PhaseRunning}
	feed := func(m *Model, from, to uint64) {
		t0 := time.Now()
		for seq := from; seq <= to; seq++ {
			id := schema.DesignID("r", seq)
			m.Result(seq, t0, &schema.Result{Run: "r", DesignID: id, Design: schema.Design{Run: "r", ID: id, Seq: seq, Origin: schema.OriginRandom},
				Status: schema.StatusOK, Fitness: float64(seq), Worker: "w", Attempt: 1, Start: t0, Stop: t0}, nil)
		}
	}
	for _, tc := range []struct {
		name  string
		raise func(m *Model)
		want  int
	}{
		{"not raised", func(*Model) {}, 10},
		{"raised by the controller", func(m *Model) { m.RaiseBudget(20) }, 20},
		{"raised by the record", func(m *Model) { r := *rec; r.Budget = 20; m.Record(&r) }, 20},
	} {
		m, err := NewModel("r", rec)
		if err != nil {
			t.Fatal(err)
		}
		feed(m, 1, 10)
		tc.raise(m)
		feed(m, 11, 20)
		if got := m.fold.Terminal(); got != tc.want {
			t.Errorf("%s: %d designs counted, want %d", tc.name, got, tc.want)
		}
	}
}

// Once nothing folds the feed's queue (the dashboard stopped, or never
// got its model), results handed to it are dropped, not kept for ever.
func TestFeedClosedDrops(t *testing.T) {
	t.Parallel()
	f := newFeed()
	f.add(1, &schema.Result{}, nil, 10)
	f.close()
	f.add(2, &schema.Result{}, nil, 10)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) != 0 {
		t.Errorf("%d results queued after the feed closed, want none", len(f.pending))
	}
}
