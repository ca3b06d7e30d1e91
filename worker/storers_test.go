package worker

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A job that finds no idle storer starts one, so jobs never wait for each
// other; one that comes after another has finished reuses its storer; close
// ends the idle storers.
func TestStorers(t *testing.T) {
	t.Parallel()
	p := newStorers()
	var started atomic.Int32
	var running sync.WaitGroup
	release := make(chan struct{})
	const n = 5
	running.Add(n)
	for range n {
		p.do(func() {
			started.Add(1)
			running.Done()
			<-release
		})
	}
	running.Wait() // every job runs at once, though none has returned
	close(release)

	// Once a storer is idle, the next jobs go to it (or to another idle
	// one): none starts a goroutine of its own.
	deadline := time.Now().Add(10 * time.Second)
	for {
		done := make(chan struct{})
		select {
		case p.jobs <- func() { close(done) }:
		default:
			if time.Now().After(deadline) {
				t.Fatal("no storer became idle")
			}
			time.Sleep(time.Millisecond)
			continue
		}
		<-done
		break
	}
	closed := make(chan struct{})
	go func() { p.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not end the idle storers")
	}
	if got := started.Load(); got != n {
		t.Errorf("%d jobs ran, want %d", got, n)
	}
}
