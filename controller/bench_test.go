package controller

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/evoq/evoq/runstate"

	"github.com/evoq/evoq/schema"
)

func benchMember(seq uint64, fitness float64) runstate.Member {
	return runstate.Member{Design: schema.Design{Run: "bench", ID: schema.DesignID("bench", seq), Seq: seq,
		Genome: map[string]any{"x": fitness}}, Fitness: fitness}
}

// Pool insert with eviction, for pool sizes from the default to large.
func BenchmarkPoolAdd(b *testing.B) {
	for _, size := range []int{10, 100, 1000} {
		for _, replace := range []runstate.Replace{runstate.ReplaceWorst, runstate.ReplaceOldest} {
			b.Run(string(replace)+"-"+itoa(size), func(b *testing.B) {
				p, r := runstate.NewPool(size, replace), rand.New(rand.NewPCG(1, 2))
				seq := uint64(0)
				for b.Loop() {
					seq++
					p.Add(benchMember(seq, r.Float64()))
				}
			})
		}
	}
}

// Tournament selection of size 3.
func BenchmarkTournament(b *testing.B) {
	for _, size := range []int{10, 100, 1000} {
		b.Run(itoa(size), func(b *testing.B) {
			p, r := runstate.NewPool(size, runstate.ReplaceWorst), rand.New(rand.NewPCG(1, 2))
			for i := range size {
				p.Add(benchMember(uint64(i+1), r.Float64()))
			}
			for b.Loop() {
				p.Tournament(r, 3)
			}
		})
	}
}

// The fold of one result: dedupe, counts, statistics, pool.
func BenchmarkFoldApply(b *testing.B) {
	f, r := runstate.NewFold(runstate.NewTally("bench", 1<<30, runstate.Rules{}), 20, 10, runstate.ReplaceWorst), rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	seq := uint64(0)
	for b.Loop() {
		seq++
		m := benchMember(seq, r.Float64())
		f.Apply(&schema.Result{Run: "bench", DesignID: m.Design.ID, Design: m.Design, Status: schema.StatusOK,
			Fitness: m.Fitness, Worker: "w", Slot: int(seq % 8), Attempt: 1, Start: start, Stop: start.Add(time.Second)}, nil)
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}
