package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SnapshotIdle is how long the broker keeps a consumer that ReadStored
// made once its client stops listening. The client never deletes it: a
// worker or reader credential may not delete consumers (it could delete
// other clients' too, whose names it cannot be told apart from its own),
// so the broker removes it by its InactiveThreshold.
const SnapshotIdle = 30 * time.Second

// snapshotHeartbeat is the idle heartbeat of ReadStored's consumer: a
// stream that stops delivering for two of them (a node lost) ends the
// read with an error instead of a wait for ever.
const snapshotHeartbeat = 2 * time.Second

// snapshotQuiet is how long a ReadStored consumer that still beats may
// deliver nothing before the read ends. The consumer counts what it will
// deliver when it is made, and each message tells how many remain; but a
// message removed before it was delivered (the controller replaces a
// design's progress: a new message, then the older ones purged) is not
// always taken off that count, and the last message delivered then says
// that more remain. The broker beats only while it has nothing to
// deliver, and a consumer that stops beating fails the read after two
// beats (ErrSnapshotStalled): three beats of quiet with no such failure
// mean it has delivered all there is.
const snapshotQuiet = 3 * snapshotHeartbeat

// ErrSnapshotStalled means a ReadStored consumer stopped delivering
// before it had handed over every message stored when it began.
var ErrSnapshotStalled = errors.New("the broker stopped delivering")

// ErrSnapshotGap means a ReadStored consumer's deliveries skipped one,
// lost on the way (a reconnect); the read can be made again.
var ErrSnapshotGap = errors.New("a message was lost on the way")

// ReadStored hands fn, in stream order, the messages of stream that match
// filter and were stored when it began: every one, or the last of each
// subject when lastPerSubject; a message removed while the read goes on
// may not come, and one stored since may. It reads through a push consumer of its
// own, delivered to this client's inbox with flow control, and does not
// delete it (see SnapshotIdle). fn returning ErrStopReading ends the read
// without an error.
//
// nats.go's key watchers, object store listings and object reads delete
// their consumers when they stop, and wait up to 5 s for the answer: a
// credential that may not delete them would wait that long on every
// read and log a permissions violation.
func ReadStored(ctx context.Context, js jetstream.JetStream, stream, filter string, lastPerSubject bool, fn func(jetstream.Msg) error) error {
	if !lastPerSubject {
		return readStored(ctx, js, stream, filter, fn)
	}
	// The broker's own last-per-subject consumer walks a list of the
	// sequences it was made with, and one of those removed before it is
	// delivered (the controller replaces a design's progress) stalls it
	// (nats-server 2.15): it delivers nothing more, not even what was
	// stored after it began. So every message is read, and the last of
	// each subject kept here; the streams read this way hold about one a
	// subject.
	type stored struct {
		seq uint64
		msg jetstream.Msg
	}
	last := map[string]stored{}
	err := readStored(ctx, js, stream, filter, func(m jetstream.Msg) error {
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		last[m.Subject()] = stored{meta.Sequence.Stream, m}
		return nil
	})
	if err != nil {
		return err
	}
	msgs := slices.SortedFunc(maps.Values(last), func(a, b stored) int { return cmp.Compare(a.seq, b.seq) })
	for _, s := range msgs {
		if err := fn(s.msg); err != nil {
			if errors.Is(err, ErrStopReading) {
				return nil
			}
			return err
		}
	}
	return nil
}

// readStored is ReadStored of every message.
func readStored(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(jetstream.Msg) error) error {
	inbox := js.Conn().NewInbox()
	cons, err := js.CreatePushConsumer(ctx, stream, jetstream.ConsumerConfig{
		Name:              strings.ReplaceAll(strings.TrimPrefix(nats.NewInbox(), "_INBOX."), ".", ""),
		DeliverSubject:    inbox,
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		FlowControl:       true,
		IdleHeartbeat:     snapshotHeartbeat,
		InactiveThreshold: SnapshotIdle,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return fmt.Errorf("read %s of stream %s: %w", filter, stream, err)
	}
	if cons.CachedInfo().NumPending == 0 {
		return nil
	}
	r := &storedRead{fn: fn, end: make(chan error, 1), last: time.Now()}
	cc, err := cons.Consume(r.handle, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) {
			r.finish(fmt.Errorf("read %s of stream %s: %w (%v)", filter, stream, ErrSnapshotStalled, err))
		}
	}))
	if err != nil {
		return fmt.Errorf("read %s of stream %s: %w", filter, stream, err)
	}
	defer cc.Stop()
	tick := time.NewTicker(snapshotHeartbeat / 2)
	defer tick.Stop()
	for {
		select {
		case err := <-r.end:
			if errors.Is(err, ErrStopReading) {
				return nil
			}
			return err
		case <-tick.C:
			r.endQuiet()
		case <-ctx.Done():
			r.finish(ctx.Err())
			return fmt.Errorf("read %s of stream %s: %w", filter, stream, ctx.Err())
		}
	}
}

// storedRead is one ReadStored: the messages go to fn until it fails or
// the last one stored has come.
type storedRead struct {
	fn   func(jetstream.Msg) error
	mu   sync.Mutex
	done bool
	end  chan error
	// seq is the consumer sequence of the last message handed on: a
	// message lost on the way (a reconnect) shows as a gap.
	seq uint64
	// last is when the read began or fn last returned; busy says fn is
	// running (under mu).
	last time.Time
	busy bool
}

// endQuiet ends the read once nothing came for snapshotQuiet: see there.
func (r *storedRead) endQuiet() {
	r.mu.Lock()
	quiet := !r.busy && time.Since(r.last) >= snapshotQuiet
	r.mu.Unlock()
	if quiet {
		r.finish(nil)
	}
}

func (r *storedRead) handle(m jetstream.Msg) {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done {
		return
	}
	meta, err := m.Metadata()
	if err != nil {
		r.finish(err)
		return
	}
	if meta.Sequence.Consumer != r.seq+1 {
		r.finish(fmt.Errorf("%w: delivery %d came after %d", ErrSnapshotGap, meta.Sequence.Consumer, r.seq))
		return
	}
	r.seq = meta.Sequence.Consumer
	r.setBusy(true)
	err = r.fn(m)
	r.setBusy(false)
	if err != nil {
		r.finish(err)
		return
	}
	if meta.NumPending == 0 {
		r.finish(nil)
	}
}

func (r *storedRead) setBusy(busy bool) {
	r.mu.Lock()
	r.busy, r.last = busy, time.Now()
	r.mu.Unlock()
}

// finish ends the read with err, once.
func (r *storedRead) finish(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done {
		r.done = true
		r.end <- err
	}
}
