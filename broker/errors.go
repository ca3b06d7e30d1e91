package broker

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
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

// AuthRefused reports whether err, a connection's error, is the broker
// refusing the client's credentials or their absence: nats.go turns the
// server's refusals into these errors.
func AuthRefused(err error) bool {
	for _, e := range []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// TLSRefused reports whether err, a connection's error, is a TLS
// handshake or certificate failure. The failures come as many types, from
// crypto/tls, crypto/x509 and the server's alerts, all saying so in their
// text: the match is on that, and TestRefusalTexts pins it for the
// nats-server and nats.go in go.mod.
func TLSRefused(err error) bool {
	msg := strings.ToLower(err.Error())
	for _, w := range []string{"tls", "x509", "certificate"} {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// CleanupRefused reports whether err is the broker refusing a run
// credential a clean-up that nats.go makes on its own: an ordered consumer
// deleting the consumer it replaces, an object store purging the chunks
// of an object it stored again or of an upload that failed. The broker
// removes such consumers once idle, and the controller's sweep the
// chunks, so the refusal is expected, not an error to warn of. The match
// is on the subject in the server's text, pinned by
// TestCleanupRefusedText.
func CleanupRefused(err error) bool {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, `"`+jsAPI+"CONSUMER.DELETE.") || strings.Contains(msg, `"`+jsAPI+"STREAM.PURGE.OBJ_")
}
