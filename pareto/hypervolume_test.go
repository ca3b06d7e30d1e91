package pareto

import (
	"math"
	"math/rand/v2"
	"testing"
)

// unionVolume is the volume of the union of the boxes from each point of
// pts up to ref by inclusion–exclusion: the sum over the non-empty subsets
// S, with sign (-1)^(|S|+1), of the volume of their intersection, the box
// from the subset's componentwise maximum up to ref. It shares nothing with
// Hypervolume's sweep, and 2^n subsets keep it to a handful of points.
func unionVolume(pts [][]float64, ref []float64) float64 {
	total := 0.0
	for mask := 1; mask < 1<<len(pts); mask++ {
		vol, sign := 1.0, -1.0
		for i, r := range ref {
			corner := math.Inf(-1)
			for j, p := range pts {
				if mask&(1<<j) != 0 {
					corner = max(corner, p[i])
				}
			}
			vol *= max(r-corner, 0)
		}
		for m := mask; m != 0; m &= m - 1 {
			sign = -sign
		}
		total += sign * vol
	}
	return total
}

// gridVolume is the volume of integer points' union on the unit grid up
// to an integer ref: the count of unit cells whose lower corner some point
// is no worse than. It checks sets too large for inclusion–exclusion.
func gridVolume(pts [][]float64, ref []float64) float64 {
	cells := 1
	for _, r := range ref {
		cells *= int(r)
	}
	count := 0
	corner := make([]float64, len(ref))
	for c := range cells {
		for i, r := range ref {
			corner[i] = float64(c % int(r))
			c /= int(r)
		}
		for _, p := range pts {
			if weaklyDominates(p, corner, len(ref)) {
				count++
				break
			}
		}
	}
	return float64(count)
}

// randomPoints draws n points in [0, 1)^d, rounded to steps of 1/levels
// when levels > 0 so that ties in every objective occur, and with every
// other point pushed towards the simplex x1 + ... + xd = 1 so that many
// are mutually non-dominated.
func randomPoints(r *rand.Rand, n, d, levels int) [][]float64 {
	pts := make([][]float64, n)
	for j := range pts {
		p := make([]float64, d)
		sum := 0.0
		for i := range p {
			p[i] = r.Float64()
			sum += p[i]
		}
		for i := range p {
			if j%2 == 0 {
				p[i] /= sum
			}
			if levels > 0 {
				p[i] = math.Floor(p[i]*float64(levels)) / float64(levels)
			}
		}
		pts[j] = p
	}
	return pts
}

func asPoints(pts [][]float64) []Point {
	ps := make([]Point, len(pts))
	for i, p := range pts {
		ps[i] = Point{Obj: p}
	}
	return ps
}

func TestHypervolumeInclusionExclusion(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name      string
		d, levels int
	}{
		{"three objectives", 3, 0},
		{"three objectives with ties", 3, 4},
		{"four objectives", 4, 0},
		{"four objectives with ties", 4, 3},
		{"five objectives", 5, 0},
	} {
		ref := make([]float64, tc.d)
		for i := range ref {
			ref[i] = 1.2
		}
		for trial := range 200 {
			pts := randomPoints(r, 1+trial%8, tc.d, tc.levels)
			got, want := Hypervolume(asPoints(pts), ref), unionVolume(pts, ref)
			if math.Abs(got-want) > 1e-12 {
				t.Fatalf("%s, %v: hypervolume %v, inclusion–exclusion %v", tc.name, pts, got, want)
			}
		}
	}
}

func TestHypervolumeGrid(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name string
		d, n int
		ref  float64
	}{
		{"three objectives", 3, 300, 40},
		{"four objectives", 4, 100, 12},
		{"five objectives", 5, 60, 8},
	} {
		ref := make([]float64, tc.d)
		for i := range ref {
			ref[i] = tc.ref
		}
		// Points of the simplex x1 + ... + xd = ref - 1 rounded down to the
		// integer grid, so that many are mutually non-dominated.
		pts := randomPoints(r, tc.n, tc.d, 0)
		for _, p := range pts {
			sum := 0.0
			for _, v := range p {
				sum += v
			}
			for i := range p {
				p[i] = math.Floor(p[i] / sum * (tc.ref - 1))
			}
		}
		got, want := Hypervolume(asPoints(pts), ref), gridVolume(pts, ref)
		if got != want {
			t.Errorf("%s: hypervolume %v, grid count %v", tc.name, got, want)
		}
	}
}

func TestHypervolumeMatches2D(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	ref := []float64{1.1, 1.1}
	for range 50 {
		ps := asPoints(randomPoints(r, 40, 2, 0))
		got, want := Hypervolume(ps, ref), Hypervolume2D(ps, [2]float64{1.1, 1.1})
		if got != want {
			t.Fatalf("two objectives: %v, Hypervolume2D %v", got, want)
		}
	}
}

func TestHypervolumeCases(t *testing.T) {
	t.Parallel()
	ref3 := []float64{2, 2, 2}
	for _, tc := range []struct {
		name string
		ps   []Point
		ref  []float64
		want float64
	}{
		{"no points", nil, ref3, 0},
		{"no objectives", []Point{pt(0)}, nil, 0},
		{"one objective", []Point{pt(0, 1.5), pt(0, 0.5), pt(0, 3)}, []float64{2}, 1.5},
		{"one objective, none below ref", []Point{pt(0, 2), pt(0, 3)}, []float64{2}, 0},
		{"one point", []Point{pt(0, 1, 1, 1)}, ref3, 1},
		{"two points", []Point{pt(0, 0, 1, 1), pt(0, 1, 1, 0)}, ref3, 2 + 2 - 1},
		{"a dominated point adds nothing", []Point{pt(0, 1, 1, 1), pt(0, 1.5, 1, 1.2)}, ref3, 1},
		{"a duplicate adds nothing", []Point{pt(0, 1, 1, 1), pt(0, 1, 1, 1)}, ref3, 1},
		{"on ref adds nothing", []Point{pt(0, 1, 1, 1), pt(0, 0, 0, 2)}, ref3, 1},
		{"past ref adds nothing", []Point{pt(0, 1, 1, 1), pt(0, 0, 3, 0)}, ref3, 1},
		{"infeasible adds nothing", []Point{pt(0, 1, 1, 1), pt(0.5, 0, 0, 0)}, ref3, 1},
		{"NaN adds nothing", []Point{pt(0, 1, 1, 1), pt(0, math.NaN(), 0, 0)}, ref3, 1},
		{"wrong dimension adds nothing", []Point{pt(0, 1, 1, 1), pt(0, 0, 0), pt(0, 0, 0, 0, 0)}, ref3, 1},
		{"four objectives", []Point{pt(0, 1, 1, 1, 1), pt(0, 0, 1, 1, 1)}, []float64{2, 2, 2, 2}, 2},
	} {
		if got := Hypervolume(tc.ps, tc.ref); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The result depends on the points, not their order, to the last bit.
func TestHypervolumeOrder(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	ref := []float64{1, 1, 1, 1}
	ps := asPoints(randomPoints(r, 60, 4, 5))
	want := Hypervolume(ps, ref)
	for range 5 {
		r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		if got := Hypervolume(ps, ref); got != want {
			t.Fatalf("shuffled: %v, want %v", got, want)
		}
	}
}

// sphereFront is n points on the positive octant of the unit sphere, all
// mutually non-dominated: the hardest case for the sweep.
func sphereFront(n, d int, seed uint64) []Point {
	r := rand.New(rand.NewPCG(seed, 1))
	ps := make([]Point, n)
	for j := range ps {
		p := make([]float64, d)
		norm := 0.0
		for i := range p {
			p[i] = math.Abs(r.NormFloat64())
			norm += p[i] * p[i]
		}
		for i := range p {
			p[i] /= math.Sqrt(norm)
		}
		ps[j] = Point{Obj: p}
	}
	return ps
}

// On the sphere's front the hypervolume approaches 1.1³ - π/6 (the cube to
// ref less the ball's octant) from below as the front fills in.
func TestHypervolumeSphere(t *testing.T) {
	t.Parallel()
	got := Hypervolume(sphereFront(1000, 3, 1), []float64{1.1, 1.1, 1.1})
	if limit := 1.1*1.1*1.1 - math.Pi/6; got > limit || got < limit-0.05 {
		t.Errorf("sphere front of 1000: %v, want just under %v", got, limit)
	}
}

func BenchmarkHypervolume3D(b *testing.B) {
	ps := sphereFront(200, 3, 1)
	ref := []float64{1.1, 1.1, 1.1}
	for b.Loop() {
		Hypervolume(ps, ref)
	}
}
