package runstate

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/evoq/evoq/pareto"
	"github.com/evoq/evoq/schema"
)

// Replace is the pool's replacement policy.
type Replace string

// Replacement policies.
const (
	// ReplaceWorst adds every new result and evicts the worst member (the
	// oldest of equally bad ones): steady-state elitism.
	ReplaceWorst Replace = "worst"
	// ReplaceOldest adds every new result and evicts the oldest member:
	// regularized (aging) evolution.
	ReplaceOldest Replace = "oldest"
)

// ParseReplace checks a --replace value.
func ParseReplace(s string) (Replace, error) {
	switch r := Replace(s); r {
	case ReplaceWorst, ReplaceOldest:
		return r, nil
	}
	return "", fmt.Errorf("--replace %q: want worst or oldest", s)
}

// Member is one evaluated design in the pool.
type Member struct {
	Design  schema.Design
	Fitness float64
	// Point is its objectives, oriented to minimize, and its constraint
	// violation, in a pool ranked by domination; empty otherwise.
	Point pareto.Point
	// Cost is the slot-seconds its evaluation took, resumed training
	// included; for a design stopped early, what its training would have
	// cost to its end at the rate it trained (Fold's stoppedCost); 0 when
	// unknown.
	Cost float64
}

// Pool is the bounded population of the search. Members are kept oldest
// first. It is a pure value: the same results in the same order give the
// same pool.
//
// A pool of several objectives (or constraints) ranks its members by
// constraint domination: it keeps the best by non-domination rank, then
// crowding distance, and its tournaments compare the same way (see
// pareto.Pool). Otherwise it keeps the fittest, or the youngest.
type Pool struct {
	size    int
	replace Replace
	members []Member
	ranked  *pareto.Pool[Member] // the members of a pool ranked by domination
	costTie float64              // see SetCostTie
}

// SetCostTie makes tournaments compare two members whose fitness differ
// by at most tie by their Cost, the cheaper winning, when both have one:
// among designs about as good, the one that costs less to evaluate is
// the better parent when cost is heritable (a smaller network trains
// faster). 0 compares fitness alone; a pool ranked by domination ignores
// it.
func (p *Pool) SetCostTie(tie float64) { p.costTie = tie }

// fitter reports whether a beats b in a tournament of a pool of one
// fitness.
func (p *Pool) fitter(a, b Member) bool {
	if p.costTie > 0 && a.Cost > 0 && b.Cost > 0 && a.Cost != b.Cost && math.Abs(a.Fitness-b.Fitness) <= p.costTie {
		return a.Cost < b.Cost
	}
	return a.Fitness > b.Fitness
}

// NewPool returns an empty pool of at most size members.
func NewPool(size int, replace Replace) *Pool {
	return &Pool{size: size, replace: replace, members: make([]Member, 0, size+1)}
}

// NewRankedPool returns an empty pool of at most size members ranked by
// domination: members must carry their Point.
func NewRankedPool(size int) *Pool {
	return &Pool{size: size, ranked: pareto.NewPool[Member](size)}
}

// Ranked reports whether the pool ranks by domination.
func (p *Pool) Ranked() bool { return p.ranked != nil }

// Len is the number of members.
func (p *Pool) Len() int { return len(p.Members()) }

// Members returns the members, oldest first. The slice is the pool's own:
// do not modify it.
func (p *Pool) Members() []Member {
	if p.ranked != nil {
		return p.ranked.Items()
	}
	return p.members
}

// Front is the pool's non-dominated feasible members, oldest first; in a
// pool of one fitness, the fittest (the oldest of equals).
func (p *Pool) Front() []Member {
	if p.ranked != nil {
		var out []Member
		for _, i := range p.ranked.Front() {
			out = append(out, p.ranked.Item(i))
		}
		return out
	}
	if len(p.members) == 0 {
		return nil
	}
	b := 0
	for i, m := range p.members {
		if m.Fitness > p.members[b].Fitness {
			b = i
		}
	}
	return []Member{p.members[b]}
}

// Add inserts m and, when the pool is over its size, evicts one member by
// the replacement policy. It returns the evicted member's design ID, or ""
// while the pool fills.
func (p *Pool) Add(m Member) string {
	if p.ranked != nil {
		if ev, ok := p.ranked.Add(m, m.Point); ok {
			return ev.Design.ID
		}
		return ""
	}
	p.members = append(p.members, m)
	if len(p.members) <= p.size {
		return ""
	}
	i := 0
	if p.replace == ReplaceWorst {
		i = p.worst()
	}
	id := p.members[i].Design.ID
	p.members = append(p.members[:i], p.members[i+1:]...)
	return id
}

// worst is the index of the lowest fitness; the oldest wins ties.
func (p *Pool) worst() int {
	w := 0
	for i, m := range p.members {
		if m.Fitness < p.members[w].Fitness {
			w = i
		}
	}
	return w
}

// Tournament samples k distinct members uniformly and returns the fittest
// (the first sampled wins ties). The pool must not be empty.
// In a pool ranked by domination the winner has the lowest rank, then the
// largest crowding distance.
func (p *Pool) Tournament(r *rand.Rand, k int) Member {
	members := p.Members()
	n := len(members)
	better := func(i, j int) bool { return p.fitter(members[i], members[j]) }
	if p.ranked != nil {
		better = p.ranked.Better
	}
	k = min(max(k, 1), n)
	best := -1
	// A partial Fisher-Yates shuffle over a sparse index map: k draws,
	// however large the pool.
	swapped := make(map[int]int, k)
	at := func(i int) int {
		if v, ok := swapped[i]; ok {
			return v
		}
		return i
	}
	for j := range k {
		x := j + r.IntN(n-j)
		i := at(x)
		swapped[x] = at(j)
		if best < 0 || better(i, best) {
			best = i
		}
	}
	return members[best]
}

// Digest is a short hash of the members and their order: two pools with
// the same digest hold the same designs with the same fitness (and, ranked
// by domination, the same objectives and violation) in the same order.
func (p *Pool) Digest() string { return digest(p.Members()) }

// FrontDigest is Digest of the front alone.
func (p *Pool) FrontDigest() string { return digest(p.Front()) }

func digest(members []Member) string {
	h := sha256.New()
	var b [8]byte
	put := func(f float64) {
		binary.BigEndian.PutUint64(b[:], math.Float64bits(f))
		h.Write(b[:])
	}
	for _, m := range members {
		h.Write([]byte(m.Design.ID))
		h.Write([]byte{0})
		put(m.Fitness)
		if m.Point.Obj != nil {
			for _, v := range m.Point.Obj {
				put(v)
			}
			put(m.Point.Violation)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
