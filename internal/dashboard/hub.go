package dashboard

import "sync"

// Hub hands the latest snapshot to every open page. A page that is slow
// to read misses intermediate snapshots, never the latest: each
// subscriber holds at most one pending, and a newer one replaces it. So
// the run's side of the hub costs the same for one page as for a hundred:
// one encoding per snapshot, and a channel send per page that never
// blocks.
type Hub struct {
	mu     sync.Mutex
	latest []byte
	subs   map[chan []byte]struct{}
}

// NewHub returns a hub with no snapshot and no pages.
func NewHub() *Hub { return &Hub{subs: map[chan []byte]struct{}{}} }

// Publish makes data the latest snapshot and offers it to every page.
func (h *Hub) Publish(data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.latest = data
	for ch := range h.subs {
		select {
		case <-ch: // drop the one the page has not taken yet
		default:
		}
		ch <- data
	}
}

// Subscribe returns a channel with the latest snapshot (if any) and every
// later one, and the function that ends the subscription.
func (h *Hub) Subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[ch] = struct{}{}
	if h.latest != nil {
		ch <- h.latest
	}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs, ch)
	}
}

// Pages is the number of open pages.
func (h *Hub) Pages() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
