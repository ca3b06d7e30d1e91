package broker_test

import (
	"testing"

	"github.com/evoq/evoq/broker"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, redacted, stripped string }{
		{"nats://evoq:s3cret@host:4222", "nats://evoq:***@host:4222", "nats://host:4222"},
		{"nats://t0ken@host:4222", "nats://***@host:4222", "nats://host:4222"},
		{"nats://a:p@h1:4222, tls://b:q@h2:4222", "nats://a:***@h1:4222,tls://b:***@h2:4222", "nats://h1:4222,tls://h2:4222"},
		{"nats://host:4222", "nats://host:4222", "nats://host:4222"},
		{"host:4222", "host:4222", "host:4222"},
		{"u:p@host:4222", "u:***@host:4222", "u:p@host:4222"},
		{"nats://a:p@ss@host", "nats://a:***@host", "nats://host"},
	} {
		if got := broker.RedactURL(tc.in); got != tc.redacted {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.redacted)
		}
		if got := broker.StripUserInfo(tc.in); got != tc.stripped {
			t.Errorf("StripUserInfo(%q) = %q, want %q", tc.in, got, tc.stripped)
		}
	}
	if !broker.HasUserInfo("nats://h1,nats://u:p@h2") || broker.HasUserInfo("nats://h1, nats://h2") {
		t.Error("HasUserInfo")
	}
}
