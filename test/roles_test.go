package test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/checkpoint"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// roleBundle is a broker holding one run's streams, buckets, consumer and
// checkpoint, an admin connection to it, and the nats CLI arguments that
// connect as each of the run's roles.
type roleBundle struct {
	url   string
	js    jetstream.JetStream
	creds map[broker.Role][]string
}

const roleRun = "r1"

// setupRoles starts an embedded broker with nkey users (operator false)
// or in operator mode, and fills it as a run with checkpoints would: a
// queued design, a result, a report, the run's state, a heartbeat, the
// controller's lease, a stored checkpoint, and a consumer of another
// client on the checkpoint store and on the results.
func setupRoles(t *testing.T, operator bool) *roleBundle {
	t.Helper()
	ctx := testutil.Context(t, time.Minute)
	cfg := broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Auth: !operator, Logger: testutil.Logger(t)}
	var trust *broker.Trust
	if operator {
		var err error
		if trust, _, err = broker.InitTrust(t.TempDir()); err != nil {
			t.Fatal(err)
		}
		cfg.Auth, cfg.Trust = false, trust
	}
	e, err := broker.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	b := &roleBundle{url: e.ClientURL(), creds: map[broker.Role][]string{}}
	dir := t.TempDir()
	var adminOpts []nats.Option
	if operator {
		if err := trust.CreateRun(ctx, []nats.Option{func(o *nats.Options) error { o.Servers = []string{b.url}; return nil }}, roleRun); err != nil {
			t.Fatal(err)
		}
		admin, err := trust.UserJWT(broker.RoleAdmin, roleRun, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		adminOpts = admin.Options()
	}
	for _, role := range []broker.Role{broker.RoleWorker, broker.RoleReader} {
		var c broker.Credential
		if operator {
			c, err = trust.UserJWT(role, roleRun, time.Time{})
		} else {
			c, err = e.Mint(role, roleRun)
		}
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"--inbox-prefix", broker.InboxPrefix(role, roleRun)}
		path := filepath.Join(dir, string(role))
		if operator {
			data, err := jwt.FormatUserConfig(c.JWT, []byte(c.Seed))
			if err != nil {
				t.Fatal(err)
			}
			args = append(args, "--creds", path+".creds")
			writeSecret(t, path+".creds", data)
		} else {
			args = append(args, "--nkey", path+".nk")
			writeSecret(t, path+".nk", []byte(c.Seed))
		}
		b.creds[role] = args
	}
	var nc *nats.Conn
	if operator {
		nc, err = broker.Connect(b.url, t.Name(), nil, testutil.Logger(t), adminOpts...)
	} else {
		nc, err = broker.Connect(b.url, t.Name(), e, testutil.Logger(t))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if b.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	b.fill(t, ctx)
	return b
}

func writeSecret(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// fill stores what a run with checkpoints holds.
func (b *roleBundle) fill(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := broker.Declare(ctx, b.js); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.DeclareConsumer(ctx, b.js, roleRun, broker.ConsumerConfig{Slots: 2}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{schema.DesignSubject(roleRun), schema.ResultSubject(roleRun), schema.ReportSubject(roleRun)} {
		if _, err := b.js.Publish(ctx, subj, []byte("kept")); err != nil {
			t.Fatal(err)
		}
	}
	// The lease bucket is left empty: its keys expire in seconds.
	for bucket, key := range map[string]string{schema.RunBucket: roleRun, schema.PresenceBucket: schema.PresenceKey(roleRun, "w1")} {
		kv, err := b.js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, []byte("kept")); err != nil {
			t.Fatal(err)
		}
	}
	store, err := checkpoint.CreateObject(ctx, b.js, roleRun, 1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// As the run's controller does: it commits what workers upload.
	sub, err := store.Serve(b.js.Conn(), testutil.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	path := store.OutPath(roleRun+"-1", "t")
	if err := os.WriteFile(path, bytes.Repeat([]byte("w"), 300<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, roleRun+"-1", path); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{objStreamOf(roleRun), schema.ResultStream} {
		if _, err := b.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "someone", AckPolicy: jetstream.AckNonePolicy}); err != nil {
			t.Fatal(err)
		}
	}
}

func objStreamOf(run string) string { return "OBJ_" + schema.CheckpointBucket(run) }

// state is what the destructive calls would change: each stream's
// messages, its consumers, and its configured limit on messages. Of the
// checkpoint bucket, the messages are its metadata and the chunks of the
// stored checkpoint: a refused upload may leave chunks of its own, which
// the controller's sweep purges.
func (b *roleBundle) state(t *testing.T) map[string]string {
	t.Helper()
	ctx := testutil.Context(t, 30*time.Second)
	out := map[string]string{}
	for _, name := range []string{schema.DesignStream, schema.ResultStream, schema.ReportStream, "KV_" + schema.RunBucket,
		"KV_" + schema.PresenceBucket, "KV_" + schema.LeaseBucket, objStreamOf(roleRun)} {
		s, err := b.js.Stream(ctx, name)
		if err != nil {
			out[name] = "gone: " + err.Error()
			continue
		}
		var consumers []string
		for c := range s.ConsumerNames(ctx).Name() {
			// Durable ones: an ephemeral one (a listing's) expires.
			if c == "someone" || c == schema.ConsumerName(roleRun) {
				consumers = append(consumers, c)
			}
		}
		info := s.CachedInfo()
		slices.Sort(consumers)
		msgs := fmt.Sprint(info.State.Msgs)
		if name == objStreamOf(roleRun) {
			msgs = b.objectMessages(t, ctx, s)
		}
		out[name] = fmt.Sprintf("%s messages, max %d, rollups %v, consumers %v", msgs, info.Config.MaxMsgs, info.Config.AllowRollup, consumers)
	}
	return out
}

// objectMessages are the bucket's metadata messages and the stored
// checkpoint's chunks.
func (b *roleBundle) objectMessages(t *testing.T, ctx context.Context, s jetstream.Stream) string {
	t.Helper()
	obs, err := b.js.ObjectStore(ctx, schema.CheckpointBucket(roleRun))
	if err != nil {
		return err.Error()
	}
	in, err := obs.GetInfo(ctx, roleRun+"-1")
	if err != nil {
		return err.Error()
	}
	meta, err := s.Info(ctx, jetstream.WithSubjectFilter("$O."+schema.CheckpointBucket(roleRun)+".M.>"))
	if err != nil {
		return err.Error()
	}
	subj := "$O." + schema.CheckpointBucket(roleRun) + ".C." + in.NUID
	chunks, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("metadata %v, chunks of %s %d", meta.State.Subjects, in.Name, chunks.State.Subjects[subj])
}

// destructive are the calls that would destroy or change the run's data,
// as the nats CLI makes them. None may succeed for role.
//
// One is left out for a worker, whose credential serves every worker of
// its run alike: the deletion of a heartbeat of its run (a worker
// deletes its own heartbeat as it leaves, and the broker cannot tell one
// worker's key from another's). Its purge is refused: the presence
// bucket takes no roll-up.
func destructive(role broker.Role) [][]string {
	var calls [][]string
	streams := []string{schema.DesignStream, schema.ResultStream, schema.ReportStream, "KV_" + schema.RunBucket,
		"KV_" + schema.PresenceBucket, "KV_" + schema.LeaseBucket, objStreamOf(roleRun)}
	for _, s := range streams {
		calls = append(calls,
			[]string{"stream", "purge", s, "-f"},
			[]string{"stream", "rm", s, "-f"},
			[]string{"stream", "edit", s, "--max-msgs", "1", "-f"},
			[]string{"stream", "edit", s, "--allow-rollup", "-f"},
			[]string{"stream", "rmm", s, "1", "-f"},
		)
	}
	bucket := schema.CheckpointBucket(roleRun)
	meta := "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(roleRun+"-1"))
	calls = append(calls,
		[]string{"consumer", "rm", schema.DesignStream, schema.ConsumerName(roleRun), "-f"},
		[]string{"consumer", "rm", objStreamOf(roleRun), "someone", "-f"},
		[]string{"consumer", "rm", schema.ResultStream, "someone", "-f"},
		// Another's consumer changed so that the broker removes it.
		[]string{"consumer", "edit", objStreamOf(roleRun), "someone", "--filter", "$O." + schema.CheckpointBucket(roleRun) + ".M.*", "--inactive-threshold", "1s", "-f"},
		[]string{"consumer", "edit", schema.ResultStream, "someone", "--filter", schema.ResultSubject(roleRun), "--inactive-threshold", "1s", "-f"},
		[]string{"kv", "purge", schema.RunBucket, roleRun, "-f"},
		[]string{"kv", "del", schema.RunBucket, roleRun, "-f"},
		[]string{"kv", "del", schema.RunBucket, "-f"},
		[]string{"kv", "del", schema.LeaseBucket, roleRun, "-f"},
		[]string{"kv", "del", schema.PresenceBucket, "-f"},
		[]string{"kv", "purge", schema.PresenceBucket, schema.PresenceKey(roleRun, "w1"), "-f"},
		// A roll-up of every heartbeat of every run, by a put of one.
		[]string{"pub", "--jetstream", "$KV." + schema.PresenceBucket + "." + schema.PresenceKey(roleRun, "w9"), "x", "-H", "Nats-Rollup:all"},
		[]string{"object", "rm", bucket, "-f"},
		[]string{"object", "rm", bucket, roleRun + "-1", "-f"},
		// The object stored again over the checkpoint, its metadata
		// overwritten (marked deleted, or pointed at other chunks), and
		// the bucket rolled up by a chunk.
		[]string{"object", "put", bucket, "--name", roleRun + "-1", "-f", "/etc/hostname"},
		[]string{"pub", "--jetstream", meta, `{"name":"` + roleRun + `-1","bucket":"` + bucket + `","nuid":"x","deleted":true}`},
		[]string{"pub", "--jetstream", "$O." + bucket + ".C.x", "x", "-H", "Nats-Rollup:all"},
	)
	if role != broker.RoleWorker {
		calls = append(calls, []string{"kv", "del", schema.PresenceBucket, schema.PresenceKey(roleRun, "w1"), "-f"})
	}
	return calls
}

// TestRolesRefuseDestruction: with each role's credential, with nkey
// users and in operator mode, the upstream nats CLI tries every call that
// purges, deletes or changes a stream, a bucket, a key, an object or a
// consumer it did not make; each fails, and the broker holds what it held.
// The worker's purge of its run's checkpoint store is the hole this
// closes: it took a store from 8 messages to 0.
func TestRolesRefuseDestruction(t *testing.T) {
	t.Parallel()
	natsCLI := upstreamNATS(t)
	if natsCLI == "" {
		t.Skip("SKIPPED: the role test needs the nats CLI (go install github.com/nats-io/natscli/nats@v0.5.0)")
	}
	for _, mode := range []string{"nkeys", "operator"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := setupRoles(t, mode == "operator")
			before := b.state(t)
			for _, role := range []broker.Role{broker.RoleWorker, broker.RoleReader} {
				var wg sync.WaitGroup
				// Most calls wait out their --timeout, refused: many at
				// once cost little.
				sem := make(chan struct{}, 20)
				for _, call := range destructive(role) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						sem <- struct{}{}
						defer func() { <-sem }()
						args := append(append([]string{"--server", b.url, "--timeout", "3s"}, b.creds[role]...), call...)
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						out, err := exec.CommandContext(ctx, natsCLI, args...).CombinedOutput()
						if err == nil {
							t.Errorf("%s: nats %s succeeded:\n%s", role, strings.Join(call, " "), out)
						}
					}()
				}
				wg.Wait()
			}
			after := b.state(t)
			for name, was := range before {
				if after[name] != was {
					t.Errorf("stream %s: %s before the calls, %s after", name, was, after[name])
				}
			}
			// The keys and the checkpoint are there, whole.
			ctx := testutil.Context(t, 30*time.Second)
			for bucket, key := range map[string]string{schema.RunBucket: roleRun, schema.PresenceBucket: schema.PresenceKey(roleRun, "w1")} {
				if got := kvValue(t, ctx, b.js, bucket, key); got != "kept" {
					t.Errorf("%s %s: %q, want kept", bucket, key, got)
				}
			}
			store, err := checkpoint.OpenObject(ctx, b.js, roleRun, "")
			if err != nil {
				t.Fatal(err)
			}
			if refs, err := store.List(ctx); err != nil || len(refs) != 1 || refs[0].Size != 300<<10 {
				t.Errorf("checkpoints %+v, %v; want the one of 300 KiB", refs, err)
			}
			// And it reads whole with nats.go's object store, which
			// `nats object get` uses.
			obs, err := b.js.ObjectStore(ctx, schema.CheckpointBucket(roleRun))
			if err != nil {
				t.Fatal(err)
			}
			if got, err := obs.GetBytes(ctx, roleRun+"-1"); err != nil || !bytes.Equal(got, bytes.Repeat([]byte("w"), 300<<10)) {
				t.Errorf("the checkpoint reads %d bytes (%v), want its 300 KiB", len(got), err)
			}
		})
	}
}

func kvValue(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket, key string) string {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err.Error()
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return err.Error()
	}
	return string(e.Value())
}
