package broker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/nats-io/nats.go"
)

// connectRefusal connects as a client does, retrying in the background, and
// returns the first error the connection records.
func connectRefusal(t *testing.T, url string, opts ...nats.Option) error {
	t.Helper()
	nc, err := broker.Connect(url, t.Name(), nil, testutil.Logger(t), opts...)
	if err != nil {
		return err
	}
	t.Cleanup(nc.Close)
	testutil.WaitFor(t, 10*time.Second, "a connection error", func() bool { return nc.LastError() != nil })
	return nc.LastError()
}

// TestRefusalTexts pins how the broker's refusals read to a client of
// this nats-server and nats.go: AuthRefused and TLSRefused tell them
// apart by that.
func TestRefusalTexts(t *testing.T) {
	t.Parallel()
	p := testutil.NewPKI(t)
	auth := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Auth: true})
	tls := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TLSCert: p.ServerCert, TLSKey: p.ServerKey})
	mutual := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", TLSCert: p.ServerCert, TLSKey: p.ServerKey,
		TLSCA: p.CA, TLSVerify: true})
	cases := []struct {
		name      string
		err       error
		auth, tls bool
	}{
		{name: "no credentials", err: connectRefusal(t, auth.ClientURL()), auth: true},
		{name: "no CA for the broker's certificate", err: connectRefusal(t, strings.Replace(tls.ClientURL(), "tls://", "nats://", 1)), tls: true},
		{name: "no client certificate for mutual TLS", err: connectRefusal(t, mutual.ClientURL(), tlsOptions(t, p.CA, "", "")...), tls: true},
		{name: "a store error", err: errors.New("nats: insufficient resources")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Logf("%T: %v", tc.err, tc.err)
			if got := broker.AuthRefused(tc.err); got != tc.auth {
				t.Errorf("AuthRefused(%v) = %v, want %v", tc.err, got, tc.auth)
			}
			if got := broker.TLSRefused(tc.err); got != tc.tls {
				t.Errorf("TLSRefused(%v) = %v, want %v", tc.err, got, tc.tls)
			}
		})
	}
}
