package dashboard

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// Dashboard is a running dashboard: a follower of one run and the server
// of its page. Both stop when the context given to Start ends; Done is
// closed once they have.
type Dashboard struct {
	srv  *Server
	hub  *Hub
	done chan struct{}
}

// Start listens on cfg's address (an error there is returned before
// anything else starts) and follows run through js until ctx ends.
func Start(ctx context.Context, js jetstream.JetStream, run string, cfg Config, log logrus.FieldLogger) (*Dashboard, error) {
	hub := NewHub()
	var model atomic.Pointer[Model]
	srv, err := Listen(cfg, hub, model.Load)
	if err != nil {
		return nil, err
	}
	d := &Dashboard{srv: srv, hub: hub, done: make(chan struct{})}
	f := &Follower{JS: js, RunID: run, Hub: hub, Log: log}
	ready := make(chan *Model, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := f.Run(ctx, ready); err != nil && ctx.Err() == nil {
			log.WithError(err).Error("dashboard: the run is not followed; the page shows nothing new")
		}
	}()
	go func() {
		defer wg.Done()
		if err := srv.Serve(ctx); err != nil {
			log.WithError(err).Error("dashboard: server stopped")
		}
	}()
	go func() {
		select {
		case m := <-ready:
			model.Store(m)
		case <-ctx.Done():
		}
	}()
	go func() { wg.Wait(); close(d.done) }()
	return d, nil
}

// URL is the page's address.
func (d *Dashboard) URL() string { return d.srv.URL() }

// Addr is the address the server listens on.
func (d *Dashboard) Addr() string { return d.srv.Addr() }

// Pages is the number of pages open now.
func (d *Dashboard) Pages() int { return d.hub.Pages() }

// Done is closed once the dashboard has stopped.
func (d *Dashboard) Done() <-chan struct{} { return d.done }
