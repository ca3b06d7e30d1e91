package mlp

import (
	"math"
	"math/rand/v2"
)

// probFloor keeps the cross-entropy of a confidently wrong prediction finite.
const probFloor = 1e-12

// layer is a dense layer with its training state and per-example buffers.
type layer struct {
	in, out int
	act     activation
	w, b    []float64 // weights (out×in, row-major) and biases
	gw, gb  []float64 // gradients accumulated over the current minibatch
	vw, vb  []float64 // momentum (velocity) terms
	a       []float64 // activations of the current example
	d       []float64 // loss gradient w.r.t. the pre-activations
}

// net is a multi-layer perceptron with a softmax output.
type net struct {
	layers   []layer
	diverged bool // set once the outputs stopped being finite
}

// newNet builds the network for c with weights drawn from rng.
func newNet(c *config, rng *rand.Rand) *net {
	n := &net{layers: make([]layer, 0, len(c.layers)+1)}
	in := inputDim
	for _, s := range c.layers {
		n.layers = append(n.layers, newLayer(in, s.units, s.act, rng))
		in = s.units
	}
	n.layers = append(n.layers, newLayer(in, numClasses, actIdentity, rng))
	return n
}

// newLayer allocates a layer and initialises its weights with a scale suited
// to its activation (He for relu, LeCun otherwise); biases start at zero.
func newLayer(in, out int, act activation, rng *rand.Rand) layer {
	l := layer{
		in: in, out: out, act: act,
		w: make([]float64, in*out), b: make([]float64, out),
		gw: make([]float64, in*out), gb: make([]float64, out),
		vw: make([]float64, in*out), vb: make([]float64, out),
		a: make([]float64, out), d: make([]float64, out),
	}
	gain := 1.0
	if act == actReLU {
		gain = 2
	}
	std := math.Sqrt(gain / float64(in))
	for i := range l.w {
		l.w[i] = std * rng.NormFloat64()
	}
	return l
}

// forward computes the layer's activations from input x.
func (l *layer) forward(x []float64) {
	for o := range l.out {
		l.a[o] = l.b[o] + dot(l.w[o*l.in:(o+1)*l.in], x)
	}
	switch l.act {
	case actReLU:
		for o, v := range l.a {
			l.a[o] = max(v, 0)
		}
	case actTanh:
		for o, v := range l.a {
			l.a[o] = math.Tanh(v)
		}
	case actSigmoid:
		for o, v := range l.a {
			l.a[o] = 1 / (1 + math.Exp(-v))
		}
	}
}

// dot returns the inner product of a and b[:len(a)], using four partial
// sums to shorten the dependency chain.
func dot(a, b []float64) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// backward accumulates the gradients of the layer given its input x and, when
// dx is not nil, writes the loss gradient w.r.t. x (before x's own
// activation derivative) into dx.
func (l *layer) backward(x, dx []float64) {
	x = x[:l.in]
	if dx != nil {
		dx = dx[:len(x)]
		clear(dx)
	}
	for o, d := range l.d {
		l.gb[o] += d
		grow := l.gw[o*l.in : (o+1)*l.in]
		axpy(d, x, grow)
		if dx != nil {
			axpy(d, l.w[o*l.in:(o+1)*l.in], dx)
		}
	}
}

// axpy adds alpha*x to y[:len(x)].
func axpy(alpha float64, x, y []float64) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// activationGrad multiplies d in place by the derivative of the layer's
// activation, expressed through its outputs a.
func (l *layer) activationGrad() {
	d := l.d[:len(l.a)]
	switch l.act {
	case actReLU:
		for i, a := range l.a {
			if a <= 0 {
				d[i] = 0
			}
		}
	case actTanh:
		for i, a := range l.a {
			d[i] *= 1 - a*a
		}
	case actSigmoid:
		for i, a := range l.a {
			d[i] *= a * (1 - a)
		}
	}
}

// step applies one momentum-SGD update with the accumulated gradients,
// averaged over a minibatch of size n, and clears them.
func (l *layer) step(lr, momentum, l2 float64, n int) {
	scale := 1 / float64(n)
	vw, gw := l.vw[:len(l.w)], l.gw[:len(l.w)]
	for i, w := range l.w {
		vw[i] = momentum*vw[i] - lr*(gw[i]*scale+l2*w)
		l.w[i] = w + vw[i]
		gw[i] = 0
	}
	vb, gb := l.vb[:len(l.b)], l.gb[:len(l.b)]
	for i, b := range l.b {
		vb[i] = momentum*vb[i] - lr*gb[i]*scale
		l.b[i] = b + vb[i]
		gb[i] = 0
	}
}

// predict runs x through the network and returns the class probabilities.
// The returned slice is owned by the network and overwritten by the next call.
func (n *net) predict(x []float64) []float64 {
	for i := range n.layers {
		n.layers[i].forward(x)
		x = n.layers[i].a
	}
	return n.softmax()
}

// softmax turns the output logits into probabilities in place. Non-finite
// logits mark the network as diverged and yield a uniform distribution.
func (n *net) softmax() []float64 {
	p := n.layers[len(n.layers)-1].a
	m := p[0]
	for _, v := range p[1:] {
		m = max(m, v)
	}
	sum := 0.0
	for i, v := range p {
		p[i] = math.Exp(v - m)
		sum += p[i]
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		n.diverged = true
		for i := range p {
			p[i] = 1 / float64(len(p))
		}
		return p
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// learn runs a forward and backward pass on one example and accumulates the
// gradients of its cross-entropy loss.
func (n *net) learn(x []float64, label int) {
	p := n.predict(x)
	last := &n.layers[len(n.layers)-1]
	copy(last.d, p)
	last.d[label]--
	for i := len(n.layers) - 1; i >= 0; i-- {
		l := &n.layers[i]
		if i == 0 {
			l.backward(x, nil)
			break
		}
		prev := &n.layers[i-1]
		l.backward(prev.a, prev.d)
		prev.activationGrad()
	}
}

// crossEntropy returns -log p[label], with p floored to stay finite.
func crossEntropy(p []float64, label int) float64 {
	q := p[label]
	if !(q > probFloor) {
		q = probFloor
	}
	return -math.Log(q)
}

// step updates every layer from the gradients of a minibatch of size size.
func (n *net) step(c *config, size int) {
	for i := range n.layers {
		n.layers[i].step(c.lr, c.momentum, c.l2, size)
	}
}

// score returns the accuracy and mean cross-entropy of the network on d.
func (n *net) score(d *dataset) (acc, loss float64) {
	correct := 0
	for i := range d.size() {
		p := n.predict(d.row(i))
		loss += crossEntropy(p, d.y[i])
		if argmax(p) == d.y[i] {
			correct++
		}
	}
	return float64(correct) / float64(d.size()), loss / float64(d.size())
}

// argmax returns the index of the largest element (the first on ties).
func argmax(p []float64) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}
