// Package history reads a run's history back from JetStream: the runs in
// the run bucket and the results stream of one run, in stream order. It
// reads either a stopped store directory, by starting an embedded broker
// on it, or a live broker.
package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// Errors of Open, Runs and Results.
var (
	// ErrSource means the source names no store or broker, or more than one.
	ErrSource = errors.New("history source")
	// ErrNoStore means the store directory does not exist or holds no
	// JetStream store.
	ErrNoStore = errors.New("no evoq store")
	// ErrNoRun means the store holds no run, or not the one asked for.
	ErrNoRun = errors.New("no such run")
	// ErrStop, returned by a Results callback, ends the read early without
	// an error.
	ErrStop = broker.ErrStopReading
)

// Source says where to read the history from: exactly one of Dir, NATS and
// ConnectFile.
type Source struct {
	// Dir is a JetStream store directory; an embedded broker is started on
	// it, so no other broker may be using it.
	Dir string
	// NATS is the URL of a live broker.
	NATS string
	// ConnectFile is a connect file written by a controller.
	ConnectFile string
	// Credential is the credential to connect to NATS with (a site's
	// .creds or nkey), if any.
	Credential *broker.Credential
	// Trust is the trust root of a store of a broker in operator mode
	// (see broker.Trust), with Dir: the reader connects as the admin of
	// Run's account, or of the store's only run when Run is empty.
	Trust *broker.Trust
	Run   string
	// Logger receives the embedded broker's warnings. Defaults to a logger
	// that discards everything.
	Logger logrus.FieldLogger
}

// Reader reads runs and results. Close it when done.
type Reader struct {
	embedded *broker.Embedded
	nc       *nats.Conn
	js       jetstream.JetStream
	// ConnectRun is the run named in the connect file, if any.
	ConnectRun string
}

// Open connects to the source's broker, starting an embedded one on a
// store directory.
func Open(ctx context.Context, src Source) (*Reader, error) {
	if src.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		src.Logger = l
	}
	n := 0
	for _, s := range []string{src.Dir, src.NATS, src.ConnectFile} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: give exactly one of --dir, --nats and --connect", ErrSource)
	}
	r := &Reader{}
	var url string
	var opts []nats.Option
	switch {
	case src.Dir != "":
		if src.Trust == nil {
			// A store that keeps its own trust root is read with it.
			if t, err := broker.LoadTrust(broker.StoreTrustFile(src.Dir)); err == nil {
				src.Trust = t
			}
		}
		e, err := startStore(src.Dir, src.Trust, src.Logger)
		if err != nil {
			return nil, err
		}
		r.embedded, url = e, e.ClientURL()
		opts = append(opts, nats.InProcessServer(e.Server()))
		if src.Trust != nil {
			run, err := storeRun(src.Dir, src.Run)
			if err != nil {
				r.Close()
				return nil, err
			}
			admin, err := src.Trust.UserJWT(broker.RoleAdmin, run, time.Time{})
			if err != nil {
				r.Close()
				return nil, err
			}
			opts = append(opts, admin.Options()...)
			r.ConnectRun = run
		}
	case src.ConnectFile != "":
		cf, err := broker.ReadConnectFile(src.ConnectFile)
		if err != nil {
			return nil, err
		}
		url, r.ConnectRun = strings.Join(cf.URLs, ","), cf.Run
		fileOpts, err := cf.Options()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src.ConnectFile, err)
		}
		opts = append(opts, fileOpts...)
		if cf.Trust != "" {
			// An admin's file of a broker in operator mode: the reader
			// is the admin of the run's account, minted with the trust
			// root the file names.
			admin, err := trustAdmin(cf.Trust, src.Run, cf.Run)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", src.ConnectFile, err)
			}
			opts = append(opts, admin.Options()...)
			r.ConnectRun = admin.Run
		}
	default:
		url = src.NATS
		if src.Credential != nil {
			opts = append(opts, src.Credential.Options()...)
		}
	}
	if err := r.connect(ctx, url, opts); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// trustAdmin is the admin credential of run (else fileRun) minted with
// the trust root at path.
func trustAdmin(path, run, fileRun string) (broker.Credential, error) {
	if run == "" {
		run = fileRun
	}
	if run == "" {
		return broker.Credential{}, fmt.Errorf("%w: a broker in operator mode keeps each run in an account of its own: name the run with --run", ErrSource)
	}
	t, err := broker.LoadTrust(path)
	if err != nil {
		return broker.Credential{}, err
	}
	return t.UserJWT(broker.RoleAdmin, run, time.Time{})
}

// storeRun is run, or the only run of an operator-mode store.
func storeRun(dir, run string) (string, error) {
	if run != "" {
		return run, nil
	}
	runs, err := broker.StoredRuns(dir)
	if err != nil {
		return "", err
	}
	if len(runs) != 1 {
		return "", fmt.Errorf("%w: the store %s holds %d runs, each in an account of its own %v: name one with --run", ErrSource, dir, len(runs), runs)
	}
	return runs[0], nil
}

// startStore starts an embedded broker on an existing store directory.
func startStore(dir string, trust *broker.Trust, log logrus.FieldLogger) (*broker.Embedded, error) {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: store directory %s does not exist", ErrNoStore, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		return nil, fmt.Errorf("%w: %s holds no JetStream store (no jetstream directory)", ErrNoStore, dir)
	}
	e, err := broker.Start(broker.Config{Dir: dir, Listen: "127.0.0.1:0", Logger: log, Trust: trust})
	if err != nil {
		return nil, fmt.Errorf("open store %s (is a broker or controller still using it? stop it, or read the live broker with --nats or --connect): %w", dir, err)
	}
	return e, nil
}

func (r *Reader) connect(ctx context.Context, url string, opts []nats.Option) error {
	opts = append(opts, nats.Name("evoq-history"), nats.Timeout(5*time.Second))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", broker.RedactURL(url), err)
	}
	r.nc = nc
	if r.js, err = jetstream.New(nc); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if _, err := r.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream on %s: %w", url, err)
	}
	return nil
}

// Close disconnects and stops the embedded broker, if any.
func (r *Reader) Close() {
	if r.nc != nil {
		r.nc.Close()
	}
	if r.embedded != nil {
		r.embedded.Shutdown()
	}
}

// RunInfo is one run of the run bucket.
type RunInfo struct {
	ID     string
	Phase  schema.Phase
	Budget int
	// Run is the decoded state, nil when Err is set.
	Run *schema.Run
	// Err says why the entry did not decode.
	Err error
}

// Runs lists the runs in the run bucket, sorted by ID.
func (r *Reader) Runs(ctx context.Context) ([]RunInfo, error) {
	kv, err := r.js.KeyValue(ctx, schema.RunBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", schema.RunBucket, err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	var ids []string
	for k := range keys.Keys() {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	out := make([]RunInfo, 0, len(ids))
	for _, id := range ids {
		info := RunInfo{ID: id}
		e, err := kv.Get(ctx, id)
		if err == nil {
			info.Run, err = schema.DecodeRun(e.Value())
		}
		if err != nil {
			info.Err = err
		} else {
			info.Phase, info.Budget = info.Run.Phase, info.Run.Budget
		}
		out = append(out, info)
	}
	return out, nil
}

// run reads one run's entry from the run bucket.
func (r *Reader) run(ctx context.Context, id string) (RunInfo, error) {
	kv, err := r.js.KeyValue(ctx, schema.RunBucket)
	if err != nil {
		return RunInfo{}, err
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return RunInfo{}, err
	}
	ri := RunInfo{ID: id}
	if run, err := schema.DecodeRun(e.Value()); err != nil {
		ri.Err = err
	} else {
		ri.Run, ri.Phase, ri.Budget = run, run.Phase, run.Budget
	}
	return ri, nil
}

// Pick returns the run named id, or when id is empty the connect file's
// run or else the only run there is.
func (r *Reader) Pick(ctx context.Context, id string) (RunInfo, error) {
	if id == "" {
		id = r.ConnectRun
	}
	if id != "" {
		// One run's entry: all a reader credential may read.
		if ri, err := r.run(ctx, id); err == nil {
			return ri, nil
		}
	}
	runs, err := r.Runs(ctx)
	if err != nil {
		return RunInfo{}, err
	}
	if id == "" {
		switch len(runs) {
		case 0:
			return RunInfo{}, fmt.Errorf("%w: the store holds no runs", ErrNoRun)
		case 1:
			return runs[0], nil
		}
		return RunInfo{}, fmt.Errorf("%w: the store holds %d runs, pick one with --run: %s", ErrNoRun, len(runs), ids(runs))
	}
	for _, ri := range runs {
		if ri.ID == id {
			return ri, nil
		}
	}
	if len(runs) == 0 {
		return RunInfo{}, fmt.Errorf("%w: %q: the store holds no runs", ErrNoRun, id)
	}
	return RunInfo{}, fmt.Errorf("%w: %q; the store holds: %s", ErrNoRun, id, ids(runs))
}

func ids(runs []RunInfo) string {
	s := make([]string, len(runs))
	for i, ri := range runs {
		s[i] = fmt.Sprintf("%s (%s, budget %d)", ri.ID, ri.Phase, ri.Budget)
	}
	return strings.Join(s, ", ")
}

// ResultFunc receives one stored result: its stream sequence and time, and
// the decoded result or why it did not decode. Returning ErrStop ends the
// read; any other error ends it with that error.
type ResultFunc = broker.ResultFunc

// Results streams the results of run in stream order, and returns when it
// has caught up with the results stored when it began (see
// broker.ReadResults).
func (r *Reader) Results(ctx context.Context, run string, fn ResultFunc) error {
	return broker.ReadResults(ctx, r.js, run, fn)
}

// JS is the reader's JetStream client, for the run's other state
// (presence, the work queue).
func (r *Reader) JS() jetstream.JetStream { return r.js }

// FromJS reads through an existing JetStream client, such as a
// controller's own connection. Its Close does nothing.
func FromJS(js jetstream.JetStream) *Reader { return &Reader{js: js} }

// PresenceEntry is a worker's last heartbeat as kept in the presence
// bucket.
type PresenceEntry struct {
	schema.Presence
	// Stored is when the broker stored the heartbeat.
	Stored time.Time
}

// Presence returns the heartbeats of run's workers still kept in the
// presence bucket (they expire after broker.PresenceTTL); entries that do
// not decode are skipped.
func (r *Reader) Presence(ctx context.Context, run string) ([]PresenceEntry, error) {
	entries, err := broker.LastValuesOf(ctx, r.js, schema.PresenceBucket, run+".*")
	if err != nil {
		return nil, err
	}
	var out []PresenceEntry
	for _, e := range entries {
		if p, err := schema.DecodePresence(e.Value()); err == nil {
			out = append(out, PresenceEntry{Presence: *p, Stored: e.Created()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Worker < out[j].Worker })
	return out, nil
}
