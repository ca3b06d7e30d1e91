package worker

import (
	"sync"
	"time"
)

// storers run the slots' result stores (handle's pipelined store) on
// goroutines that stay a while for the next one. A goroutine started per
// result began with the smallest stack and grew it on every result, in
// the JSON decoding of the broker's confirmation: a stack copy of 8-9 µs
// an evaluation, a twentieth of a no-op evaluation's CPU. A storer that
// stays keeps its grown stack. Nothing bounds how many store at once: a
// job that finds no idle storer starts one, so a thousand slots whose
// results end together wait for no one.
type storers struct {
	jobs chan func() // unbuffered: taken only by an idle storer
	done chan struct{}
	wg   sync.WaitGroup
}

// storerIdle is how long an idle storer waits for its next job before it
// ends: long enough to stay between the results of a busy worker, short
// enough that a worker whose evaluations take minutes keeps none.
const storerIdle = 2 * time.Second

func newStorers() *storers {
	return &storers{jobs: make(chan func()), done: make(chan struct{})}
}

// do runs job on an idle storer, or on a new one.
func (p *storers) do(job func()) {
	select {
	case p.jobs <- job:
	default:
		p.wg.Add(1)
		go p.loop(job)
	}
}

func (p *storers) loop(job func()) {
	defer p.wg.Done()
	idle := time.NewTimer(storerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(storerIdle)
		select {
		case job = <-p.jobs:
		case <-idle.C:
			return
		case <-p.done:
			return
		}
	}
}

// close ends the idle storers and waits for them; the caller has waited
// for every job it gave (each slot waits for its own result's store).
func (p *storers) close() {
	close(p.done)
	p.wg.Wait()
}
