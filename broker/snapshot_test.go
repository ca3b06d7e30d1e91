package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
)

// A listing of the last message of each subject ends while messages are
// replaced under it, as the controller replaces a design's progress: a
// new message on the subject, then the older ones purged. The consumer
// counted the messages it would deliver when it was made, and those
// removed before it delivered them never come: the read must not wait
// for them until its time runs out.
func TestReadStoredWhileMessagesAreReplaced(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, time.Minute)
	js := b.JS
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"m.>"}})
	if err != nil {
		t.Fatal(err)
	}
	// Messages large enough that flow control holds most of them in the
	// broker while the first are read.
	const subjects = 200
	big := make([]byte, 64<<10)
	for i := range subjects {
		if _, err := js.Publish(ctx, fmt.Sprintf("m.%d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	// replace replaces the last 20 subjects with version v while a read
	// goes on.
	replace := func(v byte) <-chan error {
		done := make(chan error, 1)
		go func() {
			for i := subjects - 20; i < subjects; i++ {
				subj := fmt.Sprintf("m.%d", i)
				if _, err := js.Publish(ctx, subj, append([]byte{v}, big[1:]...)); err != nil {
					done <- err
					return
				}
				if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeKeep(1)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		return done
	}
	for round := range 5 {
		v := byte(round + 1)
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		seen := map[string]byte{}
		replaced := replace(v)
		err := broker.ReadStored(rctx, js, "S", "m.*", true, func(m jetstream.Msg) error {
			if _, twice := seen[m.Subject()]; twice {
				t.Errorf("round %d: %s read twice", round, m.Subject())
			}
			seen[m.Subject()] = m.Data()[0]
			return nil
		})
		cancel()
		if err != nil {
			t.Fatalf("round %d: ReadStored after %s: %v", round, time.Since(start).Round(time.Millisecond), err)
		}
		if err := <-replaced; err != nil {
			t.Fatal(err)
		}
		// Every subject not replaced is read. One replaced during the read
		// is read in either version, or not at all when the read ended
		// before its new message came and after its old one was purged:
		// the read is of what was stored when it began, less what was
		// removed since.
		for i := 0; i < subjects-20; i++ {
			if _, ok := seen[fmt.Sprintf("m.%d", i)]; !ok {
				t.Errorf("round %d: m.%d, never replaced, not read", round, i)
			}
		}
		// A subject replaced during the read reads as either version.
		for i := subjects - 20; i < subjects; i++ {
			if got, ok := seen[fmt.Sprintf("m.%d", i)]; ok && got != v && got != v-1 {
				t.Errorf("round %d: m.%d read as version %d, want %d or %d", round, i, got, v-1, v)
			}
		}
	}
}
