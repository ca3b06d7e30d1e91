package broker

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// ReconnectWait is the pause between reconnect attempts. Clients reconnect
// forever: a broker restart must not end a worker.
const ReconnectWait = 250 * time.Millisecond

// A client pings its broker every PingInterval and takes the connection as
// dead when MaxPingsOut pings in a row go unanswered, then reconnects, to
// another URL of the list if there are several: a broker cut off without a
// word (a network partition, a node lost) is left within about 15 s, not
// the minutes of the NATS defaults.
const (
	PingInterval = 5 * time.Second
	MaxPingsOut  = 2
)

// Connect connects to url as name and reconnects forever, logging each
// disconnect and reconnect. url may list several servers, comma-separated
// (the nodes of a cluster): the client connects to one of them and fails
// over to the others, and to the nodes the cluster tells it of. When
// embedded is non-nil it connects in-process, with the admin credential
// when the broker has auth. The extra options, such as Credential.Options
// and TLSOptions, come last.
func Connect(url, name string, embedded *Embedded, log logrus.FieldLogger, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		nats.ReconnectBufSize(64 << 20),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.WithError(err).Warn("disconnected from broker; reconnecting")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.WithField("url", nc.ConnectedUrlRedacted()).Info("reconnected to broker")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if CleanupRefused(err) {
				log.WithError(err).Debug("the broker keeps a clean-up from this credential to itself")
				return
			}
			log.WithError(err).Warn("broker connection error")
		}),
	}
	if embedded != nil {
		opts = append(opts, nats.InProcessServer(embedded.Server()))
		// The server exempts in-process clients from TLS; a tls:// URL
		// would make the client insist on it.
		url = strings.Replace(url, "tls://", "nats://", -1)
		if embedded.auth {
			opts = append(opts, embedded.admin.Options()...)
		}
		if embedded.trust != nil && len(extra) == 0 {
			// In operator mode a connection is a user of one account;
			// with no credential given, the broker's own is the system
			// account's, which serves no run.
			sys, err := embedded.trust.systemUser()
			if err != nil {
				return nil, err
			}
			opts = append(opts, sys)
		}
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", RedactURL(url), err)
	}
	return nc, nil
}

// RedactURL is url, or a comma-separated list of URLs, with the user info
// of each (a password, a token) replaced by ***: the user name stays, so
// that the log says who connected, never with what. Every URL that is
// logged, printed or put in an error passes through it; the secrets stay
// in the connect files and flags they came from.
func RedactURL(url string) string {
	parts := strings.Split(url, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 || strings.Contains(rest[:at], "/") {
		return s
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	info := "***"
	if hasPassword {
		info = user + ":***"
	}
	if scheme != "" {
		scheme += "://"
	}
	return scheme + info + rest[at:]
}

// StripUserInfo is url, or a comma-separated list of URLs, without the
// user info of each: for a connect file that carries a credential of its
// own.
func StripUserInfo(url string) string {
	parts := strings.Split(url, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		scheme, rest, ok := strings.Cut(p, "://")
		if at := strings.LastIndex(rest, "@"); ok && at >= 0 && !strings.Contains(rest[:at], "/") {
			p = scheme + "://" + rest[at+1:]
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// HasUserInfo reports whether any URL of the list carries a user, a
// password or a token.
func HasUserInfo(url string) bool { return StripUserInfo(url) != strings.Join(splitTrim(url), ",") }

func splitTrim(url string) []string {
	parts := strings.Split(url, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}
