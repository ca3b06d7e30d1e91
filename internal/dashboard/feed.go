package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/evoq/evoq/schema"
)

// feed takes the results a controller hands its dashboard (see
// controller.Config.OnResult) without ever making the controller wait: a
// result is appended to a queue under a lock held only for that, and the
// feed's own goroutine folds the queue into the model, which may be busy
// drawing a snapshot. Results that come before the model exists (the
// follower waits for the run's record) wait in the queue; none is
// dropped.
type feed struct {
	mu      sync.Mutex
	pending []fed
	wake    chan struct{}
	// closed: nothing folds the queue any more (the dashboard stopped,
	// or never got its model), so what comes is dropped rather than
	// kept for ever.
	closed bool
}

type fed struct {
	seq    uint64
	res    *schema.Result
	err    error
	budget int
}

func newFeed() *feed { return &feed{wake: make(chan struct{}, 1)} }

// add queues one result; it never blocks.
func (f *feed) add(seq uint64, r *schema.Result, err error, budget int) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.pending = append(f.pending, fed{seq, r, err, budget})
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// run folds the queue into the model once it is ready, until ctx ends.
func (f *feed) run(ctx context.Context, ready <-chan *Model) {
	defer f.close()
	var m *Model
	select {
	case m = <-ready:
	case <-ctx.Done():
		return
	}
	for {
		f.mu.Lock()
		batch := f.pending
		f.pending = nil
		f.mu.Unlock()
		for _, x := range batch {
			at := time.Time{}
			if x.res != nil {
				at = x.res.Stop
			}
			m.RaiseBudget(x.budget)
			m.Result(x.seq, at, x.res, x.err)
		}
		select {
		case <-f.wake:
		case <-ctx.Done():
			return
		}
	}
}

// close drops the queue and whatever comes after.
func (f *feed) close() {
	f.mu.Lock()
	f.closed, f.pending = true, nil
	f.mu.Unlock()
}
