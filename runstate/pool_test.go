package runstate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/evoq/evoq/schema"
)

// member makes a pool member for design seq of run "t".
func member(seq uint64, fitness float64) Member {
	return Member{Design: schema.Design{Run: "t", ID: schema.DesignID("t", seq), Seq: seq}, Fitness: fitness}
}

func ids(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Design.ID
	}
	return out
}

// fill adds members with the given fitness values, seq 1, 2, ..., and
// returns the evicted IDs in order ("" while the pool fills).
func fill(p *Pool, fitness ...float64) []string {
	var evicted []string
	for i, f := range fitness {
		evicted = append(evicted, p.Add(member(uint64(i+1), f)))
	}
	return evicted
}

func TestPoolAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		size        int
		replace     Replace
		fitness     []float64
		wantMembers []string
		wantEvicted []string
	}{
		{
			name: "worst: filling evicts nothing", size: 3, replace: ReplaceWorst,
			fitness:     []float64{1, 2, 3},
			wantMembers: []string{"t-1", "t-2", "t-3"},
			wantEvicted: []string{"", "", ""},
		},
		{
			name: "worst: keeps the best, oldest first", size: 3, replace: ReplaceWorst,
			fitness:     []float64{5, 1, 3, 1, 4, 2},
			wantMembers: []string{"t-1", "t-3", "t-5"},
			wantEvicted: []string{"", "", "", "t-2", "t-4", "t-6"},
		},
		{
			name: "worst: the oldest of equally bad ones goes", size: 2, replace: ReplaceWorst,
			fitness:     []float64{1, 1, 1, 1},
			wantMembers: []string{"t-3", "t-4"},
			wantEvicted: []string{"", "", "t-1", "t-2"},
		},
		{
			name: "worst: a new worst member is evicted at once", size: 2, replace: ReplaceWorst,
			fitness:     []float64{7, 8, -1},
			wantMembers: []string{"t-1", "t-2"},
			wantEvicted: []string{"", "", "t-3"},
		},
		{
			name: "worst: infeasible fitness goes first", size: 2, replace: ReplaceWorst,
			fitness:     []float64{0.5, schema.InfeasibleFitness, 0.1},
			wantMembers: []string{"t-1", "t-3"},
			wantEvicted: []string{"", "", "t-2"},
		},
		{
			name: "oldest: keeps the last size in insertion order", size: 3, replace: ReplaceOldest,
			fitness:     []float64{9, 1, 8, 2, 7, 3},
			wantMembers: []string{"t-4", "t-5", "t-6"},
			wantEvicted: []string{"", "", "", "t-1", "t-2", "t-3"},
		},
		{
			name: "oldest: evicts the best when it is oldest", size: 1, replace: ReplaceOldest,
			fitness:     []float64{100, -100},
			wantMembers: []string{"t-2"},
			wantEvicted: []string{"", "t-1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := NewPool(tt.size, tt.replace)
			evicted := fill(p, tt.fitness...)
			if got := ids(p.Members()); !reflect.DeepEqual(got, tt.wantMembers) {
				t.Errorf("members = %v, want %v", got, tt.wantMembers)
			}
			if !reflect.DeepEqual(evicted, tt.wantEvicted) {
				t.Errorf("evicted = %q, want %q", evicted, tt.wantEvicted)
			}
			if p.Len() != len(tt.wantMembers) {
				t.Errorf("Len = %d, want %d", p.Len(), len(tt.wantMembers))
			}
		})
	}
}

// TestPoolKeepsBest checks replace worst against a sort on a long random
// sequence: the pool holds the size best, ties to the newest.
func TestPoolKeepsBest(t *testing.T) {
	t.Parallel()
	const size, n = 7, 500
	r := rand.New(rand.NewPCG(1, 2))
	p := NewPool(size, ReplaceWorst)
	fitness := make([]float64, n)
	for i := range fitness {
		fitness[i] = float64(r.IntN(40)) // many ties
		p.Add(member(uint64(i+1), fitness[i]))
	}
	// Expected: for each member kept, fewer than size designs beat it,
	// counting a later design of equal fitness as beating it.
	var want []string
	for i, f := range fitness {
		better := 0
		for j, g := range fitness {
			if g > f || (g == f && j > i) {
				better++
			}
		}
		if better < size {
			want = append(want, schema.DesignID("t", uint64(i+1)))
		}
	}
	if got := ids(p.Members()); !reflect.DeepEqual(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
}

func TestParseReplace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Replace
		ok   bool
	}{
		{"worst", ReplaceWorst, true},
		{"oldest", ReplaceOldest, true},
		{"", "", false},
		{"Worst", "", false},
		{"best", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseReplace(tt.in)
			if got != tt.want || (err == nil) != tt.ok {
				t.Fatalf("ParseReplace(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
			if !tt.ok && err.Error() != fmt.Sprintf("--replace %q: want worst or oldest", tt.in) {
				t.Errorf("error %q does not name the flag and the choices", err)
			}
		})
	}
}

// poolOf makes a pool holding members with fitness 0..n-1 in a scrambled
// order, so that the fittest is not the newest.
func poolOf(n int) *Pool {
	p := NewPool(n, ReplaceOldest)
	for i := range n {
		p.Add(member(uint64(i+1), float64((i*7)%n)))
	}
	return p
}

func TestTournament(t *testing.T) {
	t.Parallel()
	const n, draws = 10, 3000
	tests := []struct {
		name      string
		k         int
		neverWins int // the never-winning ranks: 0..neverWins-1 (fitness = rank)
		onlyBest  bool
	}{
		{"k 1 picks any member", 1, 0, false},
		{"k 0 counts as 1", 0, 0, false},
		{"negative k counts as 1", -3, 0, false},
		{"k 2 never picks the worst", 2, 1, false},
		{"k 5 never picks the 4 worst", 5, 4, false},
		{"k equal to the pool picks the best", n, 0, true},
		{"k above the pool picks the best", n + 5, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := poolOf(n)
			r := rand.New(rand.NewPCG(7, uint64(tt.k+100)))
			wins := make([]int, n)
			for range draws {
				m := p.Tournament(r, tt.k)
				wins[int(m.Fitness)]++
			}
			for rank, w := range wins {
				switch {
				case tt.onlyBest && rank != n-1 && w > 0:
					t.Errorf("rank %d won %d times; only the best (rank %d) may win", rank, w, n-1)
				case tt.onlyBest && rank == n-1 && w != draws:
					t.Errorf("the best won %d of %d times", w, draws)
				case !tt.onlyBest && rank < tt.neverWins && w > 0:
					t.Errorf("rank %d won %d times; with k=%d it can never be the fittest sampled", rank, w, tt.k)
				case !tt.onlyBest && rank >= tt.neverWins && w == 0:
					t.Errorf("rank %d never won in %d draws with k=%d", rank, draws, tt.k)
				}
			}
			// Winning odds grow with rank: the best must win more often
			// than the weakest possible winner, except for k 1 (uniform).
			if tt.k >= 2 && !tt.onlyBest && wins[n-1] <= wins[tt.neverWins] {
				t.Errorf("wins by rank %v: the best does not beat the weakest winner", wins)
			}
		})
	}
}

// TestTournamentUniform checks that with k 1 every member is picked about
// equally often (a chi-square bound far from the critical value).
func TestTournamentUniform(t *testing.T) {
	t.Parallel()
	const n, draws = 8, 8000
	p := poolOf(n)
	r := rand.New(rand.NewPCG(3, 4))
	wins := make([]float64, n)
	for range draws {
		wins[int(p.Tournament(r, 1).Fitness)]++
	}
	exp := float64(draws) / n
	chi := 0.0
	for _, w := range wins {
		chi += (w - exp) * (w - exp) / exp
	}
	// 7 degrees of freedom: p = 0.0001 at 29.9.
	if chi > 29.9 {
		t.Errorf("wins %v are not uniform: chi-square %.1f", wins, chi)
	}
}

func TestTournamentDeterministic(t *testing.T) {
	t.Parallel()
	draw := func(seed uint64) []string {
		p := poolOf(20)
		r := rand.New(rand.NewPCG(seed, 99))
		var out []string
		for range 50 {
			out = append(out, p.Tournament(r, 3).Design.ID)
		}
		return out
	}
	a, b, c := draw(1), draw(1), draw(2)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("same seed, different picks:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Errorf("seeds 1 and 2 gave the same 50 picks %v", a)
	}
}

// TestTournamentTies checks that equally fit members can all win: the
// first sampled wins a tie, and sampling is uniform.
func TestTournamentTies(t *testing.T) {
	t.Parallel()
	p := NewPool(4, ReplaceWorst)
	fill(p, 1, 1, 1, 1)
	r := rand.New(rand.NewPCG(5, 5))
	seen := map[string]int{}
	for range 400 {
		seen[p.Tournament(r, 2).Design.ID]++
	}
	if len(seen) != 4 {
		t.Errorf("winners among 4 equal members: %v, want all 4", seen)
	}
}

func TestDigest(t *testing.T) {
	t.Parallel()
	digest := func(replace Replace, size int, ms ...Member) string {
		p := NewPool(size, replace)
		for _, m := range ms {
			p.Add(m)
		}
		return p.Digest()
	}
	base := digest(ReplaceWorst, 5, member(1, 0.5), member(2, 0.25), member(3, 0.75))
	tests := []struct {
		name  string
		got   string
		equal bool
	}{
		{"same sequence", digest(ReplaceWorst, 5, member(1, 0.5), member(2, 0.25), member(3, 0.75)), true},
		{"same members via another policy", digest(ReplaceOldest, 5, member(1, 0.5), member(2, 0.25), member(3, 0.75)), true},
		{"same members after evictions", digest(ReplaceWorst, 3, member(9, -1), member(1, 0.5), member(2, 0.25), member(3, 0.75)), true},
		{"another order", digest(ReplaceWorst, 5, member(2, 0.25), member(1, 0.5), member(3, 0.75)), false},
		{"another fitness", digest(ReplaceWorst, 5, member(1, 0.5), member(2, 0.2500001), member(3, 0.75)), false},
		{"a member more", digest(ReplaceWorst, 5, member(1, 0.5), member(2, 0.25), member(3, 0.75), member(4, 0)), false},
		{"another design", digest(ReplaceWorst, 5, member(1, 0.5), member(2, 0.25), member(4, 0.75)), false},
		{"a member fewer", digest(ReplaceWorst, 5, member(1, 0.5), member(2, 0.25)), false},
		{"empty", digest(ReplaceWorst, 5), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if (tt.got == base) != tt.equal {
				t.Errorf("digest %s vs %s: equal = %v, want %v", tt.got, base, tt.got == base, tt.equal)
			}
			if len(tt.got) != 16 {
				t.Errorf("digest %q is %d hex digits, want 16", tt.got, len(tt.got))
			}
		})
	}
}

// TestDigestSeparatesIDs checks that the ID boundary is part of the hash:
// IDs that concatenate alike do not collide.
func TestDigestSeparatesIDs(t *testing.T) {
	t.Parallel()
	a := NewPool(2, ReplaceWorst)
	a.Add(Member{Design: schema.Design{ID: "ab"}, Fitness: 1})
	b := NewPool(2, ReplaceWorst)
	b.Add(Member{Design: schema.Design{ID: "a"}, Fitness: 1})
	if a.Digest() == b.Digest() {
		t.Errorf("pools of %q and %q share digest %s", "ab", "a", a.Digest())
	}
}

// Tournament draws k distinct members uniformly and the fittest wins.
func TestTournamentDistinctUniform(t *testing.T) {
	p := NewPool(4, ReplaceWorst)
	for i := range 4 {
		p.Add(Member{Design: schema.Design{ID: schema.DesignID("t", uint64(i+1)), Seq: uint64(i + 1)}, Fitness: float64(i)})
	}
	r := rand.New(rand.NewPCG(3, 4))
	wins := map[float64]int{}
	const n = 60000
	for range n {
		wins[p.Tournament(r, 2).Fitness]++
	}
	// Pairs of distinct members: 6; member i wins the i pairs with a
	// less fit member: P = i/6.
	for i := range 4 {
		want := float64(i) / 6
		if got := float64(wins[float64(i)]) / n; math.Abs(got-want) > 0.01 {
			t.Errorf("member %d won %.3f of tournaments of 2, want %.3f", i, got, want)
		}
	}
	if p.Tournament(r, 9).Fitness != 3 {
		t.Error("a tournament of the whole pool must pick the fittest")
	}
}
