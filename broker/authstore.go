package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// authFile keeps a broker's credentials in its store directory, so that a
// restarted broker knows the admin and every minted credential again and
// its clients reconnect: the admin seed and the public keys of the others
// (their seeds live only in the connect files). Mode 0600.
const authFile = "evoq-auth.json"

// authState is what authFile holds.
type authState struct {
	AdminSeed string      `json:"admin_nkey_seed"`
	Users     []authEntry `json:"users"`
}

type authEntry struct {
	Role Role   `json:"role"`
	Run  string `json:"run,omitempty"`
	Nkey string `json:"nkey"` // the public key
}

// loadAuth reads dir's auth file, or makes a new admin credential when
// there is none.
func loadAuth(dir string) (authState, Credential, error) {
	var st authState
	data, err := os.ReadFile(filepath.Join(dir, authFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		admin, _, err := newCredential(RoleAdmin, "")
		if err != nil {
			return st, Credential{}, err
		}
		st.AdminSeed = admin.Seed
		return st, admin, saveAuth(dir, st)
	case err != nil:
		return st, Credential{}, fmt.Errorf("read the broker's credentials: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, Credential{}, fmt.Errorf("%s: %w (remove it to start with new credentials; every connect file must then be written again)",
			filepath.Join(dir, authFile), err)
	}
	admin := Credential{Role: RoleAdmin, Seed: st.AdminSeed}
	if err := admin.Check(); err != nil {
		return st, Credential{}, fmt.Errorf("%s: admin: %w", filepath.Join(dir, authFile), err)
	}
	return st, admin, nil
}

// saveAuth writes the auth file atomically with mode 0600.
func saveAuth(dir string, st authState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+authFile+".*")
	if err != nil {
		return fmt.Errorf("save the broker's credentials: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("save the broker's credentials: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save the broker's credentials: %w", err)
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, authFile))
}

// nkeyUsers are the server's users for st: the admin, unrestricted, and
// each minted credential with its role's permissions.
func nkeyUsers(st authState, admin Credential) ([]*server.NkeyUser, error) {
	pub, err := admin.PublicKey()
	if err != nil {
		return nil, err
	}
	users := []*server.NkeyUser{{Nkey: pub}}
	for _, u := range st.Users {
		users = append(users, &server.NkeyUser{Nkey: u.Nkey, Permissions: Permissions(u.Role, u.Run)})
	}
	return users, nil
}

// MintSubject is where a broker with auth answers an admin's request for a
// worker or reader credential: a controller connected to a standalone
// broker asks it for its run's credentials there. Only the admin may
// publish on it.
const MintSubject = "evoq.admin.mint"

// mintRequest and mintReply are the bodies on MintSubject.
type mintRequest struct {
	Role Role   `json:"role"`
	Run  string `json:"run"`
}

type mintReply struct {
	Credential *Credential `json:"credential,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// ServeMint answers credential requests on MintSubject over nc, which must
// be an admin connection to this broker. It does nothing on a broker
// without auth.
func (e *Embedded) ServeMint(nc *nats.Conn) error {
	if !e.auth {
		return nil
	}
	_, err := nc.Subscribe(MintSubject, func(m *nats.Msg) {
		var req mintRequest
		var rep mintReply
		if err := json.Unmarshal(m.Data, &req); err != nil {
			rep.Error = "malformed request: " + err.Error()
		} else if c, err := e.Mint(req.Role, req.Run); err != nil {
			rep.Error = err.Error()
		} else {
			rep.Credential = &c
		}
		data, _ := json.Marshal(rep)
		_ = m.Respond(data)
	})
	if err != nil {
		return fmt.Errorf("serve credentials on %s: %w", MintSubject, err)
	}
	return nil
}

// RequestCredential asks the broker behind nc, an admin connection, for a
// credential of role for run. A broker without auth answers no one:
// ErrNoAuth.
func RequestCredential(ctx context.Context, nc *nats.Conn, role Role, run string) (Credential, error) {
	data, _ := json.Marshal(mintRequest{Role: role, Run: run})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, MintSubject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return Credential{}, fmt.Errorf("ask the broker for a %s credential: %w (no evoq broker with auth answers on %s)", role, ErrNoAuth, MintSubject)
	}
	if err != nil {
		return Credential{}, fmt.Errorf("ask the broker for a %s credential: %w", role, err)
	}
	var rep mintReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return Credential{}, fmt.Errorf("ask the broker for a %s credential: malformed answer: %w", role, err)
	}
	if rep.Error != "" || rep.Credential == nil {
		return Credential{}, fmt.Errorf("the broker refused a %s credential for run %q: %s", role, run, rep.Error)
	}
	return *rep.Credential, rep.Credential.Check()
}
