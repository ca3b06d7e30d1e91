package mlp

import _ "embed"

// DefaultSpace is the default search space over Evaluate's genomes, as YAML:
// a list of one to four hidden layers (width and activation each) plus the
// learning rate, epoch count, momentum, minibatch size and L2 penalty of
// minibatch SGD.
//
//go:embed space.yaml
var DefaultSpace []byte
