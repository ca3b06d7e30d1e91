package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// PublishTimeout bounds the wait for the broker's confirmation of an
// asynchronous publish; a broker that stops answering (a full disk) is
// then retried with a warning instead of waited on forever.
const PublishTimeout = 30 * time.Second

// session is a broker connection, with the embedded broker when there is
// one.
type session struct {
	url        string
	embedded   *broker.Embedded
	nc         *nats.Conn
	js         jetstream.JetStream
	sec        *securityFlags
	credential *broker.Credential // the external broker's credential, from --connect
	// storeFailed is closed when the embedded broker cannot write its store.
	storeFailed chan struct{}
	storeErr    string
}

// open starts the embedded broker (unless b.nats is set) and connects.
func open(b *brokerFlags, name string, log logrus.FieldLogger) (*session, error) {
	s := &session{url: b.nats, storeFailed: make(chan struct{}), sec: &b.sec, credential: b.sec.credential}
	if b.nats == "" {
		cfg := b.cfg
		cfg.Logger = log
		cfg.OnStoreError = func(msg string) { s.storeErr = msg; close(s.storeFailed) }
		e, err := broker.Start(cfg)
		if err != nil {
			return nil, err
		}
		s.embedded, s.url = e, e.ClientURL()
		log.WithFields(logrus.Fields{"url": broker.RedactURL(s.url), "dir": e.Dir(), "sync": b.sync, "max_store": b.maxStore,
			"auth": cfg.Auth || cfg.Trust != nil, "operator_mode": cfg.Trust != nil, "tls": cfg.TLSCert != "", "mutual_tls": cfg.TLSVerify}).Info("embedded broker ready")
		b.sec.warn(log, cfg)
	}
	opts := b.sec.clientOpts
	if b.sec.trust != nil {
		// Operator mode: the run's account is made known to the
		// brokers, and the controller connects as the run's admin.
		if b.run == "" {
			return nil, usageErr("a broker in operator mode keeps each run in an account of its own: name the run with --run")
		}
		via := append(append([]nats.Option(nil), opts...), func(o *nats.Options) error { o.Servers = strings.Split(s.url, ","); return nil })
		if err := b.sec.trust.CreateRun(context.Background(), via, b.run); err != nil {
			return nil, fmt.Errorf("run %s: make its account on the broker: %w", b.run, err)
		}
		admin, err := b.sec.trust.UserJWT(broker.RoleAdmin, b.run, time.Time{})
		if err != nil {
			return nil, err
		}
		opts = append(append([]nats.Option(nil), opts...), admin.Options()...)
	}
	nc, err := broker.Connect(s.url, name, s.embedded, log, opts...)
	if err != nil {
		s.close()
		return nil, err
	}
	s.nc = nc
	if s.embedded != nil {
		// Controllers elsewhere ask this broker for their runs' credentials.
		if err := s.embedded.ServeMint(nc); err != nil {
			s.close()
			return nil, err
		}
	}
	if s.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(PublishTimeout)); err != nil {
		s.close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return s, nil
}

// waitConnected waits for the first connection to an external broker, so
// that a wrong URL is reported instead of retried in silence.
func (s *session) waitConnected(ctx context.Context, log logrus.FieldLogger) error {
	last := time.Now()
	for !s.nc.IsConnected() {
		if err := s.nc.LastError(); err != nil && broker.AuthRefused(err) {
			return fmt.Errorf("connect to %s: the broker refused %s (%v): %s", broker.RedactURL(s.url), s.sec.credentialName(s.url), err, s.sec.refusedHint(s.url))
		} else if err != nil && broker.TLSRefused(err) {
			return fmt.Errorf("connect to %s: TLS failed (%v): the broker's CA comes with the connect file or --tls-ca; a broker with --tls-verify needs --tls-cert and --tls-key", broker.RedactURL(s.url), err)
		}
		if time.Since(last) > 5*time.Second {
			log.WithField("url", broker.RedactURL(s.url)).Warn("broker not reachable yet; still trying")
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect to %s: %w", broker.RedactURL(s.url), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// urls are the URLs other hosts use to reach the broker.
func (s *session) urls() []string {
	if s.embedded != nil {
		return s.embedded.ClientURLs()
	}
	return strings.Split(s.url, ",")
}

func (s *session) close() {
	if s.nc != nil {
		// Flush, so that the last acks and hand-backs (Nak) reach the broker
		// before the process exits; Close alone may drop them.
		_ = s.nc.FlushTimeout(2 * time.Second)
		s.nc.Close()
	}
	if s.embedded != nil {
		s.embedded.Shutdown()
	}
}
