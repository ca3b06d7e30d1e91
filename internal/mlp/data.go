package mlp

import (
	"math"
	"math/rand/v2"
	"sync"
)

// Shape and generation constants of the built-in two-spirals data set.
const (
	inputDim   = 2   // features per example (x, y)
	numClasses = 2   // one class per spiral arm
	trainSize  = 400 // examples in the training split
	valSize    = 200 // examples in the held-out validation split

	dataSeed     = 0x5b1a_15e7 // fixed seed: the data set never changes
	spiralTurns  = 1.75        // revolutions of each arm
	spiralStart  = 0.08        // radius at which the arms begin
	spiralScale  = 2.0         // coordinates span roughly [-scale, scale]
	spiralNoise  = 0.05        // std. dev. of the Gaussian jitter (before scaling)
	spiralOffset = math.Pi     // angular offset of the second arm
)

// dataset holds examples as a flat row-major feature matrix and integer labels.
type dataset struct {
	x []float64 // len(y)*inputDim features
	y []int     // class labels in [0, numClasses)
}

// size returns the number of examples.
func (d *dataset) size() int { return len(d.y) }

// row returns the features of example i.
func (d *dataset) row(i int) []float64 { return d.x[i*inputDim : (i+1)*inputDim] }

// splits returns the training and validation splits, generated once.
var splits = sync.OnceValues(func() (dataset, dataset) {
	return makeSpirals(trainSize, dataSeed), makeSpirals(valSize, dataSeed+1)
})

// makeSpirals draws n examples of the two interleaved spirals from seed,
// alternating the two classes so that both are equally represented.
func makeSpirals(n int, seed uint64) dataset {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	d := dataset{x: make([]float64, 0, n*inputDim), y: make([]int, n)}
	for i := range n {
		class := i % numClasses
		x, y := spiralPoint(rng, class)
		d.x = append(d.x, x, y)
		d.y[i] = class
	}
	return d
}

// spiralPoint samples one noisy point on the arm of the given class.
func spiralPoint(rng *rand.Rand, class int) (x, y float64) {
	t := rng.Float64()
	r := spiralStart + (1-spiralStart)*t
	theta := 2*math.Pi*spiralTurns*t + float64(class)*spiralOffset
	x = r*math.Cos(theta) + spiralNoise*rng.NormFloat64()
	y = r*math.Sin(theta) + spiralNoise*rng.NormFloat64()
	return spiralScale * x, spiralScale * y
}
