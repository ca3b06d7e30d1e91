// Package testutil starts the real embedded JetStream broker for tests: a
// random port and a temporary store, stopped when the test ends.
package testutil

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// Broker is a running embedded broker with a connected client.
type Broker struct {
	*broker.Embedded
	NC *nats.Conn
	JS jetstream.JetStream
}

// StartBroker starts an embedded broker on 127.0.0.1 with a free port and
// a t.TempDir() store, declares evoq's streams and buckets, and connects.
func StartBroker(t testing.TB) *Broker {
	t.Helper()
	return StartBrokerDir(t, t.TempDir())
}

// StartBrokerDir is StartBroker on the store directory dir.
func StartBrokerDir(t testing.TB, dir string) *Broker {
	t.Helper()
	log := Logger(t)
	e, err := broker.Start(broker.Config{Dir: dir, Listen: "127.0.0.1:0", Logger: log})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := broker.Connect(e.ClientURL(), t.Name(), nil, log)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := broker.Declare(ctx, js); err != nil {
		t.Fatalf("declare: %v", err)
	}
	return &Broker{Embedded: e, NC: nc, JS: js}
}

// Logger logs to the test's log at warning level, so failures show the
// context without drowning it.
func Logger(t testing.TB) *logrus.Logger {
	log := logrus.New()
	w := &testWriter{t: t}
	t.Cleanup(w.close) // registered first, so it runs after every later cleanup
	log.SetOutput(w)
	log.SetLevel(logrus.WarnLevel)
	return log
}

// testWriter writes to the test log until the test ends; t.Log after the
// end would panic, and broker goroutines may still log then.
type testWriter struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// Context is a context that ends with the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond every 10 ms until it holds, failing the test after
// timeout with what it waited for.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("waited %v for %s", timeout, what)
		case <-tick.C:
		}
	}
}
