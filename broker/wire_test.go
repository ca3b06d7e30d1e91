package broker_test

// These tests pin the broker behaviour that schema/SCHEMA.md tells a worker
// in another language to rely on, with plain publishes, requests and
// subscriptions on the documented subjects rather than the jetstream
// package, so that a server upgrade that changes the wire fails here first.

import (
	"encoding/json"
	"errors"
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

const wireRun = "wire"

// wireSetup starts a broker with evoq's streams, buckets and the consumer
// of wireRun declared. Feature flags start a bare server with them instead,
// for the server's alternative wire formats.
func wireSetup(t *testing.T, flags map[string]bool) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	var srv *server.Server
	if flags == nil {
		srv = start(t, broker.Config{Dir: t.TempDir(), Listen: "127.0.0.1:-1"}).Server()
	} else {
		var err error
		srv, err = server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: t.TempDir(), NoSigs: true, FeatureFlags: flags})
		if err == nil {
			go srv.Start()
			t.Cleanup(srv.Shutdown)
		}
		if err != nil || !srv.ReadyForConnections(10*time.Second) {
			t.Fatalf("server with %v not ready: %v", flags, err)
		}
	}
	nc, js := connect(t, srv.ClientURL(), nil)
	ctx := testutil.Context(t, 10*time.Second)
	if err := broker.Declare(ctx, js); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.DeclareConsumer(ctx, js, wireRun, broker.ConsumerConfig{Slots: 2}); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

// rawRequest sends body (with header key/values) to subj and returns the reply.
func rawRequest(t *testing.T, nc *nats.Conn, subj, body string, hdr ...string) *nats.Msg {
	t.Helper()
	m := nats.NewMsg(subj)
	m.Data = []byte(body)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	r, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subj, err)
	}
	return r
}

// apiError is the error of a JetStream API reply or PubAck.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

// pubAck is a PubAck or its error, as the server writes them.
type pubAck struct {
	Stream    string    `json:"stream"`
	Seq       uint64    `json:"seq"`
	Duplicate bool      `json:"duplicate"`
	Error     *apiError `json:"error"`
}

func decodeAck(t *testing.T, m *nats.Msg) pubAck {
	t.Helper()
	var a pubAck
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatalf("reply %q: %v", m.Data, err)
	}
	return a
}

// sendPull sends a pull request to consumer on an inbox of its own, where
// its answers arrive.
func sendPull(t *testing.T, nc *nats.Conn, consumer, body string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err == nil {
		err = nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+schema.DesignStream+"."+consumer, sub.Subject, []byte(body))
	}
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// nextMsg is the next answer on sub.
func nextMsg(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no answer on %s: %v", sub.Subject, err)
	}
	return m
}

// pull returns the first answer to a pull request.
func pull(t *testing.T, nc *nats.Conn, consumer, body string) *nats.Msg {
	return nextMsg(t, sendPull(t, nc, consumer, body))
}

// wantStatus checks that m is a status reply: no body, the code, and a
// description that starts with description.
func wantStatus(t *testing.T, m *nats.Msg, status, description string) {
	t.Helper()
	if got := m.Header.Get("Status"); got != status || !strings.HasPrefix(m.Header.Get("Description"), description) || len(m.Data) != 0 {
		t.Errorf("got status %q %q, %d body bytes; want %s %s and no body", got, m.Header.Get("Description"), len(m.Data), status, description)
	}
}

func TestWireKV(t *testing.T) {
	t.Parallel()
	_, nc, _ := wireSetup(t, nil)
	key := "$KV." + schema.PresenceBucket + "." + schema.PresenceKey(wireRun, "w1")
	watch, err := nc.SubscribeSync(key) // what a worker's run watch does on evoq_runs
	if err != nil {
		t.Fatal(err)
	}
	put := decodeAck(t, rawRequest(t, nc, key, "beat"))
	if put.Error != nil || put.Stream != "KV_"+schema.PresenceBucket || put.Seq == 0 {
		t.Fatalf("put PubAck %+v", put)
	}
	byBody := "$JS.API.DIRECT.GET.KV_" + schema.PresenceBucket
	bySubject := byBody + "." + key
	for _, get := range []*nats.Msg{
		rawRequest(t, nc, byBody, `{"last_by_subj":"`+key+`"}`),
		rawRequest(t, nc, bySubject, ""),
	} {
		ts, err := time.Parse(time.RFC3339Nano, get.Header.Get("Nats-Time-Stamp"))
		if string(get.Data) != "beat" || get.Header.Get("Nats-Subject") != key ||
			get.Header.Get("Nats-Sequence") != strconv.FormatUint(put.Seq, 10) || err != nil || time.Since(ts) > time.Minute {
			t.Errorf("direct get: %q, headers %v", get.Data, get.Header)
		}
	}
	del := decodeAck(t, rawRequest(t, nc, key, "", "KV-Operation", "DEL"))
	if del.Error != nil || del.Seq != put.Seq+1 {
		t.Fatalf("delete PubAck %+v", del)
	}
	// The delete is a marker, not an absence: the last value read is it.
	if get := rawRequest(t, nc, bySubject, ""); get.Header.Get("KV-Operation") != "DEL" || len(get.Data) != 0 {
		t.Errorf("after delete: %q, headers %v", get.Data, get.Header)
	}
	for _, want := range []string{"", "DEL"} {
		m, err := watch.NextMsg(5 * time.Second)
		if err != nil || m.Header.Get("KV-Operation") != want {
			t.Errorf("watch: %v, %v; want KV-Operation %q", m, err, want)
		}
	}
	wantStatus(t, rawRequest(t, nc, byBody+".$KV."+schema.PresenceBucket+".never", ""), "404", "Message Not Found")
}

func TestWirePubAck(t *testing.T) {
	t.Parallel()
	_, nc, _ := wireSetup(t, nil)
	subj := schema.ResultSubject(wireRun)
	first := decodeAck(t, rawRequest(t, nc, subj, "r", "Nats-Msg-Id", "wire-1/1"))
	again := decodeAck(t, rawRequest(t, nc, subj, "r", "Nats-Msg-Id", "wire-1/1"))
	if first.Error != nil || first.Stream != schema.ResultStream || first.Seq != 1 || first.Duplicate {
		t.Errorf("PubAck %+v", first)
	}
	if again.Error != nil || again.Seq != first.Seq || !again.Duplicate {
		t.Errorf("duplicate PubAck %+v, want seq %d duplicate", again, first.Seq)
	}
	bad := decodeAck(t, rawRequest(t, nc, subj, "r", "Nats-Expected-Last-Sequence", "7"))
	if e := bad.Error; e == nil || e.Code != 400 || e.ErrCode != 10071 || e.Description != "wrong last sequence: 1" || bad.Stream != schema.ResultStream {
		t.Errorf("refused PubAck %+v %+v", bad, e)
	}
	if _, err := nc.Request("evoq.nostream", nil, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("publish to no stream: %v, want 503 no responders", err)
	}
}

func TestWireConsumerInfo(t *testing.T) {
	t.Parallel()
	_, nc, _ := wireSetup(t, nil)
	var info struct {
		Type   string `json:"type"`
		Config struct {
			AckWait    int64 `json:"ack_wait"`
			MaxDeliver int   `json:"max_deliver"`
			MaxWaiting int   `json:"max_waiting"`
		} `json:"config"`
		Error *apiError `json:"error"`
	}
	subj := "$JS.API.CONSUMER.INFO." + schema.DesignStream + "."
	if err := json.Unmarshal(rawRequest(t, nc, subj+schema.ConsumerName(wireRun), "").Data, &info); err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if info.Type != "io.nats.jetstream.api.v1.consumer_info_response" || c.AckWait != int64(broker.AckWaitDefault) ||
		c.MaxDeliver != broker.MaxDeliverDefault || c.MaxWaiting != broker.WaitingFor(2) {
		t.Errorf("consumer info %+v", info)
	}
	info.Error = nil
	if err := json.Unmarshal(rawRequest(t, nc, subj+"nobody", "").Data, &info); err != nil || info.Error == nil ||
		info.Error.Code != 404 || info.Error.ErrCode != 10014 {
		t.Errorf("missing consumer: %v, %+v", err, info.Error)
	}
}

func TestWirePullStatus(t *testing.T) {
	t.Parallel()
	srv, nc, js := wireSetup(t, nil)
	cons := schema.ConsumerName(wireRun)
	expired := pull(t, nc, cons, `{"batch":1,"expires":50000000}`)
	wantStatus(t, expired, "408", "Request Timeout")
	if n := expired.Header.Get("Nats-Pending-Messages"); n != "1" {
		t.Errorf("expired request: Nats-Pending-Messages %q, want the 1 design it did not get", n)
	}
	wantStatus(t, pull(t, nc, cons, `{"batch":`), "400", "Bad Request")
	// nats.go reports a reply of status 503 with no body as ErrNoResponders.
	if _, err := sendPull(t, nc, "nobody", `{"batch":1}`).NextMsg(5 * time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("pull of a missing consumer: %v, want 503 no responders", err)
	}

	if _, err := js.CreateConsumer(testutil.Context(t, 5*time.Second), schema.DesignStream, jetstream.ConsumerConfig{
		Durable: "one", FilterSubject: schema.DesignSubject("one"), AckPolicy: jetstream.AckExplicitPolicy, MaxWaiting: 1}); err != nil {
		t.Fatal(err)
	}
	// Requests to one consumer are handled in order: the first holds the
	// only waiting place when the second arrives, and still holds it when
	// the server shuts down.
	held := sendPull(t, nc, "one", `{"batch":1,"expires":30000000000}`)
	wantStatus(t, pull(t, nc, "one", `{"batch":1,"expires":30000000000}`), "409", "Exceeded MaxWaiting")
	srv.Shutdown()
	wantStatus(t, nextMsg(t, held), "409", "Server Shutdown")
}

func TestWireAckReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		flags  map[string]bool
		tokens int
	}{
		{"default", nil, 9},
		{"v2", map[string]bool{"js_ack_fc_v2": true}, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, nc, _ := wireSetup(t, tc.flags)
			cons := schema.ConsumerName(wireRun)
			before := time.Now()
			sent := decodeAck(t, rawRequest(t, nc, schema.DesignSubject(wireRun), "d", "Nats-Msg-Id", schema.DesignID(wireRun, 1)))
			first := pull(t, nc, cons, `{"batch":1,"expires":5000000000}`)
			if err := first.Respond([]byte("-NAK")); err != nil {
				t.Fatal(err)
			}
			again := pull(t, nc, cons, `{"batch":1,"expires":5000000000}`)
			for i, m := range []*nats.Msg{first, again} {
				if m.Subject != schema.DesignSubject(wireRun) || m.Header.Get("Nats-Msg-Id") != schema.DesignID(wireRun, 1) {
					t.Errorf("delivered as %q with headers %v, want the subject and headers it was published with", m.Subject, m.Header)
				}
				tok := strings.Split(m.Reply, ".")
				if len(tok) != tc.tokens || tok[0] != "$JS" || tok[1] != "ACK" {
					t.Fatalf("ack subject %q: want %d tokens", m.Reply, tc.tokens)
				}
				if tc.tokens == 11 {
					if tok[2] != "_" || len(tok[3]) != 8 {
						t.Errorf("domain %q, account hash %q: want _ and 8 characters", tok[2], tok[3])
					}
					tok = append(tok[:2], tok[4:]...) // the v1 layout from here on
				}
				ts, _ := strconv.ParseInt(tok[7], 10, 64)
				n := strconv.Itoa(i + 1)
				if tok[2] != schema.DesignStream || tok[3] != cons || tok[4] != n || tok[5] != strconv.FormatUint(sent.Seq, 10) ||
					tok[6] != n || time.Unix(0, ts).Before(before.Add(-time.Second)) || tok[8] != "0" {
					t.Errorf("ack subject %q: want delivery %s of stream seq %d", m.Reply, n, sent.Seq)
				}
				if meta, err := m.Metadata(); err != nil || meta.NumDelivered != uint64(i+1) || meta.Sequence.Stream != sent.Seq {
					t.Errorf("nats.go reads %q as %+v, %v", m.Reply, meta, err)
				}
			}
			for _, body := range []string{"+WPI", "+TERM malformed design: test"} {
				// With a reply subject the server confirms the ack.
				if _, err := nc.Request(again.Reply, []byte(body), 5*time.Second); err != nil {
					t.Fatalf("%s: %v", body, err)
				}
			}
			get := rawRequest(t, nc, "$JS.API.STREAM.MSG.GET."+schema.DesignStream, `{"seq":`+strconv.FormatUint(sent.Seq, 10)+`}`)
			if e := decodeAck(t, get).Error; e == nil || e.ErrCode != 10037 {
				t.Errorf("after +TERM the work queue answers %s, want no message found", get.Data)
			}
		})
	}
}
