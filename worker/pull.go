package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
)

// errNoDesign means a pull request ended without a design: nothing was
// queued before it expired. The slot renews it.
var errNoDesign = errors.New("no design queued")

// pullReplyGrace is how long past its expiry a pull request's answer is
// awaited before the request is taken as lost (a broker restart).
const pullReplyGrace = 2 * time.Second

// puller asks the run's consumer for one design at a time, on an inbox the
// slot keeps for its whole life: a JetStream pull request of batch 1 each
// time the slot is free, which is what Consumer.Next sends, without a new
// subscription per design.
type puller struct {
	nc         *nats.Conn
	subject    string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	inbox      string
	sub        *nats.Subscription
	request    []byte
	expires    time.Duration
	pending    bool   // a request is out and unanswered
	reconnects uint64 // the connection's reconnects when it was sent
}

// pullRequest is the body of a JetStream pull request.
type pullRequest struct {
	Batch   int           `json:"batch"`
	Expires time.Duration `json:"expires"`
}

func newPuller(nc *nats.Conn, run string, expires time.Duration) (*puller, error) {
	p := &puller{nc: nc, inbox: nc.NewInbox(), expires: expires,
		subject: fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", schema.DesignStream, schema.ConsumerName(run))}
	var err error
	if p.request, err = json.Marshal(pullRequest{Batch: 1, Expires: expires}); err != nil {
		return nil, err
	}
	if p.sub, err = nc.SubscribeSync(p.inbox); err != nil {
		return nil, fmt.Errorf("subscribe to the pull inbox: %w", err)
	}
	// One design at a time, but a late answer to a lost request must not
	// be dropped by the client: keep the default pending limits.
	return p, nil
}

// next returns one design, errNoDesign when the request expired empty, or
// the broker's refusal (such as a consumer limit reached).
func (p *puller) next(ctx context.Context) (*nats.Msg, error) {
	if !p.pending {
		if err := p.nc.PublishRequest(p.subject, p.inbox, p.request); err != nil {
			return nil, err
		}
		p.pending, p.reconnects = true, p.nc.Stats().Reconnects
	}
	deadline := time.Now().Add(p.expires + pullReplyGrace)
	for {
		// Wait in short steps: a request sent before the client reconnected
		// (to another node of a cluster, say) may be lost with the old
		// connection, and is sent again at once.
		step, cancel := context.WithTimeout(ctx, min(time.Second, time.Until(deadline)))
		m, err := p.sub.NextMsgWithContext(step)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err() // the request stays out; a design it brings is read next time
		case err != nil && !time.Now().Before(deadline):
			p.pending = false // no answer at all: take the request as lost
			return nil, errNoDesign
		case err != nil && p.nc.Stats().Reconnects != p.reconnects:
			p.pending = false
			return nil, errNoDesign
		case err != nil:
			continue
		}
		if len(m.Data) > 0 || m.Header.Get("Status") == "" {
			p.pending = false
			return m, nil
		}
		switch status := m.Header.Get("Status"); status {
		case "100": // heartbeat
			continue
		case "404", "408":
			p.pending = false
			return nil, errNoDesign
		case "409":
			p.pending = false
			if d := m.Header.Get("Description"); d == "Server Shutdown" || d == "Leadership Change" {
				// The broker goes away or hands the stream on: the request
				// is renewed once the client has reconnected.
				return nil, errNoDesign
			}
			err := fmt.Errorf("pull request refused: 409 %s", m.Header.Get("Description"))
			if strings.Contains(m.Header.Get("Description"), "MaxWaiting") {
				err = fmt.Errorf("%w: more slots ask for designs than the run's work queue lets wait; this slot idles until one is free (start the controller with --expect-slots at least the run's slot count)", err)
			}
			return nil, err
		default:
			p.pending = false
			return nil, fmt.Errorf("pull request refused: %s %s", status, m.Header.Get("Description"))
		}
	}
}

// close ends the slot's pull inbox. With a request still out, the broker
// may have sent its answer, a design, just before: dropped with the
// subscription, that design would come back only after its ack wait,
// spending one of its deliveries. So the subscription is drained (the
// broker stops answering it, and what it sent before arrives) and a design
// found in it is handed back.
func (p *puller) close() {
	if !p.pending {
		_ = p.sub.Unsubscribe()
		return
	}
	if err := p.sub.Drain(); err != nil {
		_ = p.sub.Unsubscribe()
		return
	}
	deadline := time.Now().Add(closeWait)
	for time.Now().Before(deadline) {
		m, err := p.sub.NextMsg(time.Until(deadline))
		if err != nil {
			return // drained, or the connection is gone
		}
		if len(m.Data) > 0 || m.Header.Get("Status") == "" {
			_ = design{m, p.nc}.Nak()
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
