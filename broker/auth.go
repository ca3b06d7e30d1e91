package broker

import (
	"errors"
	"fmt"

	"github.com/evoq/evoq/schema"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Role is what a credential may do on the broker.
type Role string

// Roles. A worker or reader credential serves one run; an admin one serves
// every run.
const (
	// RoleAdmin may do everything: the controller and `evoq broker`.
	RoleAdmin Role = "admin"
	// RoleWorker may pull its run's designs, ack them, store its run's
	// results, raise its run's alerts, keep its presence and read its
	// run's state (see Permissions).
	RoleWorker Role = "worker"
	// RoleReader may read its run's results, presence, state and work
	// queue figures, what `evoq status`, `export`, `replay` and `report`
	// need; nothing that writes, purges or deletes.
	RoleReader Role = "reader"
)

// Errors of credentials.
var (
	// ErrNoAuth means a credential was asked of a broker started without
	// Config.Auth.
	ErrNoAuth = errors.New("broker runs without auth")
	// ErrCredential means a credential's role, run or seed is invalid.
	ErrCredential = errors.New("invalid credential")
)

// Credential is what a client connects with to a broker with auth: an nkey
// whose seed only the client holds, and the role and run that the broker
// granted to its public key.
//
// Nkeys rather than user and password: the server keeps only public keys,
// the seed never crosses the wire (the client signs the server's nonce, so
// nothing an eavesdropper sees on a cluster network without TLS can be
// replayed), and a config reload, which re-authenticates every connected
// client, costs one signature check per client. Bcrypt-hashed passwords
// would cost tens of milliseconds per connected client on every Mint.
type Credential struct {
	Role Role   `json:"role"`
	Run  string `json:"run,omitempty"`
	// Seed is the secret: whoever holds it connects with this role.
	Seed string `json:"nkey_seed"`
	// JWT is the user JWT of a broker in operator mode (see Trust),
	// signed by the run's account: it carries the role's permissions
	// and the expiry, and the broker checks it, on every node. Empty for
	// a broker that knows its users by their nkeys.
	JWT string `json:"jwt,omitempty"`
}

// RoleSite is the role of a credential that a site's NATS gave (a .creds
// file, an nkey seed): evoq does not know what it may do; the site's
// account and user permissions say.
const RoleSite Role = ""

// Check reports ErrCredential when the role, the run or the seed is
// invalid.
func (c Credential) Check() error {
	if c.JWT != "" {
		return c.checkJWT()
	}
	if c.Role == RoleSite && c.Run == "" {
		_, err := c.PublicKey()
		return err
	}
	if err := checkRole(c.Role, c.Run); err != nil {
		return err
	}
	_, err := c.PublicKey()
	return err
}

// checkJWT checks a credential of operator mode: a run's admin, worker or
// reader, or a site's user, whose JWT is of the seed's key.
func (c Credential) checkJWT() error {
	switch c.Role {
	case RoleSite:
		if c.Run != "" {
			return fmt.Errorf("%w: a site's credential names no run, not %q", ErrCredential, c.Run)
		}
	case RoleAdmin, RoleWorker, RoleReader:
		if err := schema.ValidToken(c.Run); err != nil {
			return fmt.Errorf("%w: %s credential: run: %v", ErrCredential, c.Role, err)
		}
	default:
		return fmt.Errorf("%w: role %q: want %s, %s or %s", ErrCredential, c.Role, RoleAdmin, RoleWorker, RoleReader)
	}
	pub, err := c.PublicKey()
	if err != nil {
		return err
	}
	uc, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil {
		return fmt.Errorf("%w: the user JWT: %v", ErrCredential, err)
	}
	if uc.Subject != pub {
		return fmt.Errorf("%w: the user JWT is of %s, not of the seed's key %s", ErrCredential, uc.Subject, pub)
	}
	return nil
}

// PublicKey is the public nkey the broker knows the credential by.
func (c Credential) PublicKey() (string, error) {
	kp, err := c.keyPair()
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

func (c Credential) keyPair() (nkeys.KeyPair, error) {
	prefix, _, err := nkeys.DecodeSeed([]byte(c.Seed))
	if err != nil || prefix != nkeys.PrefixByteUser {
		return nil, fmt.Errorf("%w: the nkey seed is not a user seed", ErrCredential)
	}
	return nkeys.FromSeed([]byte(c.Seed))
}

// Options are the client options that connect with c: the nkey and, for a
// run credential, the inbox prefix its permissions allow. An invalid
// credential makes nats.Connect fail with ErrCredential.
func (c Credential) Options() []nats.Option {
	if c.JWT != "" {
		if err := c.checkJWT(); err != nil {
			return []nats.Option{func(*nats.Options) error { return err }}
		}
		opts := []nats.Option{nats.UserJWTAndSeed(c.JWT, c.Seed)}
		if p := InboxPrefix(c.Role, c.Run); p != "" {
			opts = append(opts, nats.CustomInboxPrefix(p))
		}
		return opts
	}
	pub, err := c.PublicKey()
	if err == nil && (c.Role != RoleSite || c.Run != "") {
		err = checkRole(c.Role, c.Run)
	}
	if err != nil {
		return []nats.Option{func(*nats.Options) error { return err }}
	}
	seed := []byte(c.Seed)
	opts := []nats.Option{nats.Nkey(pub, func(nonce []byte) ([]byte, error) {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			return nil, err
		}
		defer kp.Wipe()
		return kp.Sign(nonce)
	})}
	if p := InboxPrefix(c.Role, c.Run); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return opts
}

// checkRole reports ErrCredential unless role is known and run fits it:
// none for an admin, a valid run ID for the others.
func checkRole(role Role, run string) error {
	switch role {
	case RoleAdmin:
		if run != "" {
			return fmt.Errorf("%w: an admin credential serves every run, not run %q", ErrCredential, run)
		}
		return nil
	case RoleWorker, RoleReader:
		if err := schema.ValidToken(run); err != nil {
			return fmt.Errorf("%w: %s credential: run: %v", ErrCredential, role, err)
		}
		return nil
	}
	return fmt.Errorf("%w: role %q: want %s, %s or %s", ErrCredential, role, RoleAdmin, RoleWorker, RoleReader)
}

// InboxPrefix is the reply-subject prefix of role's clients for run:
// replies to their requests, pulled designs and acknowledgements of their
// publishes arrive under it, and a run credential may subscribe nowhere
// else, so no client can read another role's or run's replies. Clients in
// other languages set it as their custom inbox prefix. An admin uses the
// default, "".
func InboxPrefix(role Role, run string) string {
	if role == RoleAdmin || checkRole(role, run) != nil {
		return ""
	}
	return "_INBOX.evoq-" + string(role) + "-" + run
}

// Permissions are the subjects role may publish and subscribe to for run:
// nil (everything) for an admin, none at all for an unknown role. Each
// allowed subject is commented with the client call that needs it; the
// JetStream API answers to the client's inbox.
func Permissions(role Role, run string) *server.Permissions {
	if checkRole(role, run) != nil {
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Deny: []string{">"}},
			Subscribe: &server.SubjectPermission{Deny: []string{">"}},
		}
	}
	switch role {
	case RoleWorker:
		return workerPermissions(run)
	case RoleReader:
		return readerPermissions(run)
	}
	return nil
}

// Subjects of the JetStream API and of key-value buckets.
const (
	jsAPI    = "$JS.API."
	kvStream = "KV_" // + bucket
	kvPrefix = "$KV."
)

func streamInfo(stream string) string { return jsAPI + "STREAM.INFO." + stream }

// kvKey is the subject of key in bucket.
func kvKey(bucket, key string) string { return kvPrefix + bucket + "." + key }

// directGet is the API subject that reads the last value of key in bucket
// (nats.go's KeyValue.Get on a bucket with direct get, which every bucket
// has). The other direct get subject, which takes the key in the request
// body, is never granted: it could read any key.
func directGet(bucket, key string) string {
	return jsAPI + "DIRECT.GET." + kvStream + bucket + "." + kvKey(bucket, key)
}

// consumerCreate is the API subject that creates a consumer of any name on
// stream, filtered to exactly filter: the server refuses a request whose
// configured filter differs from the subject's.
func consumerCreate(stream, filter string) string {
	return jsAPI + "CONSUMER.CREATE." + stream + ".*." + filter
}

// ackSubjects are the reply subjects of messages delivered by consumer on
// stream, in the server's v1 and v2 formats ($JS.ACK.<stream>.<consumer>...
// and $JS.ACK.<domain>.<account hash>.<stream>.<consumer>...).
func ackSubjects(stream, consumer string) []string {
	return []string{"$JS.ACK." + stream + "." + consumer + ".>", "$JS.ACK.*.*." + stream + "." + consumer + ".>"}
}

// flowControl are the reply subjects of flow-control requests from push
// consumers on stream (key-value watchers), in both formats.
func flowControl(stream string) []string {
	return []string{"$JS.FC." + stream + ".>", "$JS.FC.*.*." + stream + ".>"}
}

// Subjects of a run's checkpoint bucket (schema.CheckpointBucket), an
// object store: a stream OBJ_<bucket> whose chunks are stored under
// $O.<bucket>.C.<object nuid> and whose metadata under $O.<bucket>.M.<name>.
func objStream(run string) string { return "OBJ_" + schema.CheckpointBucket(run) }

func objSubject(run, kind string) string {
	return "$O." + schema.CheckpointBucket(run) + "." + kind + ".*"
}

// objRead are what listing the run's checkpoints needs (the checkpoint
// package's List, evoq status): bind to the bucket, read the last
// metadata of a name (ObjectStore.GetInfo, a direct get by subject), and
// a push consumer on every name's metadata (ReadStored), which asks for
// flow control. It is never deleted by its client: the broker removes it
// once idle (SnapshotIdle), and no run credential may delete a consumer,
// which could be another client's.
func objRead(run string) []string {
	s := objStream(run)
	return append([]string{
		streamInfo(s),
		jsAPI + "DIRECT.GET." + s + "." + objSubject(run, "M"),
		jsAPI + "DIRECT.GET." + s + ".$O." + schema.CheckpointBucket(run) + ".M.>",
		consumerCreate(s, objSubject(run, "M")),
	}, flowControl(s)...)
}

func workerPermissions(run string) *server.Permissions {
	cons := schema.ConsumerName(run)
	pub := []string{
		jsAPI + "CONSUMER.INFO." + schema.DesignStream + "." + cons,     // js.Consumer: bind to the run's consumer, read its limits
		jsAPI + "CONSUMER.MSG.NEXT." + schema.DesignStream + "." + cons, // Consumer.Next: pull one design
		schema.ResultSubject(run),                                       // store a result (PubAck to the inbox)
		schema.ReportSubject(run),                                       // store an intermediate report (PubAck to the inbox)
		schema.AskSubject(run),                                          // Conn.Request: ask the controller whether a design at a rung goes on
		schema.AlertSubject(run),                                        // alert the controller
		streamInfo(kvStream + schema.PresenceBucket),                    // js.KeyValue binds to the bucket's stream
		streamInfo(kvStream + schema.RunBucket),
		// KeyValue.Put and Delete of the worker's heartbeat; the bucket
		// takes no roll-up (DenyRollups), or a put with the header
		// Nats-Rollup: all would purge every run's heartbeats.
		kvKey(schema.PresenceBucket, run+".*"),
		directGet(schema.PresenceBucket, run+".*"), // KeyValue.Get of a heartbeat of the run
		directGet(schema.RunBucket, run),           // KeyValue.Get of the run's state
	}
	pub = append(pub, ackSubjects(schema.DesignStream, cons)...) // Ack, Nak, InProgress, Term
	// checkpoint.Object.Put of the run's checkpoints: the chunks, and
	// the request that asks the controller to commit them. Never the
	// metadata: whoever may publish an object's metadata may mark any
	// object deleted or point it at other bytes (nats object rm is such
	// a publish), so the controller alone publishes it
	// (checkpoint.Object.Commit). Never the purge either: it takes its
	// subject in the request body, so whoever may purge a replaced
	// object's chunks may purge the whole bucket. The bucket's stream
	// takes no roll-up (broker.DenyRollups), or a chunk published with
	// the header Nats-Rollup: all would purge it. The chunks of an upload
	// that failed or was never committed are purged by the controller's
	// sweep (checkpoint.Object.Sweep).
	pub = append(pub, objSubject(run, "C"), schema.CommitSubject(run))
	// checkpoint.Object.Fetch: an object's chunks, one direct get by
	// sequence and subject each (the request names its subject in the
	// body: any message of the run's own bucket, which the worker may
	// read anyway).
	pub = append(pub, jsAPI+"DIRECT.GET."+objStream(run))
	pub = append(pub, objRead(run)...)
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{
			InboxPrefix(RoleWorker, run) + ".>", // replies, pulled designs, PubAcks
			kvKey(schema.RunBucket, run),        // watch the run's state
			// Conn.Subscribe in worker.watchControl: the controller's
			// orders (a quarantined slot). A credential serves a run,
			// not one worker, so it may hear the orders to the run's
			// other workers, which say nothing secret.
			schema.ControlSubject(run, "*"),
		}},
	}
}

func readerPermissions(run string) *server.Permissions {
	pub := []string{
		jsAPI + "INFO",                  // js.AccountInfo: is JetStream there
		streamInfo(schema.ResultStream), // js.Stream, Stream.Info: how many results
		consumerCreate(schema.ResultStream, schema.ResultSubject(run)), // js.OrderedConsumer on the run's results
		streamInfo(schema.ReportStream),                                // js.Stream, Stream.Info: how many reports
		consumerCreate(schema.ReportStream, schema.ReportSubject(run)), // js.OrderedConsumer on the run's reports (export, report)
		jsAPI + "CONSUMER.MSG.NEXT." + schema.ReportStream + ".*",      // fetch from it; its name is random, as for the results
		// Fetch from that ordered consumer. Its name is random, so any name
		// is allowed; nothing granted lists the stream's consumers, so a
		// reader cannot find another client's, which may follow another
		// run.
		jsAPI + "CONSUMER.MSG.NEXT." + schema.ResultStream + ".*",
		jsAPI + "CONSUMER.INFO." + schema.DesignStream + "." + schema.ConsumerName(run), // the work queue's figures
		streamInfo(kvStream + schema.PresenceBucket),                                    // js.KeyValue binds to the bucket's stream
		streamInfo(kvStream + schema.RunBucket),
		directGet(schema.RunBucket, run),           // KeyValue.Get of the run's state
		directGet(schema.PresenceBucket, run+".*"), // KeyValue.Get of the run's heartbeats
		streamInfo(kvStream + schema.LeaseBucket),  // js.KeyValue binds to the bucket's stream
		directGet(schema.LeaseBucket, run),         // KeyValue.Get of the controller's lease: who runs the run
		// LastValuesOf (ReadStored) of the run's keys: push consumers
		// filtered to them, which ask for flow control.
		consumerCreate(kvStream+schema.RunBucket, kvKey(schema.RunBucket, run)),
		consumerCreate(kvStream+schema.PresenceBucket, kvKey(schema.PresenceBucket, run+".*")),
	}
	// No CONSUMER.DELETE: a reader's own consumers (ordered ones and
	// ReadStored's) are removed by the broker once idle; one allowed to
	// delete its own could delete every other client's on the stream.
	pub = append(pub, flowControl(kvStream+schema.RunBucket)...)
	pub = append(pub, flowControl(kvStream+schema.PresenceBucket)...)
	pub = append(pub, objRead(run)...) // the checkpoint store's figures (evoq status)
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{
			InboxPrefix(RoleReader, run) + ".>",    // replies and deliveries
			kvKey(schema.RunBucket, run),           // watch the run's state
			kvKey(schema.PresenceBucket, run+".*"), // watch the run's heartbeats
		}},
	}
}

// newCredential creates a credential with a fresh nkey, from crypto/rand.
func newCredential(role Role, run string) (Credential, string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Credential{}, "", fmt.Errorf("create nkey: %w", err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return Credential{}, "", fmt.Errorf("create nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return Credential{}, "", fmt.Errorf("create nkey: %w", err)
	}
	return Credential{Role: role, Run: run, Seed: string(seed)}, pub, nil
}

// AdminCredential is the admin credential generated at Start when
// Config.Auth is set; the zero Credential otherwise. In-process
// connections made by Connect present it.
func (e *Embedded) AdminCredential() Credential { return e.admin }

// Mint creates a credential for role and run and adds it to the running
// server with a config reload: connected clients stay connected and keep
// their subscriptions. It fails with ErrNoAuth unless the broker was
// started with Config.Auth. The credential's public key is kept in the
// store's auth file, so it stays valid across restarts of the broker.
func (e *Embedded) Mint(role Role, run string) (Credential, error) {
	if err := checkRole(role, run); err != nil {
		return Credential{}, err
	}
	if !e.auth {
		return Credential{}, fmt.Errorf("mint a %s credential: %w", role, ErrNoAuth)
	}
	c, pub, err := newCredential(role, run)
	if err != nil {
		return Credential{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	users := e.users
	users.Users = append(append([]authEntry(nil), e.users.Users...), authEntry{Role: role, Run: run, Nkey: pub})
	if err := saveAuth(e.dir, users); err != nil {
		return Credential{}, fmt.Errorf("mint a %s credential for run %q: %w", role, run, err)
	}
	e.users = users
	opts := e.opts.Clone()
	opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: pub, Permissions: Permissions(role, run)})
	// The server takes the options it is given as its own: hand it a copy
	// and keep ours, so that the next Mint reads nothing it may change.
	if err := e.srv.ReloadOptions(opts.Clone()); err != nil {
		return Credential{}, fmt.Errorf("mint a %s credential for run %q: reload the broker's users: %w", role, run, err)
	}
	e.opts = opts
	return c, nil
}
