package broker

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream error codes of a store that has no room left.
const (
	errCodeAccountResources = 10002 // resource limits exceeded for account
	errCodeInsufficient     = 10023 // insufficient resources
	errCodeStorage          = 10047 // insufficient storage resources available
)

// StoreFull reports whether err says the broker's store has no room:
// JetStream's max store (--max-store) or the disk is full. Retrying does not
// help until room is made.
func StoreFull(err error) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode {
	case errCodeAccountResources, errCodeInsufficient, errCodeStorage:
		return true
	}
	return false
}
