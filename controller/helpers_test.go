package controller

import (
	"time"

	"github.com/evoq/evoq/runstate"
	"github.com/evoq/evoq/schema"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// result makes a terminal result of the random design seq of run "t",
// evaluated on slot seq%4 from second seq to seq+1.
func result(seq uint64, status schema.Status, fitness float64) *schema.Result {
	d := schema.Design{V: schema.Version, Run: "t", ID: schema.DesignID("t", seq), Seq: seq,
		Genome: map[string]any{"x": int64(seq)}, Origin: schema.OriginRandom, Created: epoch}
	r := &schema.Result{V: schema.Version, Run: "t", DesignID: d.ID, Design: d, Status: status,
		Fitness: fitness, Worker: "w", Slot: int(seq % 4), Attempt: 1,
		Start: epoch.Add(time.Duration(seq) * time.Second), Gap: -1}
	r.Stop = r.Start.Add(time.Second)
	if status == schema.StatusLost {
		r.Worker, r.Slot, r.Start, r.Stop = "", 0, time.Time{}, time.Time{}
	}
	if status != schema.StatusOK {
		r.Fitness = schema.InfeasibleFitness
	}
	return r
}

// testFold is a fold of run "t" with a budget no test reaches.
func testFold(init, pool int, replace runstate.Replace) *runstate.Fold {
	return runstate.NewFold(runstate.NewTally("t", 1<<30, runstate.Rules{}), init, pool, replace)
}

const notFound = "evaluator exit status 127; stderr tail: sh: 1: nonexistent-prog: not found"

func ids(ms []runstate.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Design.ID
	}
	return out
}
