package pareto

import "math"

// ZDTVars is the number of variables of the ZDT problems as Zitzler, Deb
// and Thiele (2000) set them: 30, each in [0, 1].
const ZDTVars = 30

// ZDT1 is the first ZDT problem: two objectives to minimize, f1 = x1 and
// f2 = g (1 - sqrt(f1/g)) with g = 1 + 9 mean(x2..xn); its Pareto front is
// f2 = 1 - sqrt(f1), f1 in [0, 1] (g = 1), which is convex.
func ZDT1(x []float64) [2]float64 {
	f1, g := x[0], zdtG(x)
	return [2]float64{f1, g * (1 - math.Sqrt(f1/g))}
}

// ZDT2 is ZDT1 with a concave front: f2 = g (1 - (f1/g)²).
func ZDT2(x []float64) [2]float64 {
	f1, g := x[0], zdtG(x)
	return [2]float64{f1, g * (1 - (f1/g)*(f1/g))}
}

func zdtG(x []float64) float64 {
	s := 0.0
	for _, v := range x[1:] {
		s += v
	}
	return 1 + 9*s/float64(len(x)-1)
}

// TrueHypervolume is the hypervolume of a ZDT problem's true front for a
// reference point (r, r) with r >= 1, in closed form: the front spans
// f1 in [0, 1] with f2 from 1 to 0, so the area is the integral of
// r - front(f1) over [0, 1] plus the strip (r - 1) r beyond it.
func TrueHypervolume(problem string, r float64) float64 {
	var integral float64 // of front(f1) over [0, 1]
	switch problem {
	case "zdt1":
		integral = 1 - 2.0/3 // ∫ 1 - sqrt(f1)
	case "zdt2":
		integral = 1 - 1.0/3 // ∫ 1 - f1²
	default:
		return math.NaN()
	}
	return r - integral + (r-1)*r
}

// TrueHypervolumeAt is the hypervolume of a ZDT problem's true front for
// the reference point ref = (r1, r2), each at least 1 so that it bounds
// the whole front: the integral of r2 - front(f1) over [0, 1], plus the
// strip (r1 - 1) r2 beyond it. It is NaN for another problem or point,
// and for objectives other than f1:min, f2:min.
func TrueHypervolumeAt(problem string, objs []Objective, ref []float64) float64 {
	if len(ref) != 2 || ref[0] < 1 || ref[1] < 1 || len(objs) != 2 ||
		objs[0] != (Objective{Name: "f1"}) || objs[1] != (Objective{Name: "f2"}) {
		return math.NaN()
	}
	var integral float64
	switch problem {
	case "zdt1":
		integral = 1 - 2.0/3
	case "zdt2":
		integral = 1 - 1.0/3
	default:
		return math.NaN()
	}
	return ref[1] - integral + (ref[0]-1)*ref[1]
}
