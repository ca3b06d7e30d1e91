package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// pullReplyGrace is how long past its expiry a pull request's answer is
// awaited before the request is taken as lost (a broker restart).
const pullReplyGrace = 2 * time.Second

// feeder pulls designs for all of a worker's slots: pull requests whose
// batch is the number of slots waiting for a design that no request out
// covers, at most feedLanes of them out at once. A free slot asks the
// feeder, which hands it the next design that arrives; so the broker
// holds a request or two per worker instead of one per slot, and a worker
// of 1,000 slots renews one or two requests every FetchWait, not 1,000.
// No design is pulled for a slot that is not free: the batches never
// exceed the slots waiting.
//
// The designs a request brings carry their stream subject, not the
// request's, so each lane has a subscription of its own and at most one
// request out: a design is its lane's request's. A request is done when
// as many designs as its batch have arrived, or when the broker answers
// on the request's own reply subject that it expired (408) or was refused
// (409). A design that arrives with no slot waiting (the answer to a
// request given up as lost, after a reconnect) is handed back at once.
type feeder struct {
	nc      *nats.Conn
	subject string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	expires time.Duration
	lanes   [feedLanes]lane
	log     logrus.FieldLogger

	ask   chan *waiter // a slot is free
	drop  chan *waiter // a slot stops waiting
	done  chan struct{}
	query chan chan [3]int
	wg    sync.WaitGroup
	// closeOnce: the feed is closed once, by the first of the worker's
	// end and a slot that stops the worker taking designs (walltime).
	closeOnce sync.Once

	// The dispatcher's own state.
	waiters    []*waiter
	asks       int // slots' asks for a design so far, for tests
	seq        uint64
	reconnects uint64
	holdUntil  time.Time // after a refusal, no request before then
}

// feedLanes is the most pull requests a worker has out at once: with two,
// slots that free while one is out are asked for at once. The dispatcher
// reads the two lanes in cases of its own (run, closeNow).
const feedLanes = 2

// lane is one subscription of the feeder and its request out.
type lane struct {
	inbox string
	sub   *nats.Subscription
	// in is where the client's reader puts the lane's messages, for the
	// dispatcher to read.
	in  chan *nats.Msg
	cur *pullReq // nil for none
}

// waiter is one free slot waiting for a design: it gets a design, or an
// error that says why none comes (a refusal).
type waiter struct {
	ch chan pulled // buffered, one
}

type pulled struct {
	m   *nats.Msg
	err error
}

type pullReq struct {
	subject         string // its reply subject
	batch, received int
	deadline        time.Time // given up as lost after it
}

func (r *pullReq) left() int {
	if r == nil {
		return 0
	}
	return r.batch - r.received
}

// pullRequest is the body of a JetStream pull request.
type pullRequest struct {
	Batch   int           `json:"batch"`
	Expires time.Duration `json:"expires"`
}

// refusedHold is how long the feeder waits after a refused request
// before it asks again.
const refusedHold = 500 * time.Millisecond

// laneRoom is how many messages a lane's channel holds beyond the
// worker's slots.
const laneRoom = 256

// newFeeder starts the feeder of a worker of slots slots.
func newFeeder(nc *nats.Conn, run string, slots int, expires time.Duration, log logrus.FieldLogger) (*feeder, error) {
	f := &feeder{nc: nc, expires: expires, log: log,
		subject: fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", schema.DesignStream, schema.ConsumerName(run)),
		ask:     make(chan *waiter), drop: make(chan *waiter), done: make(chan struct{}),
		query: make(chan chan [3]int)}
	for k := range f.lanes {
		l := &f.lanes[k]
		l.inbox = nc.NewInbox()
		// The client's reader puts each message straight into the lane's
		// channel, which the dispatcher reads: a callback would add a
		// goroutine of the client's between the two, woken for every
		// design (a few µs of scheduling an evaluation). The channel
		// holds more than the lane can be sent: a lane's request asks for
		// at most the slots waiting, and the dispatcher reads it while it
		// waits for nothing else. Were it ever full, the client would drop
		// the design, which the broker delivers again after its ack wait.
		l.in = make(chan *nats.Msg, slots+laneRoom)
		var err error
		l.sub, err = nc.ChanSubscribe(l.inbox+".*", l.in)
		if err != nil {
			return nil, fmt.Errorf("subscribe to the pull inbox: %w", err)
		}
	}
	f.reconnects = nc.Stats().Reconnects
	f.wg.Add(1)
	go f.run()
	return f, nil
}

// handBackOrIgnore hands back a design that arrived when no slot can take
// it; a status message is ignored.
func handBackOrIgnore(nc *nats.Conn, m *nats.Msg) {
	if len(m.Data) > 0 || m.Header.Get("Status") == "" {
		_ = design{m, nc}.Nak()
	}
}

// next waits for one design for a free slot, until ctx ends or wake is
// closed. A free slot waits with no timer of its own: the dispatcher
// renews the pull requests, and what must stop a waiting slot ends ctx
// (Stop, the walltime) or closes wake (a quarantine order), so that 1,000
// idle slots wake no thread until a design comes.
func (f *feeder) next(ctx context.Context, wake <-chan struct{}) (*nats.Msg, error) {
	w := &waiter{ch: make(chan pulled, 1)}
	select {
	case f.ask <- w:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.done:
		return nil, errFeederClosed
	}
	woken := false
	select {
	case p := <-w.ch:
		return p.m, p.err
	case <-ctx.Done():
	case <-f.done:
	case <-wake:
		woken = true
	}
	// Given up: the dispatcher forgets the waiter, unless it already
	// handed it a design, which is then in its channel: returned, the
	// caller hands it back (it checks ctx first) or evaluates it.
	select {
	case f.drop <- w:
	case <-f.done:
	}
	select {
	case p := <-w.ch:
		if p.m != nil {
			return p.m, nil
		}
	default:
	}
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case woken:
		return nil, errWoken
	}
	return nil, errFeederClosed
}

// errWoken means a slot stopped waiting for a design because something
// it checks before it asks changed (a quarantine order). The slot checks
// again, and asks again unless it must stop.
var errWoken = errors.New("woken while waiting for a design")

var errFeederClosed = errors.New("the worker's design feed is closed")

// run is the dispatcher: it pairs designs with waiting slots and keeps
// requests out covering them. It wakes on events (a slot asks or stops
// waiting, a message arrives, the connection is back) and otherwise only
// when something is due (see nextCheck): a worker whose slots are all busy
// wakes no thread until one is free.
func (f *feeder) run() {
	defer f.wg.Done()
	status := f.nc.StatusChanged(nats.CONNECTED)
	defer f.nc.RemoveStatusListener(status)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case w := <-f.ask:
			f.waiters = append(f.waiters, w)
			f.asks++
		case w := <-f.drop:
			if i := slices.Index(f.waiters, w); i >= 0 {
				f.waiters = slices.Delete(f.waiters, i, i+1)
			}
		case m := <-f.lanes[0].in:
			f.receive(0, m)
		case m := <-f.lanes[1].in: // feedLanes is 2
			f.receive(1, m)
		case q := <-f.query:
			q <- [3]int{f.covered(), len(f.waiters), f.asks}
		case <-status: // reconnected: the requests out went with the old connection
		case <-timer.C:
		case <-f.done:
			return
		}
		now := time.Now()
		f.request(now)
		if d, ok := f.nextCheck(now); ok {
			timer.Reset(d)
		} else {
			timer.Stop()
		}
	}
}

// retryEvery is how often the dispatcher tries again to cover waiting
// slots when it could not (no connection, a request that failed to go).
const retryEvery = 250 * time.Millisecond

// nextCheck is how long until the dispatcher must look again with no
// event, and false if nothing is due: the end of a hold after a refusal, a
// request whose answer is overdue, or waiting slots that no request could
// cover yet.
func (f *feeder) nextCheck(now time.Time) (time.Duration, bool) {
	next, ok := time.Duration(0), false
	at := func(d time.Duration) {
		if !ok || d < next {
			next, ok = max(d, 0), true
		}
	}
	for k := range f.lanes {
		if r := f.lanes[k].cur; r != nil {
			at(r.deadline.Sub(now))
		}
	}
	// Slots waiting uncovered with a lane free: held, or the request
	// could not go. With both lanes out, a request's end is an event.
	if len(f.waiters) > f.covered() && slices.ContainsFunc(f.lanes[:], func(l lane) bool { return l.cur == nil }) {
		if now.Before(f.holdUntil) {
			at(f.holdUntil.Sub(now))
		} else {
			at(retryEvery)
		}
	}
	return next, ok
}

// covered is the number of designs the requests out still cover.
func (f *feeder) covered() int {
	n := 0
	for k := range f.lanes {
		n += f.lanes[k].cur.left()
	}
	return n
}

// receive takes one message from lane k: a design for the first waiting
// slot, or a status answer to the lane's request.
func (f *feeder) receive(k int, m *nats.Msg) {
	l := &f.lanes[k]
	if len(m.Data) > 0 || m.Header.Get("Status") == "" {
		if l.cur != nil {
			if l.cur.received++; l.cur.received >= l.cur.batch {
				l.cur = nil
			}
		}
		if len(f.waiters) == 0 {
			_ = design{m, f.nc}.Nak() // the answer to a request given up as lost
			return
		}
		w := f.waiters[0]
		f.waiters = f.waiters[1:]
		w.ch <- pulled{m: m}
		return
	}
	status, desc := m.Header.Get("Status"), m.Header.Get("Description")
	if status == "100" || l.cur == nil || m.Subject != l.cur.subject {
		return // a heartbeat, or the end of a request already given up
	}
	l.cur = nil
	switch {
	case status == "404" || status == "408":
		// expired with part of its batch unfilled: asked again below
	case status == "409" && (desc == "Server Shutdown" || desc == "Leadership Change"):
		// the broker goes away or hands the stream on: asked again once
		// the client has reconnected
	default:
		err := fmt.Errorf("pull request refused: %s %s", status, desc)
		if strings.Contains(desc, "MaxWaiting") {
			err = fmt.Errorf("%w: more pull requests wait than the run's work queue allows; slots idle until one is free (start the controller with --expect-slots at least the run's slot count)", err)
		}
		f.holdUntil = time.Now().Add(refusedHold)
		if len(f.waiters) > 0 { // one slot says so, and waits before it asks again
			w := f.waiters[0]
			f.waiters = f.waiters[1:]
			w.ch <- pulled{err: err}
		}
	}
}

// expire gives up the requests whose answers are overdue, and all of them
// after a reconnect: they went with the old connection.
func (f *feeder) expire(now time.Time) {
	reconnected := false
	if rc := f.nc.Stats().Reconnects; rc != f.reconnects {
		f.reconnects, reconnected = rc, true
	}
	for k := range f.lanes {
		if l := &f.lanes[k]; l.cur != nil && (reconnected || now.After(l.cur.deadline)) {
			l.cur = nil
		}
	}
}

// request sends a pull request, on a free lane, for the waiting slots
// that the requests out do not cover.
func (f *feeder) request(now time.Time) {
	f.expire(now)
	n := len(f.waiters) - f.covered()
	if n <= 0 || !f.nc.IsConnected() || now.Before(f.holdUntil) {
		return
	}
	for k := range f.lanes {
		l := &f.lanes[k]
		if l.cur != nil {
			continue
		}
		f.seq++
		r := &pullReq{subject: l.inbox + "." + strconv.FormatUint(f.seq, 10), batch: n, deadline: now.Add(f.expires + pullReplyGrace)}
		body, _ := json.Marshal(pullRequest{Batch: n, Expires: f.expires})
		if err := f.nc.PublishRequest(f.subject, r.subject, body); err == nil {
			l.cur = r
		}
		return // asked again at the next event, or after retryEvery, if it failed
	}
}

// asked is the number of designs the requests out cover and the number of
// slots waiting, for tests.
func (f *feeder) asked() (covered, waiting int) {
	v := f.state()
	return v[0], v[1]
}

// askCount is the number of times slots have asked for a design, for
// tests.
func (f *feeder) askCount() int { return f.state()[2] }

// state is the dispatcher's covered, waiting and asks; zeros once the
// feed is closed.
func (f *feeder) state() [3]int {
	q := make(chan [3]int, 1)
	select {
	case f.query <- q:
		return <-q
	case <-f.done:
		return [3]int{}
	}
}

// close ends the feed once no slot asks any more. The requests still out
// may bring designs just before the broker takes the unsubscription:
// dropped with the subscription, such a design would come back only after
// its ack wait, spending one of its deliveries. So the subscriptions are
// drained (the broker stops answering them, and what it sent before
// arrives) and every design found in them is handed back.
func (f *feeder) close() { f.closeOnce.Do(f.closeNow) }

func (f *feeder) closeNow() {
	close(f.done)
	f.wg.Wait()
	for _, w := range f.waiters {
		w.ch <- pulled{err: errFeederClosed}
	}
	f.waiters = nil
	draining := false
	for k := range f.lanes {
		l := &f.lanes[k]
		if l.cur == nil || l.sub.Drain() != nil {
			_ = l.sub.Unsubscribe()
			continue
		}
		draining = true
	}
	deadline := time.Now().Add(closeWait)
	for draining && time.Now().Before(deadline) {
		draining = false
		for k := range f.lanes {
			draining = draining || f.lanes[k].sub.IsValid()
		}
		select {
		case m := <-f.lanes[0].in:
			handBackOrIgnore(f.nc, m)
		case m := <-f.lanes[1].in:
			handBackOrIgnore(f.nc, m)
		case <-time.After(10 * time.Millisecond):
		}
	}
	for k := range f.lanes {
		for len(f.lanes[k].in) > 0 {
			handBackOrIgnore(f.nc, <-f.lanes[k].in)
		}
	}
}

// closeWait bounds how long close waits for what the broker sent before it
// took the unsubscription.
const closeWait = 2 * time.Second

// design is one pulled design message, acknowledged on its reply subject
// as the JetStream acknowledgement protocol says.
type design struct {
	m  *nats.Msg
	nc *nats.Conn
}

func (d design) Data() []byte { return d.m.Data }

// Attempt is the delivery count, from 1.
func (d design) Attempt() int {
	if meta, err := d.m.Metadata(); err == nil && meta.NumDelivered > 0 {
		return int(meta.NumDelivered)
	}
	return 1
}

func (d design) reply(body string) error { return d.m.Respond([]byte(body)) }

// Ack says the design is done: the work queue removes it.
func (d design) Ack() error { return d.reply("+ACK") }

// Nak hands the design back for immediate redelivery, and waits until the
// broker has taken the hand-back. A plain -NAK only queues the design for
// redelivery in the server's memory: a broker stopped right after it
// (an embedded one, when its run is interrupted) restarts with the design
// still pending on this worker, and it waits out the whole ack wait. A NAK
// with a delay moves the design's delivery time, which the server stores;
// a delay of 1ns makes it due at once, now and after a restart. The
// request waits for the server's answer, so the hand-back is taken before
// the worker goes.
func (d design) Nak() error {
	if d.m.Reply == "" || d.nc == nil {
		return d.reply("-NAK")
	}
	_, err := d.nc.Request(d.m.Reply, []byte(`-NAK {"delay":1}`), nakWait)
	return err
}

// NakDelay hands the design back for redelivery after delay, waiting
// for the broker to take it as Nak does.
func (d design) NakDelay(delay time.Duration) error {
	body := fmt.Sprintf(`-NAK {"delay":%d}`, max(delay.Nanoseconds(), 1))
	if d.m.Reply == "" || d.nc == nil {
		return d.reply(body)
	}
	_, err := d.nc.Request(d.m.Reply, []byte(body), nakWait)
	return err
}

// nakWait bounds the wait for the broker to take a hand-back; a broker
// that does not answer in time redelivers the design after its ack wait.
const nakWait = 2 * time.Second

// InProgress resets the ack deadline.
func (d design) InProgress() error { return d.reply("+WPI") }

// TermWithReason stops redelivery of the design.
func (d design) TermWithReason(reason string) error { return d.reply("+TERM " + reason) }
