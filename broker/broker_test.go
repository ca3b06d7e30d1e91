package broker_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
	"github.com/evoq/evoq/internal/testutil"
	"github.com/evoq/evoq/schema"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// start starts an embedded broker that is shut down when the test ends.
func start(t *testing.T, cfg broker.Config) *broker.Embedded {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testutil.Logger(t)
	}
	e, err := broker.Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// connect connects to e (in-process when inProcess) and returns JetStream.
func connect(t *testing.T, url string, e *broker.Embedded) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := broker.Connect(url, t.Name(), e, testutil.Logger(t))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// freePort is a port that nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		listen     string
		inProcess  bool
		syncAlways bool
	}{
		{"port 0", "127.0.0.1:0", false, false},
		{"port -1", "127.0.0.1:-1", false, false},
		{"in-process client, sync always", "127.0.0.1:0", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "store", "nested")
			e := start(t, broker.Config{Dir: dir, Listen: tc.listen, SyncAlways: tc.syncAlways})
			if !e.Server().JetStreamEnabled() {
				t.Fatal("JetStream is not enabled")
			}
			if e.Dir() != dir {
				t.Errorf("Dir() = %q, want %q", e.Dir(), dir)
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				t.Errorf("store directory not created: %v", err)
			}
			u := e.ClientURL()
			if _, port, err := broker.SplitListen(strings.TrimPrefix(u, "nats://")); err != nil || port <= 0 {
				t.Errorf("ClientURL %q: port %d, %v; want a real port", u, port, err)
			}
			var emb *broker.Embedded
			if tc.inProcess {
				emb = e
			}
			nc, js := connect(t, u, emb)
			if !nc.IsConnected() {
				t.Fatalf("not connected: %s", nc.Status())
			}
			ctx := testutil.Context(t, 10*time.Second)
			if err := broker.Declare(ctx, js); err != nil {
				t.Fatalf("Declare: %v", err)
			}
			if _, err := js.Publish(ctx, schema.ResultSubject("r"), []byte("x")); err != nil {
				t.Fatalf("publish to a stream: %v", err)
			}
		})
	}
}

func TestStartFails(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	for _, tc := range []struct {
		name   string
		cfg    broker.Config
		is     error
		errHas []string
	}{
		{"store under a file", broker.Config{Dir: filepath.Join(file, "sub"), Listen: "127.0.0.1:0"},
			nil, []string{`--dir "` + filepath.Join(file, "sub") + `"`, "cannot create"}},
		{"store is a file", broker.Config{Dir: file, Listen: "127.0.0.1:0"},
			nil, []string{`--dir "` + file + `"`}},
		{"listen without a port", broker.Config{Dir: filepath.Join(tmp, "a"), Listen: "127.0.0.1"},
			nil, []string{`--listen "127.0.0.1"`}},
		{"port in use", broker.Config{Dir: filepath.Join(tmp, "b"), Listen: busy.Addr().String(), StartTimeout: 2 * time.Second},
			broker.ErrStart, []string{busy.Addr().String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Logger = testutil.Logger(t)
			e, err := broker.Start(cfg)
			if err == nil {
				e.Shutdown()
				t.Fatal("Start succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Start = %v, want %v", err, tc.is)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func TestSplitListen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		listen string
		host   string
		port   int
		errHas string
	}{
		{"127.0.0.1:4222", "127.0.0.1", 4222, ""},
		{"0.0.0.0:0", "0.0.0.0", server.RANDOM_PORT, ""},
		{"localhost:-1", "localhost", server.RANDOM_PORT, ""},
		{":4222", "", 4222, ""},
		{"[::1]:65535", "::1", 65535, ""},
		{"host:65536", "", 0, `port "65536"`},
		{"host:-2", "", 0, `port "-2"`},
		{"host:http", "", 0, `port "http"`},
		{"host:", "", 0, `port ""`},
		{"host", "", 0, "want host:port"},
		{"", "", 0, "want host:port"},
		// A name DNS does not know (.invalid never resolves), an address
		// that is not this machine's (TEST-NET-1): named as such.
		{"notahost.invalid:4222", "", 0, "host notahost.invalid: "},
		{"192.0.2.1:4222", "", 0, "host 192.0.2.1 is not an address of this machine"},
	} {
		t.Run(tc.listen, func(t *testing.T) {
			t.Parallel()
			if strings.HasPrefix(tc.listen, "[::1]") && !canListen("[::1]:0") {
				t.Skip("no IPv6 loopback here")
			}
			host, port, err := broker.SplitListen(tc.listen)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "--listen") {
					t.Errorf("SplitListen = %q, %d, %v; want an error naming --listen and %q", host, port, err, tc.errHas)
				}
				return
			}
			if err != nil || host != tc.host || port != tc.port {
				t.Errorf("SplitListen = %q, %d, %v; want %q, %d", host, port, err, tc.host, tc.port)
			}
		})
	}
}

func canListen(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		l.Close()
	}
	return err == nil
}

// Only a port in use blames another server; a listen host that is not this
// machine's, or a name DNS does not know, is named, not taken for one.
func TestListenErrorsNameTheCause(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() }) // after the parallel subtests
	for _, tc := range []struct {
		name, listen string
		errHas       []string
		errLacks     string
	}{
		{"port in use", busy.Addr().String(), []string{"--listen", "address already in use", "another evoq or NATS server"}, ""},
		{"unknown host", "notahost.invalid:4222", []string{`--listen "notahost.invalid:4222": host notahost.invalid: `}, "another evoq"},
		{"not this machine", "192.0.2.1:4222", []string{"host 192.0.2.1 is not an address of this machine"}, "another evoq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "store")
			e, err := broker.Start(broker.Config{Dir: dir, Listen: tc.listen})
			if err == nil {
				e.Shutdown()
				t.Fatal("the broker started")
			}
			for _, want := range tc.errHas {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			if tc.errLacks != "" && strings.Contains(err.Error(), tc.errLacks) {
				t.Errorf("error %q says %q", err, tc.errLacks)
			}
			if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
				t.Errorf("store %s made before the listen address was checked", dir)
			}
		})
	}
}

func TestDeclareIdempotent(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t) // declared once already
	ctx := testutil.Context(t, 30*time.Second)
	if _, err := b.JS.Publish(ctx, schema.DesignSubject("r1"), []byte("design")); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := broker.Declare(ctx, b.JS); err != nil {
			t.Fatalf("Declare #%d: %v", i+2, err)
		}
	}
	for _, tc := range []struct {
		stream    string
		subject   string
		retention jetstream.RetentionPolicy
		msgs      uint64
	}{
		{schema.DesignStream, schema.DesignPrefix + "*", jetstream.WorkQueuePolicy, 1},
		{schema.ResultStream, schema.ResultPrefix + "*", jetstream.LimitsPolicy, 0},
	} {
		s, err := b.JS.Stream(ctx, tc.stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := info.Config
		if len(c.Subjects) != 1 || c.Subjects[0] != tc.subject || c.Retention != tc.retention ||
			c.Storage != jetstream.FileStorage || c.Duplicates != broker.DuplicatesDefault || c.MaxMsgSize != schema.MaxMessageSize {
			t.Errorf("stream %s config %+v", tc.stream, c)
		}
		if info.State.Msgs != tc.msgs {
			t.Errorf("stream %s holds %d messages after redeclaring, want %d", tc.stream, info.State.Msgs, tc.msgs)
		}
	}
	if got := b.NC.MaxPayload(); got != schema.MaxMessageSize {
		t.Errorf("broker max payload %d, want the message limit %d", got, schema.MaxMessageSize)
	}
	for _, tc := range []struct {
		bucket  string
		ttl     time.Duration
		history int64
	}{{schema.PresenceBucket, broker.PresenceTTL, 1}, {schema.RunBucket, 0, 4}} {
		kv, err := b.JS.KeyValue(ctx, tc.bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", tc.bucket, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.TTL() != tc.ttl || st.History() != tc.history {
			t.Errorf("bucket %s: TTL %v history %d, want %v %d", tc.bucket, st.TTL(), st.History(), tc.ttl, tc.history)
		}
	}
}

func consumerInfo(t *testing.T, ctx context.Context, js jetstream.JetStream, run string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(ctx, schema.DesignStream, schema.ConsumerName(run))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestDeclareConsumer(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, time.Minute)
	for _, tc := range []struct {
		name       string
		cc         broker.ConsumerConfig
		waiting    int
		ackPending int
		ackWait    time.Duration
		maxDeliver int
	}{
		{"zero value", broker.ConsumerConfig{}, 4096, 1024, broker.AckWaitDefault, broker.MaxDeliverDefault},
		{"few slots", broker.ConsumerConfig{Slots: 6}, 4096, 1024, broker.AckWaitDefault, broker.MaxDeliverDefault},
		{"at the ack-pending floor", broker.ConsumerConfig{Slots: 256}, 4096, 1024, broker.AckWaitDefault, broker.MaxDeliverDefault},
		{"over the ack-pending floor", broker.ConsumerConfig{Slots: 552}, 4096, 2208, broker.AckWaitDefault, broker.MaxDeliverDefault},
		{"over the waiting floor", broker.ConsumerConfig{Slots: 2000}, 8000, 8000, broker.AckWaitDefault, broker.MaxDeliverDefault},
		{"explicit ack wait and deliveries", broker.ConsumerConfig{Slots: 1, AckWait: 5 * time.Second, MaxDeliver: 7}, 4096, 1024, 5 * time.Second, 7},
		{"unlimited deliveries", broker.ConsumerConfig{Slots: 1, MaxDeliver: -1}, 4096, 1024, broker.AckWaitDefault, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := "dc-" + strings.ReplaceAll(tc.name, " ", "-")
			c, err := broker.DeclareConsumer(ctx, b.JS, run, tc.cc)
			if err != nil {
				t.Fatal(err)
			}
			cfg := consumerInfo(t, ctx, b.JS, run).Config
			if cfg.MaxWaiting != tc.waiting || cfg.MaxAckPending != tc.ackPending {
				t.Errorf("MaxWaiting %d MaxAckPending %d, want %d %d", cfg.MaxWaiting, cfg.MaxAckPending, tc.waiting, tc.ackPending)
			}
			if cfg.MaxWaiting != broker.WaitingFor(max(tc.cc.Slots, 1)) || cfg.MaxWaiting != max(4096, 4*tc.cc.Slots) {
				t.Errorf("MaxWaiting %d is not max(4096, 4*slots)", cfg.MaxWaiting)
			}
			if cfg.AckWait != tc.ackWait || cfg.MaxDeliver != tc.maxDeliver {
				t.Errorf("AckWait %v MaxDeliver %d, want %v %d", cfg.AckWait, cfg.MaxDeliver, tc.ackWait, tc.maxDeliver)
			}
			if cfg.Durable != schema.ConsumerName(run) || cfg.FilterSubject != schema.DesignSubject(run) ||
				cfg.AckPolicy != jetstream.AckExplicitPolicy {
				t.Errorf("consumer %+v", cfg)
			}
			if c.CachedInfo().Config.MaxWaiting != cfg.MaxWaiting {
				t.Errorf("returned consumer caches MaxWaiting %d", c.CachedInfo().Config.MaxWaiting)
			}
			if err := broker.CheckLimits(consumerInfo(t, ctx, b.JS, run), max(tc.cc.Slots, 1)); err != nil {
				t.Errorf("a consumer sized for its slots fails CheckLimits: %v", err)
			}
		})
	}
}

func TestDeclareConsumerRedeclare(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, time.Minute)
	for _, tc := range []struct {
		name        string
		first, then broker.ConsumerConfig
		waiting     int // kept from the first declaration
		ackPending  int
		ackWait     time.Duration
	}{
		{"fewer slots", broker.ConsumerConfig{Slots: 2000}, broker.ConsumerConfig{Slots: 1, AckWait: 10 * time.Second},
			8000, 8000, 10 * time.Second},
		{"more slots", broker.ConsumerConfig{Slots: 1}, broker.ConsumerConfig{Slots: 3000},
			4096, 12000, broker.AckWaitDefault},
		{"same", broker.ConsumerConfig{Slots: 8}, broker.ConsumerConfig{Slots: 8}, 4096, 1024, broker.AckWaitDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := "redeclare-" + strings.ReplaceAll(tc.name, " ", "-")
			if _, err := broker.DeclareConsumer(ctx, b.JS, run, tc.first); err != nil {
				t.Fatal(err)
			}
			if _, err := broker.DeclareConsumer(ctx, b.JS, run, tc.then); err != nil {
				t.Fatalf("redeclare: %v", err)
			}
			cfg := consumerInfo(t, ctx, b.JS, run).Config
			if cfg.MaxWaiting != tc.waiting || cfg.MaxAckPending != tc.ackPending || cfg.AckWait != tc.ackWait {
				t.Errorf("MaxWaiting %d MaxAckPending %d AckWait %v, want %d %d %v",
					cfg.MaxWaiting, cfg.MaxAckPending, cfg.AckWait, tc.waiting, tc.ackPending, tc.ackWait)
			}
		})
	}
}

func TestCheckLimits(t *testing.T) {
	t.Parallel()
	info := func(waiting, ackPending int) *jetstream.ConsumerInfo {
		return &jetstream.ConsumerInfo{Name: "evoq-workers-r", Config: jetstream.ConsumerConfig{MaxWaiting: waiting, MaxAckPending: ackPending}}
	}
	for _, tc := range []struct {
		name   string
		info   *jetstream.ConsumerInfo
		slots  int
		errHas []string
	}{
		{"within", info(4096, 1024), 1024, nil},
		{"at MaxWaiting", info(4096, 8000), 4096, nil},
		{"slots over MaxWaiting", info(4096, 8000), 4097, []string{"MaxWaiting 4096 < 4097 live slots", "evoq-workers-r", "--expect-slots >= 4097"}},
		{"slots over MaxAckPending", info(4096, 1024), 1025, []string{"MaxAckPending 1024 < 1025 live slots"}},
		{"unlimited ack pending", info(4096, -1), 4000, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := broker.CheckLimits(tc.info, tc.slots)
			if tc.errHas == nil {
				if err != nil {
					t.Errorf("CheckLimits = %v", err)
				}
				return
			}
			if !errors.Is(err, broker.ErrLimit) {
				t.Fatalf("CheckLimits = %v, want ErrLimit", err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}

	// A real consumer sized for few slots, then outgrown.
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, 30*time.Second)
	if _, err := broker.DeclareConsumer(ctx, b.JS, "small", broker.ConsumerConfig{Slots: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.DeclareConsumer(ctx, b.JS, "small", broker.ConsumerConfig{Slots: 5000}); err != nil {
		t.Fatal(err)
	}
	err := broker.CheckLimits(consumerInfo(t, ctx, b.JS, "small"), 5000)
	if !errors.Is(err, broker.ErrLimit) || !strings.Contains(err.Error(), "MaxWaiting 4096") {
		t.Errorf("CheckLimits = %v, want ErrLimit naming MaxWaiting 4096", err)
	}
}

func TestRaiseAckPending(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, time.Minute)
	for _, tc := range []struct {
		name   string
		slots  []int // successive raises through one consumer handle
		want   int
		before broker.ConsumerConfig
	}{
		{"below the floor", []int{10}, 1024, broker.ConsumerConfig{Slots: 1}},
		{"raises", []int{2000}, 8000, broker.ConsumerConfig{Slots: 1}},
		{"never lowers", []int{10}, 8000, broker.ConsumerConfig{Slots: 2000}},
		{"keeps rising", []int{300, 2000, 2500}, 10000, broker.ConsumerConfig{Slots: 1}},
		{"never lowers through a reused handle", []int{2000, 1500}, 8000,
			broker.ConsumerConfig{Slots: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := "raise-" + strings.ReplaceAll(tc.name, " ", "-")
			c, err := broker.DeclareConsumer(ctx, b.JS, run, broker.ConsumerConfig{Slots: tc.before.Slots, AckWait: 7 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.slots {
				if err := broker.RaiseAckPending(ctx, b.JS, c, s); err != nil {
					t.Fatalf("RaiseAckPending(%d): %v", s, err)
				}
			}
			cfg := consumerInfo(t, ctx, b.JS, run).Config
			if cfg.MaxAckPending != tc.want {
				t.Errorf("MaxAckPending %d, want %d", cfg.MaxAckPending, tc.want)
			}
			if cfg.AckWait != 7*time.Second || cfg.MaxWaiting != broker.WaitingFor(tc.before.Slots) {
				t.Errorf("raising changed other limits: AckWait %v MaxWaiting %d", cfg.AckWait, cfg.MaxWaiting)
			}
		})
	}
}

func TestConnectBeforeBrokerAndAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	// Connect retries until a broker is there: workers may start first.
	nc, js := connect(t, "nats://"+listen, nil)
	if nc.IsConnected() {
		t.Fatal("connected with no broker running")
	}
	e := start(t, broker.Config{Dir: dir, Listen: listen})
	testutil.WaitFor(t, 10*time.Second, "the connection", nc.IsConnected)
	ctx := testutil.Context(t, time.Minute)
	if err := broker.Declare(ctx, js); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, schema.ResultSubject("r"), []byte("kept")); err != nil {
		t.Fatal(err)
	}

	e.Shutdown()
	testutil.WaitFor(t, 10*time.Second, "the disconnect", func() bool { return !nc.IsConnected() })
	start(t, broker.Config{Dir: dir, Listen: listen})
	testutil.WaitFor(t, 10*time.Second, "the reconnect", nc.IsConnected)
	s, err := js.Stream(ctx, schema.ResultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("%d results after the restart, want the 1 stored before", info.State.Msgs)
	}
}

// The largest body the codec encodes is stored with the Nats-Msg-Id
// header every publish carries: the header counts against the broker's
// limit, and the codec leaves it room.
func TestLargestBodyFitsWithItsHeader(t *testing.T) {
	t.Parallel()
	b := testutil.StartBroker(t)
	ctx := testutil.Context(t, 10*time.Second)
	body := bytes.Repeat([]byte{'x'}, schema.MaxBodySize)
	id := schema.ResultMsgID(schema.DesignID(strings.Repeat("r", schema.MaxTokenLen), 1<<62), 1<<30)
	if _, err := b.JS.Publish(ctx, schema.ResultSubject("r"), body, jetstream.WithMsgID(id)); err != nil {
		t.Fatalf("publish a %d-byte body with its Nats-Msg-Id: %v", len(body), err)
	}
	over := bytes.Repeat([]byte{'x'}, schema.MaxMessageSize)
	if _, err := b.JS.Publish(ctx, schema.ResultSubject("r"), over, jetstream.WithMsgID(id+"x")); err == nil {
		t.Fatalf("a %d-byte body with a header was stored: the broker's limit is not the one the codec assumes", len(over))
	}
}
