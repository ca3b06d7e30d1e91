package worker

import (
	"sync"
	"time"
)

// progress tells the broker that the designs this worker evaluates are
// still being worked on (InProgress), so that a long evaluation is not
// redelivered while its worker lives: each design gets one every `every`
// (AckWait/3) from its start, give or take half a sweep's tick, for as
// long as it is tracked.
//
// One goroutine serves all of the worker's slots. It wakes every
// every/progressTicks and sends the InProgress of every design whose last
// one (or start) is at least every - tick/2 old: the sweep nearest its
// time. A design thus waits between every - every/8 and every + every/8
// for its next one, every on average, a third of the ack wait at most
// plus an eighth. A worker of 1,000 slots wakes progressTicks times per
// `every` and sends its InProgress a batch at a time, instead of running a
// timer, a goroutine and a wake-up per design.
type progress struct {
	every time.Duration
	now   func() time.Time
	send  func(design) error

	// mu is held while a sweep sends, so that once remove returns no
	// InProgress of that design goes out: a design handed back is not
	// then kept by a late one.
	mu   sync.Mutex
	live map[*progressEntry]struct{}
}

// progressTicks is how many sweeps fall in one `every`.
const progressTicks = 4

type progressEntry struct {
	msg  design
	last time.Time // the design's start or its last InProgress
}

func newProgress(every time.Duration, send func(design) error) *progress {
	return &progress{every: every, now: time.Now, send: send, live: map[*progressEntry]struct{}{}}
}

// add tracks msg from now on; the function it returns stops that.
func (p *progress) add(msg design) (remove func()) {
	e := &progressEntry{msg: msg, last: p.now()}
	p.mu.Lock()
	p.live[e] = struct{}{}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.live, e)
		p.mu.Unlock()
	}
}

// tick is the time between sweeps.
func (p *progress) tick() time.Duration { return max(p.every/progressTicks, time.Millisecond) }

// sweep sends the InProgress of the designs due at now and returns how
// many it sent.
func (p *progress) sweep(now time.Time) int {
	due := p.every - p.tick()/2
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for e := range p.live {
		if now.Sub(e.last) >= due {
			_ = p.send(e.msg) // one lost is followed by the next, `every` later: the ack wait is three
			e.last = now
			n++
		}
	}
	return n
}

// run sweeps until done is closed.
func (p *progress) run(done <-chan struct{}) {
	t := time.NewTicker(p.tick())
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			p.sweep(p.now())
		}
	}
}
