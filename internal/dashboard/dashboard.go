package dashboard

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// Dashboard is a running dashboard: a follower of one run and the server
// of its page. Both stop when the context given to Start ends; Done is
// closed once they have.
type Dashboard struct {
	srv  *Server
	hub  *Hub
	feed *feed // nil unless started Fed
	done chan struct{}
}

// Options are how a dashboard gets the run's results.
type Options struct {
	// Fed: the controller of this process hands over each result it
	// folds (Dashboard.Feed), so the results stream is not read twice.
	// Defaults to false: the dashboard reads the stream itself.
	Fed bool
}

// Start listens on cfg's address (an error there is returned before
// anything else starts) and follows run through js until ctx ends.
func Start(ctx context.Context, js jetstream.JetStream, run string, cfg Config, opt Options, log logrus.FieldLogger) (*Dashboard, error) {
	hub := NewHub()
	var model atomic.Pointer[Model]
	srv, err := Listen(cfg, hub, model.Load)
	if err != nil {
		return nil, err
	}
	d := &Dashboard{srv: srv, hub: hub, done: make(chan struct{})}
	f := &Follower{JS: js, RunID: run, Hub: hub, Log: log, Fed: opt.Fed}
	ready := make(chan *Model, 1)
	readies := []chan<- *Model{ready}
	var wg sync.WaitGroup
	if opt.Fed {
		d.feed = newFeed()
		fedReady := make(chan *Model, 1)
		readies = append(readies, fedReady)
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.feed.run(ctx, fedReady)
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := f.Run(ctx, readies...); err != nil && ctx.Err() == nil {
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

// Feed hands the dashboard one result its controller folded, in stream
// order, with the run's budget then (controller.Config.OnResult); it never
// blocks. A dashboard not started Fed ignores it.
func (d *Dashboard) Feed(seq uint64, r *schema.Result, err error, budget int) {
	if d.feed != nil {
		d.feed.add(seq, r, err, budget)
	}
}
