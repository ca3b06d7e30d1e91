package pareto

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func pt(v float64, obj ...float64) Point { return Point{Obj: obj, Violation: v} }

func TestDominates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a, b Point
		want bool
	}{
		{"better in both", pt(0, 1, 1), pt(0, 2, 2), true},
		{"better in one, equal in other", pt(0, 1, 2), pt(0, 2, 2), true},
		{"equal", pt(0, 1, 1), pt(0, 1, 1), false},
		{"trade-off", pt(0, 1, 3), pt(0, 2, 2), false},
		{"worse", pt(0, 3, 3), pt(0, 2, 2), false},
		{"feasible beats infeasible, whatever its objectives", pt(0, 9, 9), pt(0.1, 0, 0), true},
		{"infeasible never beats feasible", pt(0.1, 0, 0), pt(0, 9, 9), false},
		{"smaller violation wins", pt(0.1, 9, 9), pt(0.2, 0, 0), true},
		{"equal violations: neither", pt(0.2, 0, 0), pt(0.2, 9, 9), false},
	} {
		if got := Dominates(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: Dominates(%v, %v) = %v, want %v", tc.name, tc.a, tc.b, got, tc.want)
		}
	}
}

func TestRanks(t *testing.T) {
	t.Parallel()
	ps := []Point{
		pt(0, 1, 4), pt(0, 2, 2), pt(0, 4, 1), // the front
		pt(0, 3, 3), pt(0, 2, 5), // rank 1
		pt(0, 5, 5),   // rank 2
		pt(1, 0, 0),   // infeasible, violation 1
		pt(0.5, 9, 9), // infeasible, violation 0.5: ranks before the other
	}
	got := Ranks(ps)
	want := []int{0, 0, 0, 1, 1, 2, 4, 3}
	if !slices.Equal(got, want) {
		t.Errorf("Ranks = %v, want %v", got, want)
	}
}

// Ranks agrees with the definition on random points: a point's rank is one
// more than the largest rank among the points that dominate it.
func TestRanksDefinition(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		ps := make([]Point, 60)
		for i := range ps {
			ps[i] = pt(0, math.Round(r.Float64()*10), math.Round(r.Float64()*10), math.Round(r.Float64()*10))
			if r.IntN(5) == 0 {
				ps[i].Violation = float64(r.IntN(3) + 1)
			}
		}
		ranks := Ranks(ps)
		for i := range ps {
			want := 0
			for j := range ps {
				if Dominates(ps[j], ps[i]) {
					want = max(want, ranks[j]+1)
				}
			}
			if ranks[i] != want {
				t.Fatalf("point %v has rank %d, want %d", ps[i], ranks[i], want)
			}
		}
	}
}

func TestCrowding(t *testing.T) {
	t.Parallel()
	ps := []Point{pt(0, 0, 4), pt(0, 1, 3), pt(0, 3, 1), pt(0, 4, 0), pt(1, 0, 0)}
	d := Crowding(ps, Ranks(ps))
	inf := math.Inf(1)
	// Inner points: (3-0)/4 + (4-1)/4 = 1.5 and (4-1)/4 + (3-0)/4 = 1.5.
	want := []float64{inf, 1.5, 1.5, inf, 0}
	for i := range want {
		if d[i] != want[i] {
			t.Errorf("crowding %v, want %v", d, want)
			break
		}
	}
}

func TestHypervolume2D(t *testing.T) {
	t.Parallel()
	ref := [2]float64{2, 2}
	for _, tc := range []struct {
		name string
		ps   []Point
		want float64
	}{
		{"none", nil, 0},
		{"one", []Point{pt(0, 1, 1)}, 1},
		{"two steps", []Point{pt(0, 0, 1), pt(0, 1, 0)}, 3},
		{"a dominated point adds nothing", []Point{pt(0, 0, 1), pt(0, 1, 0), pt(0, 1.5, 1.5)}, 3},
		{"outside the box adds nothing", []Point{pt(0, 1, 1), pt(0, 3, 0)}, 1},
		{"infeasible adds nothing", []Point{pt(0, 1, 1), pt(1, 0, 0)}, 1},
	} {
		if got := Hypervolume2D(tc.ps, ref); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The closed-form hypervolume of the ZDT fronts matches a dense sample of
// the front, and the functions put g = 1 designs on it.
func TestZDTFronts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    func([]float64) [2]float64
	}{{"zdt1", ZDT1}, {"zdt2", ZDT2}} {
		var front []Point
		for i := 0; i <= 20000; i++ {
			x := make([]float64, ZDTVars)
			x[0] = float64(i) / 20000
			o := tc.f(x)
			front = append(front, pt(0, o[0], o[1]))
		}
		got, want := Hypervolume2D(front, [2]float64{1.1, 1.1}), TrueHypervolume(tc.name, 1.1)
		if math.Abs(got-want) > 1e-3 {
			t.Errorf("%s: sampled front's hypervolume %.5f, closed form %.5f", tc.name, got, want)
		}
		x := make([]float64, ZDTVars)
		for i := range x {
			x[i] = 0.5
		}
		if o := tc.f(x); o[1] <= 1-math.Sqrt(0.5) {
			t.Errorf("%s: a design off the front (%v) lies on or below it", tc.name, o)
		}
	}
}

// The pool keeps the front: adding dominated points evicts them, adding
// front points evicts the most crowded, and it is deterministic.
func TestPool(t *testing.T) {
	t.Parallel()
	p := NewPool[string](3)
	for _, c := range []struct {
		id string
		pt Point
	}{{"a", pt(0, 0, 4)}, {"b", pt(0, 4, 0)}, {"c", pt(0, 3, 3)}} {
		if _, ok := p.Add(c.id, c.pt); ok {
			t.Fatal("evicted while filling")
		}
	}
	if e, ok := p.Add("d", pt(0, 5, 5)); !ok || e != "d" {
		t.Errorf("a dominated newcomer: evicted %q, want d itself", e)
	}
	if e, ok := p.Add("e", pt(0, 1, 1)); !ok || e != "c" {
		t.Errorf("a newcomer dominating c: evicted %q, want c", e)
	}
	// a, b, e are the front; f joins it between a and e: the front of
	// four has ends a and b; e and f are inner, and f is more crowded.
	if e, ok := p.Add("f", pt(0, 0.5, 2)); !ok || e != "f" {
		t.Errorf("evicted %q, want f, the most crowded", e)
	}
	var ids []string
	for i := range p.Len() {
		ids = append(ids, p.Item(i))
	}
	if !slices.Equal(ids, []string{"a", "b", "e"}) || len(p.Front()) != 3 {
		t.Errorf("pool %v, front %v", ids, p.Front())
	}
	// Feasible members outrank an infeasible one in tournaments.
	p.Add("g", pt(0.3, 0, 0))
	for i := range p.Len() {
		if p.Item(i) == "g" {
			t.Error("an infeasible newcomer stayed in a pool of feasible members")
		}
	}
}

// A steady-state pool fed random ZDT1 points ends with a front of its own
// size that covers most of what the points can reach, and two pools fed
// the same points hold the same members: a replay rebuilds the front.
func TestPoolOnZDT1(t *testing.T) {
	t.Parallel()
	fill := func() *Pool[int] {
		r := rand.New(rand.NewPCG(3, 4))
		p := NewPool[int](20)
		for i := range 2000 {
			x := make([]float64, ZDTVars)
			for k := range x {
				x[k] = r.Float64() * 0.1
			}
			x[0] = r.Float64()
			o := ZDT1(x)
			p.Add(i, pt(0, o[0], o[1]))
		}
		return p
	}
	p, q := fill(), fill()
	if len(p.Front()) != p.Len() {
		t.Errorf("front of %d in a pool of %d after 2,000 points", len(p.Front()), p.Len())
	}
	if hv := Hypervolume2D(p.Points(), [2]float64{1.1, 1.1}); hv < 0.5 || hv > TrueHypervolume("zdt1", 1.1) {
		t.Errorf("hypervolume %v; want at least 0.5 and at most the true front's", hv)
	}
	for i := range p.Len() {
		if p.Item(i) != q.Item(i) {
			t.Fatalf("two pools fed the same points differ at member %d: %d and %d", i, p.Item(i), q.Item(i))
		}
	}
}

// The pool's ranks, kept as members come and go, are those Ranks computes
// from scratch, with infeasible points and ties among them.
func TestPoolRanksIncremental(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	p := NewPool[int](40)
	for i := range 3000 {
		q := pt(0, math.Round(r.Float64()*8), math.Round(r.Float64()*8))
		if r.IntN(6) == 0 {
			q.Violation = float64(r.IntN(3) + 1)
		}
		p.Add(i, q)
		want := Ranks(p.Points())
		for k := range p.Len() {
			if p.Rank(k) != want[k] {
				t.Fatalf("after %d points member %d has rank %d, want %d", i+1, k, p.Rank(k), want[k])
			}
		}
	}
}

// Each eviction is the member a from-scratch ranking would remove: the
// highest rank, then the largest violation, then the smallest crowding
// distance, then the oldest; and the figures left are from-scratch ones.
func TestPoolEvictsAsFromScratch(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	p := NewPool[int](30)
	var ids []int
	var pts []Point
	for i := range 3000 {
		q := pt(0, math.Round(r.Float64()*20), r.Float64())
		if r.IntN(8) == 0 {
			q.Violation = float64(r.IntN(3) + 1)
		}
		ids, pts = append(ids, i), append(pts, q)
		ev, ok := p.Add(i, q)
		if len(ids) <= 30 {
			continue
		}
		ranks, crowding := Ranks(pts), []float64(nil)
		crowding = Crowding(pts, ranks)
		w := 0
		for k := 1; k < len(pts); k++ {
			switch {
			case ranks[k] != ranks[w]:
				if ranks[k] > ranks[w] {
					w = k
				}
			case pts[k].Violation != pts[w].Violation:
				if pts[k].Violation > pts[w].Violation {
					w = k
				}
			case !(math.IsInf(crowding[k], 1) && math.IsInf(crowding[w], 1)) && crowding[k] < crowding[w]:
				w = k
			}
		}
		if !ok || ev != ids[w] {
			t.Fatalf("point %d: evicted %d (%t), want %d", i, ev, ok, ids[w])
		}
		ids, pts = slices.Delete(ids, w, w+1), slices.Delete(pts, w, w+1)
		want := Crowding(pts, Ranks(pts))
		for k := range p.Len() {
			if c := p.Crowding(k); c != want[k] && !(math.IsInf(c, 1) && math.IsInf(want[k], 1)) {
				t.Fatalf("point %d: member %d has crowding %v, want %v", i, k, c, want[k])
			}
		}
	}
}

// BenchmarkPoolAdd adds ZDT1 points to a full pool: uniform ones, which
// spread over many ranks with many dominations (a search's start), and
// ones near the front (g within 1%: a search that has converged).
func BenchmarkPoolAdd(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
		g    float64 // the range of x2..xn
	}{{"uniform/pool100", 100, 1}, {"uniform/pool1000", 1000, 1}, {"near-front/pool1000", 1000, 0.001}} {
		b.Run(c.name, func(b *testing.B) {
			size := c.size
			r := rand.New(rand.NewPCG(5, 6))
			p := NewPool[int](size)
			point := func() Point {
				x := make([]float64, ZDTVars)
				for k := range x {
					x[k] = r.Float64() * c.g
				}
				x[0] = r.Float64()
				o := ZDT1(x)
				return pt(0, o[0], o[1])
			}
			for i := range size {
				p.Add(i, point())
			}
			b.ResetTimer()
			for i := range b.N {
				p.Add(i, point())
			}
		})
	}
}
