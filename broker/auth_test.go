package broker_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// client is a connection that collects the permission violations the
// broker reports to it.
type client struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	violations chan error
}

// dial connects to url with opts through broker.Connect and fails the
// test unless it is connected.
func dial(t *testing.T, url string, e *broker.Embedded, opts ...nats.Option) *client {
	t.Helper()
	c := &client{violations: make(chan error, 64)}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case c.violations <- err:
			default:
			}
		}
	}))
	nc, err := broker.Connect(url, t.Name(), e, testutil.Logger(t), opts...)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	if !nc.IsConnected() {
		t.Fatalf("not connected: %s (%v)", nc.Status(), nc.LastError())
	}
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// authBundle is a broker with auth whose streams and buckets are declared,
// with the consumers of runs a and b, a queued design, a result, a run
// state and a heartbeat of each run, and an admin client.
type authBundle struct {
	e     *broker.Embedded
	admin *client
	ctx   context.Context
}

func setupAuth(t *testing.T) *authBundle {
	t.Helper()
	e := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Auth: true})
	b := &authBundle{e: e, ctx: testutil.Context(t, time.Minute)}
	b.admin = dial(t, e.ClientURL(), nil, e.AdminCredential().Options()...)
	js := b.admin.js
	if err := broker.Declare(b.ctx, js); err != nil {
		t.Fatalf("admin declares: %v", err)
	}
	for _, run := range []string{"a", "b"} {
		if _, err := broker.DeclareConsumer(b.ctx, js, run, broker.ConsumerConfig{Slots: 1}); err != nil {
			t.Fatalf("admin declares the consumer: %v", err)
		}
		if _, err := js.Publish(b.ctx, schema.DesignSubject(run), []byte("design "+run), jetstream.WithMsgID(run+"-1")); err != nil {
			t.Fatalf("admin publishes a design: %v", err)
		}
		if _, err := js.Publish(b.ctx, schema.ResultSubject(run), []byte("result "+run)); err != nil {
			t.Fatalf("admin publishes a result: %v", err)
		}
		b.put(t, schema.RunBucket, run, "state "+run)
		b.put(t, schema.PresenceBucket, schema.PresenceKey(run, "w0"), "presence "+run)
	}
	return b
}

func (b *authBundle) put(t *testing.T, bucket, key, value string) {
	t.Helper()
	kv, err := b.admin.js.KeyValue(b.ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(b.ctx, key, []byte(value)); err != nil {
		t.Fatalf("admin puts %s %s: %v", bucket, key, err)
	}
}

// mint mints a credential and connects with it.
func (b *authBundle) mint(t *testing.T, role broker.Role, run string) *client {
	t.Helper()
	cred, err := b.e.Mint(role, run)
	if err != nil {
		t.Fatalf("Mint(%s, %s): %v", role, run, err)
	}
	return dial(t, b.e.ClientURL(), nil, cred.Options()...)
}

// subjects are the messages per subject of stream, as the admin sees them.
func (b *authBundle) subjects(t *testing.T, stream string) map[string]uint64 {
	t.Helper()
	s, err := b.admin.js.Stream(b.ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(b.ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

func (b *authBundle) consumer(t *testing.T, run string) *jetstream.ConsumerInfo {
	t.Helper()
	return consumerInfo(t, b.ctx, b.admin.js, run)
}

func kvGet(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket, key string) string {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bind %s: %v", bucket, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s %s: %v", bucket, key, err)
	}
	return string(e.Value())
}

// listKeys lists bucket's keys that match filter as evoq's tools do,
// with broker.LastValuesOf.
func listKeys(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket, filter string) []string {
	t.Helper()
	entries, err := broker.LastValuesOf(ctx, js, bucket, filter)
	if err != nil {
		t.Fatalf("list %s %s: %v", bucket, filter, err)
	}
	var keys []string
	for _, e := range entries {
		keys = append(keys, e.Key())
	}
	return keys
}

func next(t *testing.T, c jetstream.Consumer) jetstream.Msg {
	t.Helper()
	m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return m
}

func TestAuthWorker(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	ctx := b.ctx
	w := b.mint(t, broker.RoleWorker, "a")

	cons, err := w.js.Consumer(ctx, schema.DesignStream, schema.ConsumerName("a"))
	if err != nil {
		t.Fatalf("bind the run's consumer: %v", err)
	}
	if cons.CachedInfo().Config.MaxWaiting != broker.WaitingFor(1) {
		t.Errorf("consumer info MaxWaiting %d", cons.CachedInfo().Config.MaxWaiting)
	}
	m := next(t, cons)
	if string(m.Data()) != "design a" {
		t.Fatalf("pulled %q, want design a", m.Data())
	}
	if err := m.InProgress(); err != nil {
		t.Fatal(err)
	}
	if err := m.Nak(); err != nil {
		t.Fatal(err)
	}
	m = next(t, cons)
	if meta, err := m.Metadata(); err != nil || meta.NumDelivered != 2 {
		t.Fatalf("after Nak: delivery %+v %v, want the design again", meta, err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if _, err := b.admin.js.Publish(ctx, schema.DesignSubject("a"), []byte("design a2")); err != nil {
		t.Fatal(err)
	}
	if err := next(t, cons).Term(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the acked and terminated designs to leave the work queue", func() bool {
		return b.subjects(t, schema.DesignStream)[schema.DesignSubject("a")] == 0 && b.consumer(t, "a").NumAckPending == 0
	})

	ack, err := w.js.Publish(ctx, schema.ResultSubject("a"), []byte("result a2"), jetstream.WithMsgID("a-1/1"))
	if err != nil || ack.Stream != schema.ResultStream {
		t.Fatalf("store a result: %+v %v", ack, err)
	}
	if n := b.subjects(t, schema.ResultStream)[schema.ResultSubject("a")]; n != 2 {
		t.Errorf("%d results of run a stored, want 2", n)
	}

	if ack, err := w.js.Publish(ctx, schema.ReportSubject("a"), []byte("report a"), jetstream.WithMsgID("a-1/1/s1")); err != nil || ack.Stream != schema.ReportStream {
		t.Fatalf("store a report: %+v %v", ack, err)
	}
	// The stop question is a request: the worker's inbox hears the answer.
	asks, err := b.admin.nc.Subscribe(schema.AskSubject("a"), func(m *nats.Msg) { _ = m.Respond([]byte("go on")) })
	if err != nil {
		t.Fatal(err)
	}
	if err := b.admin.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := w.nc.Request(schema.AskSubject("a"), []byte("ask"), 5*time.Second); err != nil || string(m.Data) != "go on" {
		t.Errorf("ask the controller: %v", err)
	}
	_ = asks.Unsubscribe()

	alerts, err := b.admin.nc.SubscribeSync(schema.AlertSubject("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.admin.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.nc.Publish(schema.AlertSubject("a"), []byte(schema.AlertStoreFull)); err != nil {
		t.Fatal(err)
	}
	if m, err := alerts.NextMsg(5 * time.Second); err != nil || string(m.Data) != schema.AlertStoreFull {
		t.Errorf("alert: %v", err)
	}

	orders, err := w.nc.SubscribeSync(schema.ControlSubject("a", "w1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.admin.nc.Publish(schema.ControlSubject("a", "w1"), []byte("quarantine")); err != nil {
		t.Fatal(err)
	}
	if m, err := orders.NextMsg(5 * time.Second); err != nil || string(m.Data) != "quarantine" {
		t.Errorf("the controller's order: %v", err)
	}

	presence, err := w.js.KeyValue(ctx, schema.PresenceBucket)
	if err != nil {
		t.Fatalf("bind the presence bucket: %v", err)
	}
	key := schema.PresenceKey("a", "w1")
	if _, err := presence.Put(ctx, key, []byte("beat")); err != nil {
		t.Fatalf("put presence: %v", err)
	}
	if got := kvGet(t, ctx, w.js, schema.PresenceBucket, key); got != "beat" {
		t.Errorf("presence %q", got)
	}
	if err := presence.Delete(ctx, key); err != nil {
		t.Fatalf("remove presence: %v", err)
	}

	if got := kvGet(t, ctx, w.js, schema.RunBucket, "a"); got != "state a" {
		t.Errorf("run state %q", got)
	}
	watch, err := w.nc.SubscribeSync(kvKeySubject(schema.RunBucket, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	b.put(t, schema.RunBucket, "a", "done")
	if m, err := watch.NextMsg(5 * time.Second); err != nil || string(m.Data) != "done" {
		t.Errorf("watching the run's state: %v", err)
	}
	noViolation(t, w)
}

func kvKeySubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// noViolation fails the test if c was refused anything.
func noViolation(t *testing.T, c *client) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.violations:
		t.Errorf("refused: %v", err)
	default:
	}
}

// subjectRE matches a quoted subject in a violation; * in pattern is one
// token.
func subjectRE(pattern string) *regexp.Regexp {
	q := strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, `[^".]+`)
	return regexp.MustCompile(`"` + q + `"`)
}

// refused runs op and checks that the broker refused it as a permissions
// violation on a subject matching pattern. A refused request is never
// answered, so op's ctx is cancelled as soon as the violation arrives.
func refused(t *testing.T, c *client, pattern string, op func(ctx context.Context) error) {
	t.Helper()
	re := subjectRE(pattern)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := make(chan string, 1)
	go func() {
		for {
			select {
			case err := <-c.violations:
				if re.MatchString(err.Error()) {
					seen <- err.Error()
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	err := op(ctx)
	select {
	case <-seen:
	case <-ctx.Done():
		select {
		case <-seen:
		default:
			t.Errorf("no permissions violation on %s; the operation returned %v", pattern, err)
		}
	}
}

// request is a raw API request.
func request(c *client, subject, body string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.nc.RequestWithContext(ctx, subject, []byte(body))
		return err
	}
}

func subscribe(c *client, subject string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.nc.Subscribe(subject, func(*nats.Msg) {})
		return err
	}
}

func kvPut(c *client, bucket, key string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		kv, err := c.js.KeyValue(ctx, bucket)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, key, []byte("forged"))
		return err
	}
}

func kvRead(c *client, bucket, key string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		kv, err := c.js.KeyValue(ctx, bucket)
		if err != nil {
			return err
		}
		_, err = kv.Get(ctx, key)
		return err
	}
}

func publish(c *client, subject string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.js.Publish(ctx, subject, []byte("forged"))
		return err
	}
}

type refusal struct {
	name    string
	subject string // the refused subject; * is any one token
	op      func(ctx context.Context) error
}

func TestAuthWorkerRefused(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	w := b.mint(t, broker.RoleWorker, "a")
	consA, consB := schema.ConsumerName("a"), schema.ConsumerName("b")
	for _, tc := range []refusal{
		{"purge the results", "$JS.API.STREAM.PURGE.EVOQ_RESULTS", request(w, "$JS.API.STREAM.PURGE.EVOQ_RESULTS", "")},
		{"delete the design stream", "$JS.API.STREAM.DELETE.EVOQ_DESIGNS", func(ctx context.Context) error {
			return w.js.DeleteStream(ctx, schema.DesignStream)
		}},
		{"delete the run's consumer", "$JS.API.CONSUMER.DELETE.EVOQ_DESIGNS." + consA, func(ctx context.Context) error {
			return w.js.DeleteConsumer(ctx, schema.DesignStream, consA)
		}},
		{"create a consumer on the run's designs", "$JS.API.CONSUMER.CREATE.EVOQ_DESIGNS.thief.evoq.design.a", func(ctx context.Context) error {
			_, err := w.js.CreateConsumer(ctx, schema.DesignStream, jetstream.ConsumerConfig{
				Durable: "thief", FilterSubject: schema.DesignSubject("a"), AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{"change the run's consumer", "$JS.API.CONSUMER.CREATE.EVOQ_DESIGNS." + consA + ".evoq.design.a", func(ctx context.Context) error {
			_, err := w.js.UpdateConsumer(ctx, schema.DesignStream, jetstream.ConsumerConfig{
				Durable: consA, FilterSubject: schema.DesignSubject("a"), AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1})
			return err
		}},
		{"publish a design", "evoq.design.a", publish(w, schema.DesignSubject("a"))},
		{"bind run b's consumer", "$JS.API.CONSUMER.INFO.EVOQ_DESIGNS." + consB, func(ctx context.Context) error {
			_, err := w.js.Consumer(ctx, schema.DesignStream, consB)
			return err
		}},
		{"pull from run b's consumer", "$JS.API.CONSUMER.MSG.NEXT.EVOQ_DESIGNS." + consB,
			request(w, "$JS.API.CONSUMER.MSG.NEXT.EVOQ_DESIGNS."+consB, `{"batch":1}`)},
		{"ack run b's designs", "$JS.ACK.EVOQ_DESIGNS." + consB + ".1.1.1.0.0", func(ctx context.Context) error {
			return w.nc.Publish("$JS.ACK.EVOQ_DESIGNS."+consB+".1.1.1.0.0", []byte("+ACK"))
		}},
		{"publish a result of run b", "evoq.result.b", publish(w, schema.ResultSubject("b"))},
		{"publish a report of run b", "evoq.report.b", publish(w, schema.ReportSubject("b"))},
		{"ask run b's controller", "evoq.ask.b", func(ctx context.Context) error {
			return w.nc.Publish(schema.AskSubject("b"), []byte("ask"))
		}},
		{"hear run a's questions", "evoq.ask.a", subscribe(w, schema.AskSubject("a"))},
		{"alert run b", "evoq.alert.b", func(ctx context.Context) error {
			return w.nc.Publish(schema.AlertSubject("b"), []byte(schema.AlertStoreFull))
		}},
		{"put presence of run b", "$KV.evoq_presence.b.w1", kvPut(w, schema.PresenceBucket, schema.PresenceKey("b", "w1"))},
		{"write the run's state", "$KV.evoq_runs.a", kvPut(w, schema.RunBucket, "a")},
		{"read run b's state", "$JS.API.DIRECT.GET.KV_evoq_runs.$KV.evoq_runs.b", kvRead(w, schema.RunBucket, "b")},
		{"read any key by request body", "$JS.API.DIRECT.GET.KV_evoq_runs", request(w, "$JS.API.DIRECT.GET.KV_evoq_runs", `{"last_by_subj":"$KV.evoq_runs.b"}`)},
		{"purge the presence bucket", "$JS.API.STREAM.PURGE.KV_evoq_presence", request(w, "$JS.API.STREAM.PURGE.KV_evoq_presence", "")},
		{"watch run b's state", "$KV.evoq_runs.b", subscribe(w, "$KV.evoq_runs.b")},
		{"hear run b's orders", "evoq.control.b.w1", subscribe(w, schema.ControlSubject("b", "w1"))},
		{"give an order", "evoq.control.a.w1", func(ctx context.Context) error {
			return w.nc.Publish(schema.ControlSubject("a", "w1"), []byte("quarantine"))
		}},
		{"read every result", "evoq.result.>", subscribe(w, "evoq.result.>")},
		{"read other clients' replies", "_INBOX.>", subscribe(w, "_INBOX.>")},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, w, tc.subject, tc.op) })
	}
	// Nothing changed.
	designs := b.subjects(t, schema.DesignStream)
	results := b.subjects(t, schema.ResultStream)
	if designs[schema.DesignSubject("a")] != 1 || designs[schema.DesignSubject("b")] != 1 ||
		results[schema.ResultSubject("a")] != 1 || results[schema.ResultSubject("b")] != 1 {
		t.Errorf("designs %v results %v, want one of each run", designs, results)
	}
	if info := b.consumer(t, "a"); info.Config.MaxDeliver != broker.MaxDeliverDefault || info.NumPending != 1 {
		t.Errorf("run a's consumer changed: %+v", info)
	}
	if got := kvGet(t, b.ctx, b.admin.js, schema.PresenceBucket, schema.PresenceKey("b", "w0")); got != "presence b" {
		t.Errorf("run b's presence %q", got)
	}
	if got := kvGet(t, b.ctx, b.admin.js, schema.RunBucket, "a"); got != "state a" {
		t.Errorf("run a's state %q", got)
	}
}

func TestAuthReader(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	ctx := b.ctx
	r := b.mint(t, broker.RoleReader, "a")

	if _, err := r.js.AccountInfo(ctx); err != nil {
		t.Fatalf("account info: %v", err)
	}
	s, err := r.js.Stream(ctx, schema.ResultStream)
	if err != nil {
		t.Fatalf("results stream: %v", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(schema.ResultSubject("a")))
	if err != nil || info.State.Subjects[schema.ResultSubject("a")] != 1 {
		t.Fatalf("results stream info: %v %v", info, err)
	}
	var got []string
	err = broker.ReadStored(ctx, r.js, schema.ResultStream, schema.ResultSubject("a"), false, func(m jetstream.Msg) error {
		got = append(got, string(m.Data()))
		return nil
	})
	if len(got) != 1 || got[0] != "result a" || err != nil {
		t.Fatalf("read %q, %v; want [result a]", got, err)
	}

	if got := kvGet(t, ctx, r.js, schema.RunBucket, "a"); got != "state a" {
		t.Errorf("run state %q", got)
	}
	if keys := listKeys(t, ctx, r.js, schema.RunBucket, "a"); len(keys) != 1 || keys[0] != "a" {
		t.Errorf("run keys %q", keys)
	}
	if keys := listKeys(t, ctx, r.js, schema.PresenceBucket, "a.*"); len(keys) != 1 || keys[0] != "a.w0" {
		t.Errorf("presence keys %q", keys)
	}
	if got := kvGet(t, ctx, r.js, schema.PresenceBucket, "a.w0"); got != "presence a" {
		t.Errorf("presence %q", got)
	}
	cons, err := r.js.Consumer(ctx, schema.DesignStream, schema.ConsumerName("a"))
	if err != nil {
		t.Fatalf("work queue consumer: %v", err)
	}
	if ci, err := cons.Info(ctx); err != nil || ci.NumPending != 1 {
		t.Errorf("work queue: %+v %v, want 1 queued", ci, err)
	}
	watch, err := r.nc.SubscribeSync("$KV.evoq_presence.a.*")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	b.put(t, schema.PresenceBucket, "a.w2", "beat")
	if m, err := watch.NextMsg(5 * time.Second); err != nil || string(m.Data) != "beat" {
		t.Errorf("watching presence: %v", err)
	}
	noViolation(t, r)
}

func TestAuthReaderRefused(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	r := b.mint(t, broker.RoleReader, "a")
	consA := schema.ConsumerName("a")
	for _, tc := range []refusal{
		{"publish a result", "evoq.result.a", publish(r, schema.ResultSubject("a"))},
		{"publish a design", "evoq.design.a", publish(r, schema.DesignSubject("a"))},
		{"purge the results", "$JS.API.STREAM.PURGE.EVOQ_RESULTS", request(r, "$JS.API.STREAM.PURGE.EVOQ_RESULTS", "")},
		{"delete a result", "$JS.API.STREAM.MSG.DELETE.EVOQ_RESULTS", request(r, "$JS.API.STREAM.MSG.DELETE.EVOQ_RESULTS", `{"seq":1}`)},
		{"pull a design", "$JS.API.CONSUMER.MSG.NEXT.EVOQ_DESIGNS." + consA,
			request(r, "$JS.API.CONSUMER.MSG.NEXT.EVOQ_DESIGNS."+consA, `{"batch":1}`)},
		{"delete the run's consumer", "$JS.API.CONSUMER.DELETE.EVOQ_DESIGNS." + consA, func(ctx context.Context) error {
			return r.js.DeleteConsumer(ctx, schema.DesignStream, consA)
		}},
		{"put presence", "$KV.evoq_presence.a.w1", kvPut(r, schema.PresenceBucket, "a.w1")},
		{"write the run's state", "$KV.evoq_runs.a", kvPut(r, schema.RunBucket, "a")},
		{"read run b's results", "$JS.API.CONSUMER.CREATE.EVOQ_RESULTS.peek.evoq.result.b", func(ctx context.Context) error {
			_, err := r.js.CreateConsumer(ctx, schema.ResultStream, jetstream.ConsumerConfig{
				Name: "peek", FilterSubject: schema.ResultSubject("b"), AckPolicy: jetstream.AckNonePolicy})
			return err
		}},
		{"read every result", "$JS.API.CONSUMER.CREATE.EVOQ_RESULTS.peek", func(ctx context.Context) error {
			_, err := r.js.CreateConsumer(ctx, schema.ResultStream, jetstream.ConsumerConfig{Name: "peek", AckPolicy: jetstream.AckNonePolicy})
			return err
		}},
		{"list every run", "$JS.API.CONSUMER.CREATE.KV_evoq_runs.*.$KV.evoq_runs.>", func(ctx context.Context) error {
			kv, err := r.js.KeyValue(ctx, schema.RunBucket)
			if err != nil {
				return err
			}
			_, err = kv.ListKeys(ctx)
			return err
		}},
		{"read run b's state", "$JS.API.DIRECT.GET.KV_evoq_runs.$KV.evoq_runs.b", kvRead(r, schema.RunBucket, "b")},
		{"read run b's presence", "$JS.API.DIRECT.GET.KV_evoq_presence.$KV.evoq_presence.b.w0", kvRead(r, schema.PresenceBucket, "b.w0")},
		{"read run b's work queue", "$JS.API.CONSUMER.INFO.EVOQ_DESIGNS." + schema.ConsumerName("b"), func(ctx context.Context) error {
			_, err := r.js.Consumer(ctx, schema.DesignStream, schema.ConsumerName("b"))
			return err
		}},
		{"watch run b's presence", "$KV.evoq_presence.b.>", subscribe(r, "$KV.evoq_presence.b.>")},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, r, tc.subject, tc.op) })
	}
	if results := b.subjects(t, schema.ResultStream); results[schema.ResultSubject("a")] != 1 {
		t.Errorf("results %v, want run a's one", results)
	}
	if info := b.consumer(t, "a"); info.NumPending != 1 {
		t.Errorf("run a's work queue %+v, want its design queued", info)
	}
}

func TestAuthRefusesConnections(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	url := b.e.ClientURL()
	stranger, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := stranger.Seed()
	adminPub, err := b.e.AdminCredential().PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []nats.Option
		is   error
	}{
		{"no credential", nil, nats.ErrAuthorization},
		{"a key the broker never minted", broker.Credential{Role: broker.RoleAdmin, Seed: string(seed)}.Options(), nats.ErrAuthorization},
		{"the admin's key signed by another", []nats.Option{nats.Nkey(adminPub, stranger.Sign)}, nats.ErrAuthorization},
		{"a malformed seed", broker.Credential{Role: broker.RoleAdmin, Seed: "SUAnotaseed"}.Options(), broker.ErrCredential},
		{"a run credential without a run", broker.Credential{Role: broker.RoleWorker, Seed: string(seed)}.Options(), broker.ErrCredential},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, err := nats.Connect(url, append(tc.opts, nats.Timeout(5*time.Second))...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("Connect = %v, want %v", err, tc.is)
			}
		})
	}

	// In-process connections authenticate too. The protocol is spoken by
	// hand: refused through nats.go, an in-process connect returns only
	// after 10 s (the server's write deadline) with a closed pipe.
	conn, err := b.e.Server().InProcessConn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	if info, err := rd.ReadString('\n'); err != nil || !strings.Contains(info, `"auth_required":true`) {
		t.Fatalf("in-process INFO %q, %v; want auth required", info, err)
	}
	if _, err := conn.Write([]byte("CONNECT {\"verbose\":false}\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := rd.ReadString('\n'); !strings.Contains(line, "Authorization Violation") {
		t.Errorf("in-process CONNECT without a credential: %q, %v; want an authorization violation", line, err)
	}
	// broker.Connect in-process presents the admin credential.
	c := dial(t, url, b.e)
	if err := broker.Declare(b.ctx, c.js); err != nil {
		t.Errorf("in-process admin: %v", err)
	}
}

func TestMint(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	for _, tc := range []struct {
		name string
		role broker.Role
		run  string
	}{
		{"admin with a run", broker.RoleAdmin, "a"},
		{"worker without a run", broker.RoleWorker, ""},
		{"reader of a run with a dot", broker.RoleReader, "a.b"},
		{"reader of a wildcard run", broker.RoleReader, "*"},
		{"unknown role", "root", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.e.Mint(tc.role, tc.run); !errors.Is(err, broker.ErrCredential) {
				t.Errorf("Mint = %v, want ErrCredential", err)
			}
		})
	}
	admin, err := b.e.Mint(broker.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.Declare(b.ctx, dial(t, b.e.ClientURL(), nil, admin.Options()...).js); err != nil {
		t.Errorf("a minted admin: %v", err)
	}

	open := start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	if _, err := open.Mint(broker.RoleWorker, "a"); !errors.Is(err, broker.ErrNoAuth) {
		t.Errorf("Mint without auth = %v, want ErrNoAuth", err)
	}
	if c := open.AdminCredential(); c != (broker.Credential{}) {
		t.Errorf("AdminCredential without auth = %+v", c)
	}
}

func TestPermissions(t *testing.T) {
	t.Parallel()
	if p := broker.Permissions(broker.RoleAdmin, ""); p != nil {
		t.Errorf("admin permissions %+v, want none (everything)", p)
	}
	for _, tc := range []struct {
		role broker.Role
		run  string
	}{{"root", "a"}, {broker.RoleWorker, ""}, {broker.RoleAdmin, "a"}} {
		p := broker.Permissions(tc.role, tc.run)
		if p == nil || p.Publish == nil || len(p.Publish.Allow) != 0 || len(p.Publish.Deny) != 1 || p.Publish.Deny[0] != ">" ||
			p.Subscribe == nil || len(p.Subscribe.Deny) != 1 || p.Subscribe.Deny[0] != ">" {
			t.Errorf("Permissions(%q, %q) = %+v, want everything denied", tc.role, tc.run, p)
		}
	}
	for _, role := range []broker.Role{broker.RoleWorker, broker.RoleReader} {
		p := broker.Permissions(role, "r1")
		for _, s := range append(append([]string{}, p.Publish.Allow...), p.Subscribe.Allow...) {
			// No purge, not even of the run's own checkpoints (the
			// purge's subject is in its body: it could empty the
			// bucket), no consumer deleted, not even one's own, and
			// no object's metadata published (an object's deletion is
			// one): the controller commits a worker's checkpoints.
			for _, no := range []string{"evoq.design.", "PURGE", "STREAM.DELETE", "MSG.DELETE", "STREAM.CREATE", "STREAM.UPDATE",
				"CONSUMER.CREATE.EVOQ_DESIGNS", "CONSUMER.DELETE", "$O.>", "$KV.>"} {
				if strings.Contains(s, no) {
					t.Errorf("%s may use %s", role, s)
				}
			}
			if slices.Contains(p.Publish.Allow, s) && strings.HasPrefix(s, "$O.") && !strings.HasPrefix(s, "$O."+schema.CheckpointBucket("r1")+".C.") {
				t.Errorf("%s may publish to %s: only chunks of its run's checkpoints are a worker's", role, s)
			}
			if s == ">" || strings.HasPrefix(s, "$JS.API.>") || strings.HasPrefix(s, "_INBOX.>") || strings.HasPrefix(s, "evoq.") && strings.Split(s, ".")[2] != "r1" {
				t.Errorf("%s may use %s, beyond its run", role, s)
			}
		}
		if got, want := p.Subscribe.Allow[0], broker.InboxPrefix(role, "r1")+".>"; got != want {
			t.Errorf("%s subscribes to %s first, want its inbox %s", role, got, want)
		}
	}
	if p := broker.InboxPrefix(broker.RoleWorker, "r1"); p != "_INBOX.evoq-worker-r1" {
		t.Errorf("InboxPrefix = %q", p)
	}
}

func TestMintWhileConnected(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	ctx := b.ctx
	var disconnects sync.Map
	count := func(name string) nats.Option {
		return nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnects.Store(name, true) })
	}
	cred, err := b.e.Mint(broker.RoleWorker, "a")
	if err != nil {
		t.Fatal(err)
	}
	w := dial(t, b.e.ClientURL(), nil, append(cred.Options(), count("worker"))...)
	inproc := dial(t, b.e.ClientURL(), b.e, count("in-process admin"))
	watch, err := w.nc.SubscribeSync(kvKeySubject(schema.RunBucket, "a"))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := w.js.Consumer(ctx, schema.DesignStream, schema.ConsumerName("a"))
	if err != nil {
		t.Fatal(err)
	}
	if string(next(t, cons).Data()) != "design a" { // left unacked
		t.Fatal("wrong design")
	}
	pulled := make(chan jetstream.Msg, 1)
	go func() { // a pull request waiting through the reloads
		m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			t.Errorf("pull across the reloads: %v", err)
		}
		pulled <- m
	}()
	testutil.WaitFor(t, 10*time.Second, "the pull request", func() bool { return b.consumer(t, "a").NumWaiting == 1 })

	var wg sync.WaitGroup
	seeds := make(chan string, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			role := []broker.Role{broker.RoleWorker, broker.RoleReader}[i%2]
			c, err := b.e.Mint(role, "run"+string(rune('a'+i)))
			if err != nil {
				t.Errorf("Mint: %v", err)
				return
			}
			seeds <- c.Seed
		}()
	}
	wg.Wait()
	close(seeds)
	distinct := map[string]bool{}
	for s := range seeds {
		distinct[s] = true
	}
	if len(distinct) != 16 {
		t.Errorf("%d distinct credentials of 16", len(distinct))
	}

	if _, err := b.admin.js.Publish(ctx, schema.DesignSubject("a"), []byte("design a2")); err != nil {
		t.Fatal(err)
	}
	if m := <-pulled; m == nil || string(m.Data()) != "design a2" {
		t.Errorf("the waiting pull got %v", m)
	}
	b.put(t, schema.RunBucket, "a", "done")
	if m, err := watch.NextMsg(5 * time.Second); err != nil || string(m.Data) != "done" {
		t.Errorf("the subscription made before the reloads: %v", err)
	}
	if _, err := w.js.Publish(ctx, schema.ResultSubject("a"), []byte("result")); err != nil {
		t.Errorf("store a result after the reloads: %v", err)
	}
	if err := broker.Declare(ctx, inproc.js); err != nil {
		t.Errorf("in-process admin after the reloads: %v", err)
	}
	disconnects.Range(func(k, _ any) bool {
		t.Errorf("%s was disconnected by a reload", k)
		return true
	})
	for _, c := range []*client{w, inproc, b.admin} {
		if s := c.nc.Stats(); s.Reconnects != 0 {
			t.Errorf("%d reconnects", s.Reconnects)
		}
	}
	noViolation(t, w)
}

func TestConnectFileCredential(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	cred, err := b.e.Mint(broker.RoleWorker, "a")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "connect.json")
	cf := broker.ConnectFile{URLs: []string{b.e.ClientURL()}}
	cf.SetCredential(cred)
	if err := broker.WriteConnectFile(path, cf); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("connect file mode %v, %v; want 0600", fi.Mode(), err)
	}
	got, err := broker.ReadConnectFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := got.Credential(); !ok || c != cred || got.Run != "a" || got.InboxPrefix != broker.InboxPrefix(broker.RoleWorker, "a") {
		t.Fatalf("read back %+v", got)
	}
	opts, err := got.Options()
	if err != nil {
		t.Fatal(err)
	}
	w := dial(t, strings.Join(got.URLs, ","), nil, opts...)
	cons, err := w.js.Consumer(b.ctx, schema.DesignStream, schema.ConsumerName(got.Run))
	if err != nil {
		t.Fatalf("a worker of the connect file binds its consumer: %v", err)
	}
	if string(next(t, cons).Data()) != "design a" {
		t.Error("wrong design")
	}

	for _, tc := range []struct {
		name string
		cf   broker.ConnectFile
	}{
		{"malformed seed", broker.ConnectFile{Run: "a", Role: broker.RoleWorker, NkeySeed: "SUAnotaseed"}},
		{"role without a seed", broker.ConnectFile{Run: "a", Role: broker.RoleWorker}},
		{"worker without a run", broker.ConnectFile{Role: broker.RoleWorker, NkeySeed: cred.Seed}},
		{"unknown role", broker.ConnectFile{Run: "a", Role: "root", NkeySeed: cred.Seed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "connect.json")
			cf := tc.cf
			cf.URLs = []string{"nats://127.0.0.1:4222"}
			if err := broker.WriteConnectFile(bad, cf); !errors.Is(err, broker.ErrCredential) {
				t.Errorf("WriteConnectFile = %v, want ErrCredential", err)
			}
			data := `{"version":1,"urls":["nats://127.0.0.1:4222"],"run":"` + cf.Run + `","role":"` + string(cf.Role) + `","nkey_seed":"` + cf.NkeySeed + `"}`
			if err := os.WriteFile(bad, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := broker.ReadConnectFile(bad); !errors.Is(err, broker.ErrConnectFile) || !errors.Is(err, broker.ErrCredential) {
				t.Errorf("ReadConnectFile = %v, want ErrConnectFile and ErrCredential", err)
			}
		})
	}
}
