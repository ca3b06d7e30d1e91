package broker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// A broker in operator mode trusts one operator key, NATS's decentralized
// authentication: every node of a cluster verifies every client on its
// own, with no user list to keep in step. Each run is an account of its
// own, so one run's clients cannot see another's subjects, streams or
// replies at all; its credentials are user JWTs signed by the run's
// account, carrying the same least-privilege permissions as Permissions.
// Account JWTs reach every node through the cluster (the "full" resolver,
// kept in each node's store), so a run created on one node works on all.
//
// The trust root is one file, TrustFile, mode 0600, made once and shared
// by every node of a cluster (on the shared file system, or copied): the
// operator's and the system account's seeds and the routes' password.
// Whoever holds it can mint any credential. A run's account key is derived
// from the operator seed and the run ID, so any node holding the file
// signs for any run, and nothing more needs to be kept.

// TrustFile is the trust root's file name, in the directory `evoq broker
// init --dir` names.
const TrustFile = "evoq-trust.json"

// ErrTrust means a trust file is missing, unreadable or invalid.
var ErrTrust = errors.New("invalid trust root")

// Trust is a broker cluster's trust root.
type Trust struct {
	// OperatorSeed signs the accounts; SystemSeed is the system account's
	// key, with which the brokers exchange account JWTs.
	OperatorSeed string `json:"operator_seed"`
	SystemSeed   string `json:"system_account_seed"`
	// RoutePassword authenticates the routes between the nodes, user
	// RouteUser.
	RoutePassword string `json:"route_password"`
}

// RouteUser is the user name of the routes between the nodes of a
// cluster in operator mode.
const RouteUser = "evoq-route"

// InitTrust makes a new trust root in dir/TrustFile, or reads the one
// there; created says which.
func InitTrust(dir string) (t *Trust, created bool, err error) {
	return InitTrustAt(filepath.Join(dir, TrustFile))
}

// InitTrustAt makes a new trust root in the file path, or reads the one
// there; created says which.
func InitTrustAt(path string) (t *Trust, created bool, err error) {
	dir := filepath.Dir(path)
	if t, err := LoadTrust(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return t, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrTrust, err)
	}
	op, err := nkeys.CreateOperator()
	if err != nil {
		return nil, false, err
	}
	sys, err := nkeys.CreateAccount()
	if err != nil {
		return nil, false, err
	}
	opSeed, _ := op.Seed()
	sysSeed, _ := sys.Seed()
	pw := make([]byte, 24)
	if _, err := rand.Read(pw); err != nil {
		return nil, false, err
	}
	t = &Trust{OperatorSeed: string(opSeed), SystemSeed: string(sysSeed), RoutePassword: hex.EncodeToString(pw)}
	data, _ := json.MarshalIndent(t, "", "  ")
	// Written whole to a temporary file, then linked into place: two
	// nodes initializing one shared directory at once keep the first's
	// root, and the second reads it, never half of it.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrTrust, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("%w: write %s: %v", ErrTrust, path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("%w: write %s: %v", ErrTrust, path, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, false, fmt.Errorf("%w: write %s: %v", ErrTrust, path, err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		t, err := LoadTrust(path)
		return t, false, err
	} else if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrTrust, err)
	}
	return t, true, nil
}

// LoadTrust reads a trust file. Its mode must keep it from other users.
func LoadTrust(path string) (*Trust, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTrust, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o: it holds the keys to every run; chmod 600 it", ErrTrust, path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTrust, err)
	}
	var t Trust
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrTrust, path, err)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrTrust, path, err)
	}
	return &t, nil
}

func (t *Trust) check() error {
	if p, _, err := nkeys.DecodeSeed([]byte(t.OperatorSeed)); err != nil || p != nkeys.PrefixByteOperator {
		return errors.New("operator_seed is not an operator seed")
	}
	if p, _, err := nkeys.DecodeSeed([]byte(t.SystemSeed)); err != nil || p != nkeys.PrefixByteAccount {
		return errors.New("system_account_seed is not an account seed")
	}
	if len(t.RoutePassword) < 16 {
		return errors.New("route_password is too short")
	}
	return nil
}

func (t *Trust) operator() (nkeys.KeyPair, error) { return nkeys.FromSeed([]byte(t.OperatorSeed)) }
func (t *Trust) system() (nkeys.KeyPair, error)   { return nkeys.FromSeed([]byte(t.SystemSeed)) }

// runAccount is run's account key: derived from the operator seed and the
// run ID, the same on every node and every start.
func (t *Trust) runAccount(run string) (nkeys.KeyPair, error) {
	if err := schema.ValidToken(run); err != nil {
		return nil, fmt.Errorf("%w: run: %v", ErrCredential, err)
	}
	m := hmac.New(sha256.New, []byte(t.OperatorSeed))
	m.Write([]byte("evoq run account\x00" + run))
	return nkeys.FromRawSeed(nkeys.PrefixByteAccount, m.Sum(nil))
}

// RunAccount is the public key of run's account.
func (t *Trust) RunAccount(run string) (string, error) {
	kp, err := t.runAccount(run)
	if err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// operatorJWT is the operator's JWT, naming the system account.
func (t *Trust) operatorJWT() (*jwt.OperatorClaims, error) {
	op, err := t.operator()
	if err != nil {
		return nil, err
	}
	pub, _ := op.PublicKey()
	sys, err := t.system()
	if err != nil {
		return nil, err
	}
	sysPub, _ := sys.PublicKey()
	c := jwt.NewOperatorClaims(pub)
	c.Name = "evoq"
	c.SystemAccount = sysPub
	if _, err := c.Encode(op); err != nil {
		return nil, err
	}
	return c, nil
}

// systemJWT is the system account's JWT.
func (t *Trust) systemJWT() (pub, token string, err error) {
	op, err := t.operator()
	if err != nil {
		return "", "", err
	}
	sys, err := t.system()
	if err != nil {
		return "", "", err
	}
	pub, _ = sys.PublicKey()
	c := jwt.NewAccountClaims(pub)
	c.Name = "SYS"
	token, err = c.Encode(op)
	return pub, token, err
}

// RunAccountJWT is run's account JWT, signed by the operator: JetStream
// without limits of its own (the store's cap applies), and the users
// revoked, by public key and time (a user JWT issued at or before the time
// is refused).
func (t *Trust) RunAccountJWT(run string, revoked map[string]int64) (string, error) {
	op, err := t.operator()
	if err != nil {
		return "", err
	}
	acc, err := t.runAccount(run)
	if err != nil {
		return "", err
	}
	pub, _ := acc.PublicKey()
	c := jwt.NewAccountClaims(pub)
	c.Name = run
	c.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1,
		MaxAckPending: -1, MemoryMaxStreamBytes: -1, DiskMaxStreamBytes: -1}
	for k, at := range revoked {
		c.RevokeAt(k, time.Unix(at, 0))
	}
	return c.Encode(op)
}

// UserJWT mints a credential of role for run as a user JWT signed by the
// run's account: an admin of the run may do anything in its account (and
// nothing outside it), a worker or reader what Permissions allows. A
// non-zero expires ends it then. The JWT's subject is a fresh nkey whose
// seed only the credential holds.
func (t *Trust) UserJWT(role Role, run string, expires time.Time) (Credential, error) {
	if role != RoleAdmin && role != RoleWorker && role != RoleReader {
		return Credential{}, fmt.Errorf("%w: role %q: want %s, %s or %s", ErrCredential, role, RoleAdmin, RoleWorker, RoleReader)
	}
	acc, err := t.runAccount(run)
	if err != nil {
		return Credential{}, err
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		return Credential{}, err
	}
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	c := jwt.NewUserClaims(pub)
	c.Name = string(role) + "@" + run
	if !expires.IsZero() {
		c.Expires = expires.Unix()
	}
	if role != RoleAdmin {
		p := Permissions(role, run)
		c.Pub.Allow.Add(p.Publish.Allow...)
		c.Sub.Allow.Add(p.Subscribe.Allow...)
	}
	token, err := c.Encode(acc)
	if err != nil {
		return Credential{}, err
	}
	return Credential{Role: role, Run: run, Seed: string(seed), JWT: token}, nil
}

// systemUser is a user of the system account, for publishing account
// JWTs to the brokers.
func (t *Trust) systemUser() (nats.Option, error) {
	sys, err := t.system()
	if err != nil {
		return nil, err
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	c := jwt.NewUserClaims(pub)
	c.Name = "evoq-system"
	token, err := c.Encode(sys)
	if err != nil {
		return nil, err
	}
	return nats.UserJWTAndSeed(token, string(seed)), nil
}

// ErrNotOperatorStore means a store holds runs made without operator
// mode, in the broker's global account, which a broker in operator mode
// does not serve.
var ErrNotOperatorStore = errors.New("store made without operator mode")

// checkStore refuses a store whose runs are in the global account (a
// broker that kept nkey users, or none): in operator mode they would be
// there but out of every run's reach.
func checkStore(dir string) error {
	global := filepath.Join(dir, "jetstream", "$G", "streams")
	entries, err := os.ReadDir(global)
	_, auth := os.Stat(filepath.Join(dir, authFile))
	if (err == nil && len(entries) > 0) || auth == nil {
		return fmt.Errorf("%w: %s holds runs (or credentials) of a broker without --trust; operator mode keeps each run in an account of its own, and would leave them out of reach: "+
			"go on serving this store without --trust (and the cluster with --insecure on a network of your own), or start the brokers with --trust on new stores (--dir)", ErrNotOperatorStore, dir)
	}
	return nil
}

// apply puts opts in operator mode: the operator trusted, the system
// account preloaded, account JWTs kept under dir/jwt and exchanged with
// the cluster's other nodes, and the routes authenticated.
func (t *Trust) apply(opts *server.Options) error {
	if err := checkStore(opts.StoreDir); err != nil {
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	opc, err := t.operatorJWT()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTrust, err)
	}
	sysPub, sysJWT, err := t.systemJWT()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTrust, err)
	}
	res, err := server.NewDirAccResolver(filepath.Join(opts.StoreDir, "jwt"), 0, time.Minute, server.NoDelete)
	if err != nil {
		return fmt.Errorf("%w: the account store: %v", ErrStart, err)
	}
	if err := res.Store(sysPub, sysJWT); err != nil {
		return fmt.Errorf("%w: the account store: %v", ErrStart, err)
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{opc}
	opts.SystemAccount = sysPub
	opts.AccountResolver = res
	if opts.Cluster.Port != 0 {
		opts.Cluster.Username, opts.Cluster.Password = RouteUser, t.RoutePassword
		for _, r := range opts.Routes {
			r.User = url.UserPassword(RouteUser, t.RoutePassword)
		}
	}
	return nil
}

// claimsReply is the brokers' answer to an account JWT.
type claimsReply struct {
	Data *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"data"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// PushAccount stores an account JWT on the broker at url (and, through
// it, on every node of its cluster), over a system-account connection.
func (t *Trust) PushAccount(ctx context.Context, connect []nats.Option, token string) error {
	sys, err := t.systemUser()
	if err != nil {
		return err
	}
	nc, err := nats.Connect("", append(connect, sys, nats.Name("evoq account update"))...)
	if err != nil {
		return fmt.Errorf("connect to the system account: %w", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$SYS.REQ.CLAIMS.UPDATE", []byte(token))
	if err != nil {
		return fmt.Errorf("store the account JWT: %w", err)
	}
	var rep claimsReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return fmt.Errorf("store the account JWT: malformed answer %q", m.Data)
	}
	if rep.Error != nil {
		return fmt.Errorf("store the account JWT: the broker refused it: %s", rep.Error.Description)
	}
	return nil
}

// LookupAccount reads the account JWT the brokers hold for pub, or "" if
// none.
func (t *Trust) LookupAccount(ctx context.Context, connect []nats.Option, pub string) (string, error) {
	sys, err := t.systemUser()
	if err != nil {
		return "", err
	}
	nc, err := nats.Connect("", append(connect, sys, nats.Name("evoq account lookup"))...)
	if err != nil {
		return "", fmt.Errorf("connect to the system account: %w", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$SYS.REQ.ACCOUNT."+pub+".CLAIMS.LOOKUP", nil)
	if err != nil {
		return "", fmt.Errorf("look up account %s: %w", pub, err)
	}
	return string(m.Data), nil
}

// CreateRun makes run's account known to the brokers behind connect (a
// system-account connection is made with the trust), keeping the users
// it revoked before: a run that exists already is left as it is.
func (t *Trust) CreateRun(ctx context.Context, connect []nats.Option, run string) error {
	return t.updateRun(ctx, connect, run, nil)
}

// Revoke refuses user (a credential's public key) of run from now on, on
// every node: its connections are closed and it cannot connect again.
func (t *Trust) Revoke(ctx context.Context, connect []nats.Option, run, user string) error {
	return t.updateRun(ctx, connect, run, func(revoked map[string]int64) {
		// A JWT issued in this very second is revoked too: the brokers
		// compare whole seconds.
		revoked[user] = time.Now().Unix() + 1
	})
}

// updateRun pushes run's account JWT with the revocations the brokers
// hold, changed by edit.
func (t *Trust) updateRun(ctx context.Context, connect []nats.Option, run string, edit func(map[string]int64)) error {
	pub, err := t.RunAccount(run)
	if err != nil {
		return err
	}
	revoked := map[string]int64{}
	old, err := t.LookupAccount(ctx, connect, pub)
	if err != nil {
		return err
	}
	if old != "" {
		ac, err := jwt.DecodeAccountClaims(old)
		if err == nil {
			if edit == nil {
				return nil // there already
			}
			for k, at := range ac.Revocations {
				revoked[k] = at
			}
		}
	}
	if edit != nil {
		edit(revoked)
	}
	token, err := t.RunAccountJWT(run, revoked)
	if err != nil {
		return err
	}
	return t.PushAccount(ctx, connect, token)
}

// StoredRuns are the runs whose accounts a store of a broker in operator
// mode holds (its <store>/jwt), sorted.
func StoredRuns(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "jwt", "*.jwt"))
	if err != nil {
		return nil, err
	}
	var runs []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(data)))
		if err != nil || ac.Name == "SYS" || schema.ValidToken(ac.Name) != nil {
			continue
		}
		runs = append(runs, ac.Name)
	}
	slices.Sort(runs)
	return runs, nil
}

// StoreTrustFile is where a store keeps its own trust root, when its
// broker made one for itself: dir/TrustFile.
func StoreTrustFile(dir string) string { return filepath.Join(dir, TrustFile) }

// KeepsNkeyUsers reports whether dir is the store of a broker that keeps
// nkey users (Config.Auth without a trust root), as brokers did before
// operator mode: it keeps doing so.
func KeepsNkeyUsers(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, authFile))
	return err == nil
}
