package controller

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"

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
}

// Pool is the bounded population of the search. Members are kept oldest
// first. It is a pure value: the same results in the same order give the
// same pool.
type Pool struct {
	size    int
	replace Replace
	members []Member
}

// NewPool returns an empty pool of at most size members.
func NewPool(size int, replace Replace) *Pool {
	return &Pool{size: size, replace: replace, members: make([]Member, 0, size+1)}
}

// Len is the number of members.
func (p *Pool) Len() int { return len(p.members) }

// Members returns the members, oldest first. The slice is the pool's own:
// do not modify it.
func (p *Pool) Members() []Member { return p.members }

// Add inserts m and, when the pool is over its size, evicts one member by
// the replacement policy. It returns the evicted member's design ID, or ""
// while the pool fills.
func (p *Pool) Add(m Member) string {
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
func (p *Pool) Tournament(r *rand.Rand, k int) Member {
	n := len(p.members)
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
		if best < 0 || p.members[i].Fitness > p.members[best].Fitness {
			best = i
		}
	}
	return p.members[best]
}

// Digest is a short hash of the members and their order: two pools with
// the same digest hold the same designs with the same fitness in the same
// order.
func (p *Pool) Digest() string {
	h := sha256.New()
	var b [8]byte
	for _, m := range p.members {
		h.Write([]byte(m.Design.ID))
		h.Write([]byte{0})
		binary.BigEndian.PutUint64(b[:], math.Float64bits(m.Fitness))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
