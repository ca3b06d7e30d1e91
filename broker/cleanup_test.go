package broker_test

import (
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
)

// TestCleanupRefusedText pins how this nats-server and nats.go report a
// run credential's refused clean-ups: CleanupRefused tells them from the
// refusals worth a warning by the subject in that text.
func TestCleanupRefusedText(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	r := b.mint(t, broker.RoleReader, "a")
	for _, tc := range []struct {
		subject string
		cleanup bool
	}{
		{"$JS.API.CONSUMER.DELETE.EVOQ_RESULTS.someone", true},
		{"$JS.API.STREAM.PURGE.OBJ_" + schema.CheckpointBucket("a"), true},
		{"$JS.API.STREAM.PURGE.EVOQ_RESULTS", false},
		{"$JS.API.STREAM.DELETE.OBJ_" + schema.CheckpointBucket("a"), false},
	} {
		if err := r.nc.Publish(tc.subject, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-r.violations:
			if got := broker.CleanupRefused(err); got != tc.cleanup {
				t.Errorf("CleanupRefused(%v) = %t, want %t", err, got, tc.cleanup)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no permissions violation", tc.subject)
		}
	}
}
