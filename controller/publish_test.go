package controller

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/evoq/evoq/schema"
)

// TestPublishWindows publishes more designs than PublishWindow (and than
// nats.go's 4,000 unconfirmed asynchronous publishes) in one batch on a
// real broker: every window is published, each design stored once, in
// order, and publishing some again stores nothing new.
func TestPublishWindows(t *testing.T) {
	t.Parallel()
	bu := setup(t)
	const run, n = "windows", 2*PublishWindow + 4500
	cfg := bu.config(run)
	cfg.Budget, cfg.Init, cfg.Pool = n, n, 5
	c, err := New(bu.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	resolveNew(t, c)
	batch := make([]*schema.Design, n)
	for i := range batch {
		batch[i] = c.newDesign(uint64(i + 1))
	}
	if err := c.publish(bu.ctx, batch); err != nil {
		t.Fatalf("publish %d designs: %v", n, err)
	}
	if err := c.publish(bu.ctx, batch[:10]); err != nil {
		t.Fatalf("publish 10 designs again: %v", err)
	}
	st, err := bu.js.Stream(bu.ctx, schema.DesignStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(bu.ctx, jetstream.WithSubjectFilter(schema.DesignSubject(run)))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects[schema.DesignSubject(run)]; got != n {
		t.Errorf("%d designs on the queue, want %d", got, n)
	}
	last, err := st.GetLastMsgForSubject(bu.ctx, schema.DesignSubject(run))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := schema.DecodeDesign(last.Data); err != nil || d.Seq != n {
		t.Errorf("last design on the queue: %+v, %v; want seq %d", d, err, n)
	}
}
