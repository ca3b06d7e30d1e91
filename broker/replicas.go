package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxReplicas is the most copies JetStream keeps of a stream.
const MaxReplicas = 5

// ErrReplicas means the replica count asked for does not fit the broker:
// not 1, 3 or 5, more than the cluster can hold, a single server, or fewer
// than a stream has already.
var ErrReplicas = errors.New("replica count does not fit the broker")

// JetStream error codes of a replica count that does not fit.
const (
	errCodeNoPeers               = 10005 // no suitable peers for placement
	errCodeReplicasNotClustered  = 10074 // replicas > 1 not supported in non-clustered mode
	errCodeReplicasNotUpdateable = 10061 // replicas configuration can not be updated
)

// DeclareOption is a setting of one Declare call.
type DeclareOption func(*declareOptions)

type declareOptions struct{ replicas int }

// WithReplicas keeps n copies of every stream and bucket, each on another
// node of a JetStream cluster: with 3 they outlive the loss of any one
// node, with 5 of any two. n is 1, 3 or 5 (CheckReplicas), at most the
// cluster's size. Without it, one copy.
func WithReplicas(n int) DeclareOption {
	return func(o *declareOptions) { o.replicas = n }
}

// CheckReplicas reports ErrReplicas unless n is 1, 3 or 5. A cluster keeps
// a stream while a majority of its copies lives, so an even count costs a
// copy without surviving one more loss.
func CheckReplicas(n int) error {
	if n < 1 || n > MaxReplicas || n%2 == 0 {
		return fmt.Errorf("%w: --replicas %d: want 1, 3 or 5 (a cluster keeps a stream while a majority of its copies lives, so an even count survives no more losses than the odd one below it)", ErrReplicas, n)
	}
	return nil
}

// keepsReplicas reports ErrReplicas when stream exists with more than
// replicas copies: lowering them would lower them for every run.
func keepsReplicas(ctx context.Context, js jetstream.JetStream, stream string, replicas int) error {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream, err)
	}
	if have := s.CachedInfo().Config.Replicas; have > replicas {
		return fmt.Errorf("%w: --replicas %d: stream %s already has %d replicas, shared by every run on this broker, and evoq does not lower them: give --replicas %d (to lower them on purpose: nats stream edit %s --replicas %d)",
			ErrReplicas, replicas, stream, have, have, stream, replicas)
	}
	return nil
}

// replicasErr explains a refusal of the broker that is about the replica
// count, naming the flag; other errors are returned as they are.
func replicasErr(err error, stream string, replicas int) error {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return err
	}
	switch ae.ErrorCode {
	case errCodeReplicasNotClustered:
		return fmt.Errorf("%w: --replicas %d: the broker is a single server, not a JetStream cluster: use --replicas 1, or run the brokers as a cluster (evoq broker --cluster-name ... --server-name ... --routes ...): %v",
			ErrReplicas, replicas, err)
	case errCodeNoPeers:
		return fmt.Errorf("%w: --replicas %d: the cluster has fewer than %d JetStream servers up to hold stream %s (every replica needs a node of its own): %v",
			ErrReplicas, replicas, replicas, stream, err)
	case errCodeReplicasNotUpdateable:
		return fmt.Errorf("%w: --replicas %d: the broker cannot change the replicas of stream %s: %v", ErrReplicas, replicas, stream, err)
	}
	return err
}
