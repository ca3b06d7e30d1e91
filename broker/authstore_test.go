package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/nats-io/nats.go"
)

// A restarted broker knows its admin and every minted credential again,
// from the auth file in its store.
func TestCredentialsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	e, err := broker.Start(broker.Config{Dir: dir, Listen: "127.0.0.1:0", Auth: true, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	admin := e.AdminCredential()
	worker, err := e.Mint(broker.RoleWorker, "a")
	if err != nil {
		t.Fatal(err)
	}
	e.Shutdown()
	e = start(t, broker.Config{Dir: dir, Listen: "127.0.0.1:0", Auth: true})
	if e.AdminCredential().Seed != admin.Seed {
		t.Error("the restarted broker made a new admin credential")
	}
	for name, opts := range map[string][]nats.Option{"admin": admin.Options(), "worker": worker.Options()} {
		nc, err := nats.Connect(e.ClientURL(), opts...)
		if err != nil {
			t.Errorf("%s credential after a restart: %v", name, err)
			continue
		}
		nc.Close()
	}
}

// An admin asks the broker for a run's credentials on MintSubject; a
// worker may not.
func TestRequestCredential(t *testing.T) {
	b := setupAuth(t)
	if err := b.e.ServeMint(b.admin.nc); err != nil {
		t.Fatal(err)
	}
	cred, err := broker.RequestCredential(b.ctx, b.admin.nc, broker.RoleWorker, "a")
	if err != nil {
		t.Fatal(err)
	}
	if cred.Role != broker.RoleWorker || cred.Run != "a" {
		t.Fatalf("credential %s for %q, want worker for a", cred.Role, cred.Run)
	}
	w := dial(t, b.e.ClientURL(), nil, cred.Options()...)
	short, cancel := context.WithTimeout(b.ctx, time.Second)
	defer cancel()
	if _, err := broker.RequestCredential(short, w.nc, broker.RoleWorker, "b"); err == nil {
		t.Error("a worker credential got another run's credential")
	}
	if _, err := broker.RequestCredential(b.ctx, b.admin.nc, broker.RoleWorker, ""); err == nil {
		t.Error("a worker credential without a run was minted")
	}
	plain := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	nc, _ := connect(t, plain.ClientURL(), plain)
	if _, err := broker.RequestCredential(b.ctx, nc, broker.RoleWorker, "a"); !errors.Is(err, broker.ErrNoAuth) {
		t.Errorf("a broker without auth: %v, want ErrNoAuth", err)
	}
}
