// Package mlp is evoq's built-in demo problem: it trains a small multi-layer
// perceptron, whose architecture and training hyper-parameters are given by a
// genome, on a deterministic two-spirals classification data set and scores
// it by its accuracy on a held-out validation split.
//
// Everything is pure Go and single-threaded. Training is deterministic: the
// weights and the minibatch order are seeded from a hash of the genome, so
// the same design always yields the same Result on a given platform.
// DefaultSpace is the search space over such genomes.
//
// EvaluateFrom also returns the trained weights as a checkpoint, and
// starts a design from its parent's checkpoint where the layers' shapes
// allow: a mutant then continues its parent's training rather than
// repeating it.
package mlp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
)

// ErrInfeasible is returned (wrapped) by Evaluate for a design that is valid
// but too large to train: one with more than MaxParams trainable parameters.
var ErrInfeasible = errors.New("mlp: infeasible design")

// MaxParams is the largest number of trainable parameters (weights and
// biases) a design may have. Larger designs are rejected with ErrInfeasible
// before any training, which bounds the cost of one evaluation.
const MaxParams = 3000

// Result is the outcome of training one design.
type Result struct {
	// Accuracy is the fraction of the validation split classified correctly;
	// it is the fitness of the design.
	Accuracy float64
	// TrainAccuracy is the fraction of the training split classified correctly.
	TrainAccuracy float64
	// Loss is the mean cross-entropy on the validation split (always finite).
	Loss float64
	// Params is the number of trainable parameters of the network.
	Params int
	// Epochs is the number of epochs actually trained; it is less than the
	// genome's when training diverged and was stopped early.
	Epochs int
	// Inherited says whether the network started from its parent's
	// weights (EvaluateFrom): some of its layers did.
	Inherited bool
	// InheritedParams is the number of parameters copied from the parent
	// before training; 0 when Inherited is false.
	InheritedParams int
	// InheritReason says why a network given a parent checkpoint did not
	// inherit from it; "" when it did, or was given none.
	InheritReason string
}

// Evaluate trains the network described by genome and returns its validation
// accuracy.
//
// The genome holds "layers" (a list of mappings with "units" and
// "activation": relu, tanh or sigmoid), "lr", "epochs", "momentum", "batch"
// and optionally "l2" (default 0). Numbers may be of any Go numeric kind
// (whole-valued floats are accepted for integers) and layers may be given as
// []any or []map[string]any; unknown keys are ignored.
//
// A design with more than MaxParams parameters returns an error wrapping
// ErrInfeasible, with the count in the message; a genome with missing keys or
// bad values returns a descriptive error. If ctx is cancelled, training stops
// at the next epoch boundary and ctx.Err() is returned.
func Evaluate(ctx context.Context, genome map[string]any) (Result, error) {
	res, _, err := EvaluateFrom(ctx, genome, nil)
	return res, err
}

// EvaluateFrom is Evaluate for a design that inherits its parent's
// weights: it builds the network as Evaluate does, with the same seeded
// initialisation, copies into it every layer of the parent checkpoint
// whose weights and biases have the names and shapes of its own, trains it
// as Evaluate does, and returns with the result the trained network's
// checkpoint, for the design's own children.
//
// Hidden layer i is named "layer<i>" and the output layer "output": a
// layer that was resized, or whose input width changed, keeps its fresh
// weights; a layer added at the end leaves the parent's output layer
// unused unless the new layer is as wide as the parent's last. A layer is
// inherited whole or not at all (see Result.InheritedParams).
//
// A nil or empty parent means none: the result is Evaluate's. A parent
// that does not decode (not an mlp checkpoint, another version, truncated
// or corrupt) or has no layer of the design's shape is not an error: the
// network trains from its fresh weights and Result.InheritReason says why.
//
// The checkpoint is nil when there is an error, or when training diverged
// (its weights are of no use to a child). Errors are Evaluate's.
func EvaluateFrom(ctx context.Context, genome map[string]any, parent []byte) (Result, []byte, error) {
	c, err := parseGenome(genome)
	if err != nil {
		return Result{}, nil, err
	}
	res := Result{Params: c.params()}
	if res.Params > MaxParams {
		return res, nil, fmt.Errorf("%w: %d parameters exceed the limit of %d", ErrInfeasible, res.Params, MaxParams)
	}
	train, val := splits()
	seed := c.seed()
	rng := rand.New(rand.NewPCG(seed, seed^0xa0761d6478bd642f))
	n := newNet(&c, rng)
	if len(parent) > 0 {
		res.inheritFrom(n, parent)
	}
	if res.Epochs, err = n.train(ctx, &c, &train, rng); err != nil {
		return res, nil, err
	}
	res.TrainAccuracy, _ = n.score(&train)
	res.Accuracy, res.Loss = n.score(&val)
	if n.diverged {
		return res, nil, nil
	}
	return res, encodeCheckpoint(n), nil
}

// inheritFrom copies what it can of the parent checkpoint into n and
// records in r what it did, or why it did nothing.
func (r *Result) inheritFrom(n *net, parent []byte) {
	ts, err := decodeCheckpoint(parent)
	if err != nil {
		r.InheritReason = err.Error()
		return
	}
	r.InheritedParams = n.inherit(ts)
	r.Inherited = r.InheritedParams > 0
	if !r.Inherited {
		r.InheritReason = "no layer of the parent checkpoint has a shape of this design's"
	}
}

// train runs up to c.epochs epochs of minibatch SGD over d, visiting the
// examples in an order shuffled by rng each epoch. It returns the number of
// epochs completed, stopping early if the network diverges, or ctx.Err() if
// the context is cancelled.
func (n *net) train(ctx context.Context, c *config, d *dataset, rng *rand.Rand) (int, error) {
	order := make([]int, d.size())
	for i := range order {
		order[i] = i
	}
	for epoch := range c.epochs {
		if err := ctx.Err(); err != nil {
			return epoch, err
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		n.epoch(c, d, order)
		if n.diverged {
			return epoch + 1, nil
		}
	}
	return c.epochs, nil
}

// epoch makes one pass over d in the given order, one update per minibatch.
func (n *net) epoch(c *config, d *dataset, order []int) {
	for start := 0; start < len(order); start += c.batch {
		batch := order[start:min(start+c.batch, len(order))]
		for _, i := range batch {
			n.learn(d.row(i), d.y[i])
		}
		n.step(c, len(batch))
	}
}
