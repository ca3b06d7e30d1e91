package schema_test

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/schema"
	"github.com/vmihailenco/msgpack/v5"
)

var (
	t0 = time.Date(2024, 5, 17, 9, 30, 12, 123456789, time.UTC)
	t1 = t0.Add(1500 * time.Millisecond)
)

// validDesign is a design that passes Validate, with a nested genome of
// the shape the search spaces produce.
func validDesign() *schema.Design {
	return &schema.Design{
		V: schema.Version, Run: "run-1", ID: "run-1-7", Seq: 7,
		Genome: map[string]any{
			"layers": []any{
				map[string]any{"units": int64(32), "activation": "relu"},
				map[string]any{"units": int64(-4), "activation": "tanh", "extra": []any{int64(1), 2.5, "x", true, nil}},
			},
			"lr":       0.0125,
			"epochs":   int64(1 << 40),
			"batch":    int64(16),
			"nesterov": false,
			"name":     "mlp",
			"none":     nil,
			"empty":    map[string]any{},
		},
		Parents: []string{"run-1-3"},
		Origin:  schema.OriginMutant,
		Created: t0,
	}
}

func validResult() *schema.Result {
	d := validDesign()
	return &schema.Result{
		V: schema.Version, Run: d.Run, DesignID: d.ID, Design: *d,
		Status: schema.StatusOK, Fitness: 0.875,
		Metrics: map[string]any{"loss": 0.25, "epochs": int64(-1), "curve": []any{0.5, 0.25}},
		Worker:  "node-7_gpu", Host: "node-7.example.org", Slot: 3, GPU: "GPU-1234",
		Attempt: 2, Start: t0, Stop: t1, Gap: 42 * time.Millisecond, Error: "none",
	}
}

// nodeResult is a result of an external evaluator that exited 0 on a GPU
// known by its UUID.
func nodeResult() *schema.Result {
	r, exit := validResult(), 0
	r.GPU, r.GPUUUID, r.Exit = "0", "GPU-5e7d7c1a-0f4b-4c36-9a52-2b8c3f1d9e01", &exit
	return r
}

func validLost() *schema.Result {
	d := validDesign()
	return &schema.Result{
		V: schema.Version, Run: d.Run, DesignID: d.ID, Design: *d,
		Status: schema.StatusLost, Fitness: schema.InfeasibleFitness, Attempt: 3,
		Error: "redelivery limit 3 reached",
	}
}

func validPresence() *schema.Presence {
	return &schema.Presence{
		V: schema.Version, Run: "run-1", Worker: "w-1", Host: "node-7", PID: 4242,
		Slots: 6, Busy: 6, Done: 1234, Started: t0, Heartbeat: t1,
		Interval: time.Second, Leaving: true,
	}
}

func validRun() *schema.Run {
	return &schema.Run{
		V: schema.Version, Run: "run-1", Phase: schema.PhaseDraining, Budget: 500,
		Space: "mlp-spirals", Seed: math.MaxUint64, AckWait: 30 * time.Second,
		Created: t0, Updated: t1,
	}
}

// utc returns t in UTC without a monotonic reading, the form in which
// times are compared: the wire keeps the instant, not the zone.
func utc(t time.Time) time.Time { return t.UTC().Round(0) }

func normDesign(d schema.Design) schema.Design {
	d.Created = utc(d.Created)
	d.Genome = normValue(d.Genome).(map[string]any)
	return d
}

func normResult(r schema.Result) schema.Result {
	r.Design = normDesign(r.Design)
	r.Start, r.Stop = utc(r.Start), utc(r.Stop)
	if r.Metrics != nil {
		r.Metrics = normValue(r.Metrics).(map[string]any)
	}
	return r
}

func normPresence(p schema.Presence) schema.Presence {
	p.Started, p.Heartbeat = utc(p.Started), utc(p.Heartbeat)
	return p
}

func normRun(r schema.Run) schema.Run {
	r.Created, r.Updated = utc(r.Created), utc(r.Updated)
	return r
}

// normValue puts times inside decoded genomes into UTC.
func normValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return x
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = normValue(e)
		}
		return m
	case []any:
		if x == nil {
			return x
		}
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = normValue(e)
		}
		return s
	case time.Time:
		return utc(x)
	}
	return v
}

// same is reflect.DeepEqual on normalised values, except that NaN equals
// NaN and an empty slice or map equals a nil one (omitempty fields drop
// both alike).
func same(a, b any) bool { return sameValue(reflect.ValueOf(a), reflect.ValueOf(b)) }

func sameValue(a, b reflect.Value) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		return x == y || (math.IsNaN(x) && math.IsNaN(y))
	case reflect.Interface, reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			if e := b.MapIndex(k); !e.IsValid() || !sameValue(a.MapIndex(k), e) {
				return false
			}
		}
		return true
	case reflect.Struct:
		if t, ok := a.Interface().(time.Time); ok {
			return t.Equal(b.Interface().(time.Time))
		}
		for i := range a.NumField() {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		encode func() ([]byte, error)
		decode func([]byte) (any, error)
		want   any
	}{
		{"design", func() ([]byte, error) { return schema.EncodeDesign(validDesign()) },
			func(b []byte) (any, error) { d, err := schema.DecodeDesign(b); return derefDesign(d), err },
			normDesign(*validDesign())},
		{"random design without parents", func() ([]byte, error) {
			d := validDesign()
			d.Origin, d.Parents = schema.OriginRandom, nil
			return schema.EncodeDesign(d)
		}, func(b []byte) (any, error) { d, err := schema.DecodeDesign(b); return derefDesign(d), err },
			func() any { d := validDesign(); d.Origin, d.Parents = schema.OriginRandom, nil; return normDesign(*d) }()},
		{"result", func() ([]byte, error) { return schema.EncodeResult(validResult()) },
			func(b []byte) (any, error) { r, err := schema.DecodeResult(b); return derefResult(r), err },
			normResult(*validResult())},
		{"result with its node's GPU UUID and exit code", func() ([]byte, error) { return schema.EncodeResult(nodeResult()) },
			func(b []byte) (any, error) { r, err := schema.DecodeResult(b); return derefResult(r), err },
			normResult(*nodeResult())},
		{"lost result", func() ([]byte, error) { return schema.EncodeResult(validLost()) },
			func(b []byte) (any, error) { r, err := schema.DecodeResult(b); return derefResult(r), err },
			normResult(*validLost())},
		{"presence", func() ([]byte, error) { return schema.EncodePresence(validPresence()) },
			func(b []byte) (any, error) { p, err := schema.DecodePresence(b); return derefPresence(p), err },
			normPresence(*validPresence())},
		{"run", func() ([]byte, error) { return schema.EncodeRun(validRun()) },
			func(b []byte) (any, error) { r, err := schema.DecodeRun(b); return derefRun(r), err },
			normRun(*validRun())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := tt.encode()
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			got, err := tt.decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			got = normAny(got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("round trip changed the message:\n got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func derefDesign(d *schema.Design) any {
	if d == nil {
		return nil
	}
	return *d
}

func derefResult(r *schema.Result) any {
	if r == nil {
		return nil
	}
	return *r
}

func derefPresence(p *schema.Presence) any {
	if p == nil {
		return nil
	}
	return *p
}

func derefRun(r *schema.Run) any {
	if r == nil {
		return nil
	}
	return *r
}

func normAny(v any) any {
	switch x := v.(type) {
	case schema.Design:
		return normDesign(x)
	case schema.Result:
		return normResult(x)
	case schema.Presence:
		return normPresence(x)
	case schema.Run:
		return normRun(x)
	}
	return v
}

// TestEncodeStampsVersion checks that the encoders set "v" whatever the
// caller left in it, on the result's embedded design too.
func TestEncodeStampsVersion(t *testing.T) {
	t.Parallel()
	r := validResult()
	r.V, r.Design.V = 0, 7
	b, err := schema.EncodeResult(r)
	if err != nil {
		t.Fatalf("EncodeResult: %v", err)
	}
	var raw struct {
		V      int `msgpack:"v"`
		Design struct {
			V int `msgpack:"v"`
		} `msgpack:"design"`
	}
	if err := msgpack.Unmarshal(b, &raw); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if raw.V != schema.Version || raw.Design.V != schema.Version {
		t.Errorf("v = %d, design.v = %d; want %d for both", raw.V, raw.Design.V, schema.Version)
	}
}

// TestEncodeSortsKeys checks that the encoding is canonical: the same
// genome built in any order gives the same bytes.
func TestEncodeSortsKeys(t *testing.T) {
	t.Parallel()
	var first []byte
	for i := range 20 {
		d := validDesign()
		d.Genome = map[string]any{}
		for k := range 30 {
			c := (k*7 + i) % 30
			d.Genome[string(rune('a'+c))] = int64(c)
		}
		b, err := schema.EncodeDesign(d)
		if err != nil {
			t.Fatalf("EncodeDesign: %v", err)
		}
		if first == nil {
			first = b
		} else if !bytes.Equal(b, first) {
			t.Fatalf("encoding %d differs from the first", i)
		}
	}
}

func TestLooseNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"small int", int(5), int64(5)},
		{"negative int", int(-300), int64(-300)},
		{"int8", int8(-7), int64(-7)},
		{"int16", int16(-30000), int64(-30000)},
		{"int32", int32(-70000), int64(-70000)},
		{"int64", int64(150), int64(150)},
		{"large int64", int64(1) << 50, int64(1) << 50},
		{"min int64", int64(math.MinInt64), int64(math.MinInt64)},
		{"float32", float32(1.5), float64(1.5)},
		{"float64", 0.1, 0.1},
		{"bytes", []byte("abc"), "abc"},
		{"nested ints", []any{map[string]any{"u": int32(3), "v": []any{int8(-1)}}},
			[]any{map[string]any{"u": int64(3), "v": []any{int64(-1)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := validDesign()
			d.Genome = map[string]any{"x": tt.in}
			b, err := schema.EncodeDesign(d)
			if err != nil {
				t.Fatalf("EncodeDesign: %v", err)
			}
			got, err := schema.DecodeDesign(b)
			if err != nil {
				t.Fatalf("DecodeDesign: %v", err)
			}
			if !reflect.DeepEqual(got.Genome["x"], tt.want) {
				t.Errorf("genome x = %#v (%T), want %#v (%T)", got.Genome["x"], got.Genome["x"], tt.want, tt.want)
			}
		})
	}
}

// TestLooseUnsignedNumbers covers integers sent in msgpack's compact
// unsigned forms, as Go's int and most other languages' encoders write
// non-negative integers of 128 and more.
func TestLooseUnsignedNumbers(t *testing.T) {
	t.Parallel()
	for _, in := range []any{int(200), uint8(200), uint16(40000), uint32(1 << 20), int(1) << 40} {
		d := validDesign()
		d.Genome = map[string]any{"x": in}
		b, err := schema.EncodeDesign(d)
		if err != nil {
			t.Fatalf("EncodeDesign: %v", err)
		}
		got, err := schema.DecodeDesign(b)
		if err != nil {
			t.Fatalf("DecodeDesign: %v", err)
		}
		if _, ok := got.Genome["x"].(int64); !ok {
			t.Errorf("%T(%v) decodes as %T, want int64", in, in, got.Genome["x"])
		}
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatalf("msgpack.Marshal: %v", err)
	}
	return b
}

// designMap is a valid design as a plain map, to be broken field by field.
func designMap() map[string]any {
	return map[string]any{
		"v": 1, "run": "run-1", "id": "run-1-1", "seq": 1, "origin": "random",
		"genome": map[string]any{"a": 1}, "created": t0,
	}
}

func with(m map[string]any, k string, v any) map[string]any {
	m[k] = v
	return m
}

func without(m map[string]any, k string) map[string]any {
	delete(m, k)
	return m
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	valid, err := schema.EncodeDesign(validDesign())
	if err != nil {
		t.Fatal(err)
	}
	huge := validDesign()
	huge.Genome = map[string]any{"blob": strings.Repeat("x", schema.MaxMessageSize)}
	oversized := mustMarshal(t, huge)
	tests := []struct {
		name    string
		data    []byte
		wantErr error
		want    string // in the message
	}{
		{"nil", nil, schema.ErrMalformed, "empty"},
		{"empty", []byte{}, schema.ErrMalformed, "empty"},
		{"never-used code", []byte{0xc1}, schema.ErrMalformed, "design"},
		{"text", []byte("hello, world"), schema.ErrMalformed, "design"},
		{"json", []byte(`{"v":1,"run":"run-1"}`), schema.ErrMalformed, "design"},
		{"an array", mustMarshal(t, []any{1, "run-1"}), schema.ErrMalformed, "design"},
		{"a number", mustMarshal(t, 1), schema.ErrMalformed, "design"},
		{"truncated", valid[:len(valid)/2], schema.ErrMalformed, "design"},
		{"one byte short", valid[:len(valid)-1], schema.ErrMalformed, "design"},
		{"oversized", oversized, schema.ErrMalformed, "over the"},
		{"missing v", mustMarshal(t, without(designMap(), "v")), schema.ErrMalformed, `"v"`},
		{"v nil", mustMarshal(t, with(designMap(), "v", nil)), schema.ErrMalformed, `"v"`},
		{"v a string", mustMarshal(t, with(designMap(), "v", "1")), schema.ErrMalformed, "design"},
		{"v 2", mustMarshal(t, with(designMap(), "v", 2)), schema.ErrVersion, "version 2"},
		{"v 0", mustMarshal(t, with(designMap(), "v", 0)), schema.ErrVersion, "version 0"},
		{"v -1", mustMarshal(t, with(designMap(), "v", -1)), schema.ErrVersion, "version -1"},
		{"v 2 with other fields of another shape", mustMarshal(t, map[string]any{"v": 2, "seq": "one", "genome": []any{1}}),
			schema.ErrVersion, "version 2"},
		{"seq a string", mustMarshal(t, with(designMap(), "seq", "one")), schema.ErrMalformed, "design"},
		{"genome a list", mustMarshal(t, with(designMap(), "genome", []any{1})), schema.ErrMalformed, "design"},
		{"genome with an int key", mustMarshal(t, with(designMap(), "genome", map[int]any{1: 1})), schema.ErrMalformed, "design"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := schema.DecodeDesign(tt.data)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("DecodeDesign error = %v, want %v", err, tt.wantErr)
			}
			if d != nil {
				t.Errorf("DecodeDesign returned a design %+v with %v", d, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

// TestDecodeEveryKindChecksVersion checks the size, emptiness and version
// checks of every decoder.
func TestDecodeEveryKindChecksVersion(t *testing.T) {
	t.Parallel()
	decoders := map[string]func([]byte) error{
		"design":   func(b []byte) error { _, err := schema.DecodeDesign(b); return err },
		"result":   func(b []byte) error { _, err := schema.DecodeResult(b); return err },
		"presence": func(b []byte) error { _, err := schema.DecodePresence(b); return err },
		"run":      func(b []byte) error { _, err := schema.DecodeRun(b); return err },
	}
	inputs := []struct {
		name    string
		data    []byte
		wantErr error
	}{
		{"empty", nil, schema.ErrMalformed},
		{"garbage", []byte{0xc1, 0x00}, schema.ErrMalformed},
		{"oversized", make([]byte, schema.MaxMessageSize+1), schema.ErrMalformed},
		{"v 2", mustMarshal(t, map[string]any{"v": 2}), schema.ErrVersion},
		{"no v", mustMarshal(t, map[string]any{"run": "run-1"}), schema.ErrMalformed},
	}
	for kind, decode := range decoders {
		for _, in := range inputs {
			t.Run(kind+"/"+in.name, func(t *testing.T) {
				t.Parallel()
				err := decode(in.data)
				if !errors.Is(err, in.wantErr) {
					t.Fatalf("error = %v, want %v", err, in.wantErr)
				}
				if !strings.Contains(err.Error(), kind) {
					t.Errorf("error %q does not name the kind %q", err, kind)
				}
			})
		}
	}
}

// TestDecodeNilTime checks that a time field sent as msgpack nil (None,
// null in other languages) is rejected, not a panic that would take the
// decoding worker or controller down.
func TestDecodeNilTime(t *testing.T) {
	t.Parallel()
	resultMap := func() map[string]any {
		return map[string]any{"v": 1, "run": "run-1", "design_id": "run-1-1", "design": designMap(),
			"status": "ok", "fitness": 0.5, "worker": "w", "slot": 0, "attempt": 1, "start": t0, "stop": t1}
	}
	presenceMap := func() map[string]any {
		return map[string]any{"v": 1, "run": "run-1", "worker": "w", "slots": 1, "busy": 0,
			"started": t0, "heartbeat": t1, "interval_ns": int64(time.Second)}
	}
	runMap := func() map[string]any {
		return map[string]any{"v": 1, "run": "run-1", "phase": "running", "budget": 5, "created": t0, "updated": t1}
	}
	tests := []struct {
		name   string
		data   []byte
		decode func([]byte) error
	}{
		{"design created", mustMarshal(t, with(designMap(), "created", nil)),
			func(b []byte) error { _, err := schema.DecodeDesign(b); return err }},
		{"result start", mustMarshal(t, with(resultMap(), "start", nil)),
			func(b []byte) error { _, err := schema.DecodeResult(b); return err }},
		{"result stop", mustMarshal(t, with(resultMap(), "stop", nil)),
			func(b []byte) error { _, err := schema.DecodeResult(b); return err }},
		{"result design created", mustMarshal(t, with(resultMap(), "design", with(designMap(), "created", nil))),
			func(b []byte) error { _, err := schema.DecodeResult(b); return err }},
		{"presence heartbeat", mustMarshal(t, with(presenceMap(), "heartbeat", nil)),
			func(b []byte) error { _, err := schema.DecodePresence(b); return err }},
		{"run updated", mustMarshal(t, with(runMap(), "updated", nil)),
			func(b []byte) error { _, err := schema.DecodeRun(b); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err, p := decodeNoPanic(func() error { return tt.decode(tt.data) })
			if p != nil {
				t.Fatalf("decode panicked: %v", p)
			}
			if !errors.Is(err, schema.ErrMalformed) && !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("decode error = %v, want ErrMalformed or ErrInvalid", err)
			}
		})
	}
}

func TestMarshalRefusesOversized(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		blob int
		ok   bool
	}{
		{"well under", 1000, true},
		{"in the headers' room", schema.MaxMessageSize - schema.HeaderRoom/2, false},
		{"exactly over", schema.MaxMessageSize, false},
		{"far over", 2 * schema.MaxMessageSize, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := validDesign()
			d.Genome = map[string]any{"blob": strings.Repeat("x", tt.blob)}
			b, err := schema.EncodeDesign(d)
			if tt.ok {
				if err != nil || len(b) > schema.MaxBodySize {
					t.Fatalf("EncodeDesign = %d bytes, %v; want success", len(b), err)
				}
				return
			}
			if !errors.Is(err, schema.ErrMalformed) || b != nil {
				t.Fatalf("EncodeDesign = %d bytes, %v; want ErrMalformed", len(b), err)
			}
			if !strings.Contains(err.Error(), "over the 1044480-byte limit") {
				t.Errorf("error %q does not state the limit", err)
			}
		})
	}
}

// TestDecodeInvalidReturnsPartial checks that a message that decodes but
// fails validation comes back with the error, so it can be named.
func TestDecodeInvalidReturnsPartial(t *testing.T) {
	t.Parallel()
	t.Run("design", func(t *testing.T) {
		t.Parallel()
		m := with(designMap(), "origin", "crossover")
		d, err := schema.DecodeDesign(mustMarshal(t, m))
		if !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), "origin") {
			t.Fatalf("error = %v, want ErrInvalid naming origin", err)
		}
		if d == nil || d.ID != "run-1-1" || d.Seq != 1 || d.Origin != "crossover" {
			t.Fatalf("partial design = %+v, want id run-1-1, seq 1, origin crossover", d)
		}
	})
	t.Run("result", func(t *testing.T) {
		t.Parallel()
		r := validResult()
		r.Status = "exploded"
		b, err := schema.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := schema.DecodeResult(b)
		if !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), "status") {
			t.Fatalf("error = %v, want ErrInvalid naming status", err)
		}
		if got == nil || got.DesignID != "run-1-7" || got.Worker != "node-7_gpu" {
			t.Fatalf("partial result = %+v, want design run-1-7 from node-7_gpu", got)
		}
	})
	t.Run("presence", func(t *testing.T) {
		t.Parallel()
		p := validPresence()
		p.Busy = 9
		b, err := schema.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := schema.DecodePresence(b)
		if !errors.Is(err, schema.ErrInvalid) || got == nil || got.Worker != "w-1" {
			t.Fatalf("DecodePresence = %+v, %v; want partial w-1 and ErrInvalid", got, err)
		}
	})
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		r := validRun()
		r.Budget = 0
		b, err := schema.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := schema.DecodeRun(b)
		if !errors.Is(err, schema.ErrInvalid) || got == nil || got.Run != "run-1" {
			t.Fatalf("DecodeRun = %+v, %v; want partial run-1 and ErrInvalid", got, err)
		}
	})
}

type validationCase[T any] struct {
	name  string
	edit  func(*T)
	field string // "" for a valid message
}

func checkValidation[T any](t *testing.T, kind string, fresh func() *T, validate func(*T) error, encode func(*T) ([]byte, error), cases []validationCase[T]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := fresh()
			tt.edit(v)
			err := validate(v)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				if _, err := encode(v); err != nil {
					t.Fatalf("encode: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
			if want := kind + ": " + tt.field + ": "; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name the field (%q)", err, want)
			}
			b, encErr := encode(fresh2(fresh, tt.edit))
			if !errors.Is(encErr, schema.ErrInvalid) || b != nil {
				t.Errorf("encode = %d bytes, %v; want ErrInvalid and no bytes", len(b), encErr)
			}
		})
	}
}

func fresh2[T any](fresh func() *T, edit func(*T)) *T {
	v := fresh()
	edit(v)
	return v
}

func TestDesignValidate(t *testing.T) {
	t.Parallel()
	checkValidation(t, "design", validDesign, (*schema.Design).Validate, schema.EncodeDesign, []validationCase[schema.Design]{
		{"valid", func(*schema.Design) {}, ""},
		{"random without parents", func(d *schema.Design) { d.Origin, d.Parents = schema.OriginRandom, nil }, ""},
		{"seed without parents", func(d *schema.Design) { d.Origin, d.Parents = schema.OriginSeed, nil }, ""},
		{"empty genome", func(d *schema.Design) { d.Genome = map[string]any{} }, ""},
		{"empty run", func(d *schema.Design) { d.Run = "" }, "run"},
		{"run with a dot", func(d *schema.Design) { d.Run, d.ID = "a.b", "a.b-7" }, "run"},
		{"run too long", func(d *schema.Design) {
			d.Run = strings.Repeat("r", schema.MaxTokenLen+1)
			d.ID = schema.DesignID(d.Run, d.Seq)
		}, "run"},
		{"seq 0", func(d *schema.Design) { d.Seq, d.ID = 0, "run-1-0" }, "seq"},
		{"id of another seq", func(d *schema.Design) { d.ID = "run-1-8" }, "id"},
		{"id of another run", func(d *schema.Design) { d.ID = "run-2-7" }, "id"},
		{"empty id", func(d *schema.Design) { d.ID = "" }, "id"},
		{"nil genome", func(d *schema.Design) { d.Genome = nil }, "genome"},
		{"mutant without parents", func(d *schema.Design) { d.Parents = nil }, "parents"},
		{"mutant with empty parents", func(d *schema.Design) { d.Parents = []string{} }, "parents"},
		{"unknown origin", func(d *schema.Design) { d.Origin = "crossover" }, "origin"},
		{"empty origin", func(d *schema.Design) { d.Origin = "" }, "origin"},
		{"zero created", func(d *schema.Design) { d.Created = time.Time{} }, "created"},
	})
}

func TestResultValidate(t *testing.T) {
	t.Parallel()
	checkValidation(t, "result", validResult, (*schema.Result).Validate, schema.EncodeResult, []validationCase[schema.Result]{
		{"valid", func(*schema.Result) {}, ""},
		{"lost without worker, slot or times", func(r *schema.Result) { *r = *validLost() }, ""},
		{"lost with a negative slot", func(r *schema.Result) { *r = *validLost(); r.Slot = -1 }, ""},
		{"zero duration", func(r *schema.Result) { r.Stop = r.Start }, ""},
		{"first design of a slot", func(r *schema.Result) { r.Gap = -1 }, ""},
		{"infeasible at -MaxInt64", func(r *schema.Result) {
			r.Status, r.Fitness = schema.StatusInfeasible, schema.InfeasibleFitness
		}, ""},
		{"negative zero fitness", func(r *schema.Result) { r.Fitness = math.Copysign(0, -1) }, ""},
		{"slot 0", func(r *schema.Result) { r.Slot = 0 }, ""},
		{"unknown status", func(r *schema.Result) { r.Status = "exploded" }, "status"},
		{"empty status", func(r *schema.Result) { r.Status = "" }, "status"},
		{"status in capitals", func(r *schema.Result) { r.Status = "OK" }, "status"},
		{"NaN fitness", func(r *schema.Result) { r.Fitness = math.NaN() }, "fitness"},
		{"+Inf fitness", func(r *schema.Result) { r.Fitness = math.Inf(1) }, "fitness"},
		{"-Inf fitness", func(r *schema.Result) { r.Fitness = math.Inf(-1) }, "fitness"},
		{"NaN fitness of a lost design", func(r *schema.Result) { *r = *validLost(); r.Fitness = math.NaN() }, "fitness"},
		{"run differs from the design's", func(r *schema.Result) { r.Run = "run-2" }, "design_id"},
		{"design id differs from the design's", func(r *schema.Result) { r.DesignID = "run-1-8" }, "design_id"},
		{"no worker", func(r *schema.Result) { r.Worker = "" }, "worker"},
		{"worker with a space", func(r *schema.Result) { r.Worker = "node 7" }, "worker"},
		{"negative slot", func(r *schema.Result) { r.Slot = -1 }, "slot"},
		{"attempt 0", func(r *schema.Result) { r.Attempt = 0 }, "attempt"},
		{"zero start", func(r *schema.Result) { r.Start = time.Time{} }, "start/stop"},
		{"stop before start", func(r *schema.Result) { r.Stop = r.Start.Add(-time.Nanosecond) }, "start/stop"},
		{"resumed", func(r *schema.Result) { r.ResumedFrom, r.ResumedSeconds, r.ProgressStep = 3, 1.5, 9 }, ""},
		{"negative resumed_from", func(r *schema.Result) { r.ResumedFrom = -1 }, "resumed_from"},
		{"negative progress_step", func(r *schema.Result) { r.ProgressStep = -1 }, "progress_step"},
		{"NaN resumed_seconds", func(r *schema.Result) { r.ResumedSeconds = math.NaN() }, "resumed_seconds"},
	})
}

// TestResultValidateDesign checks that a result's embedded design is
// validated and named.
func TestResultValidateDesign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*schema.Result)
		want string
	}{
		{"design version", func(r *schema.Result) { r.Design.V = 2 }, "result: design.v: "},
		{"design seq", func(r *schema.Result) { r.Design.Seq = 0 }, "design: seq: "},
		{"design genome", func(r *schema.Result) { r.Design.Genome = nil }, "design: genome: "},
		{"design origin", func(r *schema.Result) { r.Design.Origin = "x" }, "design: origin: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := validResult()
			tt.edit(r)
			err := r.Validate()
			if !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want ErrInvalid containing %q", err, tt.want)
			}
		})
	}
}

func TestPresenceValidate(t *testing.T) {
	t.Parallel()
	checkValidation(t, "presence", validPresence, (*schema.Presence).Validate, schema.EncodePresence, []validationCase[schema.Presence]{
		{"valid", func(*schema.Presence) {}, ""},
		{"idle", func(p *schema.Presence) { p.Busy = 0 }, ""},
		{"one slot", func(p *schema.Presence) { p.Slots, p.Busy = 1, 1 }, ""},
		{"bad run", func(p *schema.Presence) { p.Run = "run/1" }, "run"},
		{"no worker", func(p *schema.Presence) { p.Worker = "" }, "worker"},
		{"worker with a dot", func(p *schema.Presence) { p.Worker = "host.1" }, "worker"},
		{"no slots", func(p *schema.Presence) { p.Slots, p.Busy = 0, 0 }, "slots"},
		{"negative slots", func(p *schema.Presence) { p.Slots, p.Busy = -1, 0 }, "slots"},
		{"busy above slots", func(p *schema.Presence) { p.Busy = p.Slots + 1 }, "busy"},
		{"negative busy", func(p *schema.Presence) { p.Busy = -1 }, "busy"},
		{"no heartbeat", func(p *schema.Presence) { p.Heartbeat = time.Time{} }, "heartbeat"},
		{"no interval", func(p *schema.Presence) { p.Interval = 0 }, "interval_ns"},
		{"negative interval", func(p *schema.Presence) { p.Interval = -time.Second }, "interval_ns"},
	})
}

func TestRunValidate(t *testing.T) {
	t.Parallel()
	checkValidation(t, "run", validRun, (*schema.Run).Validate, schema.EncodeRun, []validationCase[schema.Run]{
		{"valid", func(*schema.Run) {}, ""},
		{"every phase", func(r *schema.Run) { r.Phase = schema.PhaseDone }, ""},
		{"budget 1", func(r *schema.Run) { r.Budget = 1 }, ""},
		{"no run", func(r *schema.Run) { r.Run = "" }, "run"},
		{"run with a wildcard", func(r *schema.Run) { r.Run = "run-*" }, "run"},
		{"unknown phase", func(r *schema.Run) { r.Phase = "paused" }, "phase"},
		{"empty phase", func(r *schema.Run) { r.Phase = "" }, "phase"},
		{"no budget", func(r *schema.Run) { r.Budget = 0 }, "budget"},
		{"negative budget", func(r *schema.Run) { r.Budget = -5 }, "budget"},
		{"failed", func(r *schema.Run) {
			r.Phase, r.FailFast, r.FailFastFrom, r.MadeUp = schema.PhaseFailed, 10, 37, 12
			r.Failure = &schema.Failure{Attempts: 10, StreamSeq: 47, Error: "sh: 1: x: not found", Count: 10}
		}, ""},
		{"fail-fast off", func(r *schema.Run) { r.FailFast = -1 }, ""},
		{"fail-fast below off", func(r *schema.Run) { r.FailFast = -2 }, "fail_fast"},
		{"negative made up", func(r *schema.Run) { r.MadeUp = -1 }, "made_up"},
		{"all of the budget made up", func(r *schema.Run) { r.MadeUp = r.Budget }, "made_up"},
		{"a failure of no attempt", func(r *schema.Run) { r.Failure = &schema.Failure{} }, "failure"},
	})
}

func TestValidToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"letters", "run", true},
		{"one character", "a", true},
		{"every allowed rune", "Az09_-", true},
		{"leading dash", "-run", true},
		{"64 characters", strings.Repeat("x", schema.MaxTokenLen), true},
		{"empty", "", false},
		{"65 characters", strings.Repeat("x", schema.MaxTokenLen+1), false},
		{"dot", "a.b", false},
		{"space", "a b", false},
		{"star", "run*", false},
		{"greater-than", "run>", false},
		{"slash", "a/b", false},
		{"colon", "a:b", false},
		{"tab", "a\tb", false},
		{"non-ASCII letter", "runé", false},
		{"NUL", "a\x00", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := schema.ValidToken(tt.in)
			if tt.ok && err != nil {
				t.Fatalf("ValidToken(%q) = %v, want nil", tt.in, err)
			}
			if !tt.ok && !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("ValidToken(%q) = %v, want ErrInvalid", tt.in, err)
			}
		})
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, got, want string
	}{
		{"design subject", schema.DesignSubject("r1"), "evoq.design.r1"},
		{"result subject", schema.ResultSubject("r1"), "evoq.result.r1"},
		{"consumer", schema.ConsumerName("r1"), "evoq-workers-r1"},
		{"presence key", schema.PresenceKey("r1", "w-2"), "r1.w-2"},
		{"design id", schema.DesignID("r1", 42), "r1-42"},
		{"design id of the largest seq", schema.DesignID("r", math.MaxUint64), "r-18446744073709551615"},
		{"result msg id", schema.ResultMsgID("r1-42", 3), "r1-42/3"},
		{"lost result msg id", schema.ResultMsgID("r1-42", 0), "r1-42/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestStatusValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    schema.Status
		want bool
	}{
		{schema.StatusOK, true}, {schema.StatusInfeasible, true}, {schema.StatusError, true},
		{schema.StatusTimeout, true}, {schema.StatusLost, true}, {schema.StatusStopped, true},
		{"", false}, {"OK", false}, {"running", false}, {"ok ", false},
	}
	for _, tt := range tests {
		t.Run(string(tt.s), func(t *testing.T) {
			t.Parallel()
			if got := tt.s.Valid(); got != tt.want {
				t.Errorf("Status(%q).Valid() = %v, want %v", tt.s, got, tt.want)
			}
		})
	}
	if len(schema.Statuses) != 6 {
		t.Errorf("Statuses has %d entries, want the 6 terminal statuses", len(schema.Statuses))
	}
}

func TestResultDuration(t *testing.T) {
	t.Parallel()
	r := validResult()
	if got := r.Duration(); got != 1500*time.Millisecond {
		t.Errorf("Duration = %v, want 1.5s", got)
	}
}

func TestInfeasibleFitness(t *testing.T) {
	t.Parallel()
	if schema.InfeasibleFitness != -9223372036854775808 {
		t.Errorf("InfeasibleFitness = %v, want -MaxInt64-1 as float", schema.InfeasibleFitness)
	}
}

// nilTimePanic is the panic of msgpack when a time field holds nil; see
// TestDecodeNilTime.
const nilTimePanic = "reflect: call of reflect.Value.IsNil on struct Value"

// decodeNoPanic runs decode and turns a panic into an error.
func decodeNoPanic(decode func() error) (err error, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return decode(), nil
}

// skipKnownPanic runs decode and fails the test if it panics.
func skipKnownPanic(t *testing.T, decode func() error) error {
	t.Helper()
	err, p := decodeNoPanic(decode)
	if p != nil {
		t.Fatalf("decode panicked: %v", p)
	}
	return err
}

func fuzzSeeds(f *testing.F, valid ...[]byte) {
	for _, b := range valid {
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(append(append([]byte{}, b...), 0xc1))
	}
	f.Add([]byte{})
	f.Add([]byte{0xc1})
	f.Add([]byte{0x80})
	f.Add([]byte{0x81, 0xa1, 'v', 0x01})
	f.Add([]byte{0x81, 0xa1, 'v', 0x02})
}

// FuzzDecodeDesign checks that DecodeDesign never panics and that anything
// it accepts survives an encode and decode unchanged.
func FuzzDecodeDesign(f *testing.F) {
	d := validDesign()
	b, err := schema.EncodeDesign(d)
	if err != nil {
		f.Fatal(err)
	}
	d.Origin, d.Parents = schema.OriginRandom, nil
	d.Genome = map[string]any{"t": t0, "n": nil, "f": float32(1)}
	b2, err := schema.EncodeDesign(d)
	if err != nil {
		f.Fatal(err)
	}
	fuzzSeeds(f, b, b2, mustMarshal(f, designMap()))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d *schema.Design
		err := skipKnownPanic(t, func() (err error) { d, err = schema.DecodeDesign(data); return err })
		if err != nil {
			if !errors.Is(err, schema.ErrMalformed) && !errors.Is(err, schema.ErrVersion) && !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("error %v wraps none of the sentinels", err)
			}
			return
		}
		again, err := schema.EncodeDesign(d)
		if err != nil {
			t.Fatalf("accepted design does not encode: %v", err)
		}
		d2, err := schema.DecodeDesign(again)
		if err != nil {
			t.Fatalf("re-encoded design does not decode: %v", err)
		}
		if !same(normDesign(*d), normDesign(*d2)) {
			t.Fatalf("design changed in a round trip:\n %#v\n %#v", d, d2)
		}
	})
}

// FuzzDecodeResult is FuzzDecodeDesign for results.
func FuzzDecodeResult(f *testing.F) {
	ok, err := schema.EncodeResult(validResult())
	if err != nil {
		f.Fatal(err)
	}
	lost, err := schema.EncodeResult(validLost())
	if err != nil {
		f.Fatal(err)
	}
	fuzzSeeds(f, ok, lost)
	f.Fuzz(func(t *testing.T, data []byte) {
		var r *schema.Result
		err := skipKnownPanic(t, func() (err error) { r, err = schema.DecodeResult(data); return err })
		if err != nil {
			if !errors.Is(err, schema.ErrMalformed) && !errors.Is(err, schema.ErrVersion) && !errors.Is(err, schema.ErrInvalid) {
				t.Fatalf("error %v wraps none of the sentinels", err)
			}
			return
		}
		again, err := schema.EncodeResult(r)
		if err != nil {
			t.Fatalf("accepted result does not encode: %v", err)
		}
		r2, err := schema.DecodeResult(again)
		if err != nil {
			t.Fatalf("re-encoded result does not decode: %v", err)
		}
		if !same(normResult(*r), normResult(*r2)) {
			t.Fatalf("result changed in a round trip:\n %#v\n %#v", r, r2)
		}
	})
}

// The node fields are optional on the wire, which is why they came without
// a new schema version: a result without them (written before they
// existed, or by a worker that does not know them) decodes with them
// unset, and a decoder that does not know them skips them, as it skips
// any key it does not know.
func TestResultNodeFieldsOptional(t *testing.T) {
	t.Parallel()
	keys := func(t *testing.T, r *schema.Result) map[string]any {
		t.Helper()
		b, err := schema.EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := msgpack.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	plain := keys(t, validResult())
	for _, k := range []string{"gpu_uuid", "exit", "signal"} {
		if _, ok := plain[k]; ok {
			t.Errorf("a result without %s writes the key", k)
		}
	}
	m := keys(t, nodeResult())
	if exit := reflect.ValueOf(m["exit"]); !exit.CanInt() || exit.Int() != 0 || m["gpu_uuid"] != nodeResult().GPUUUID {
		t.Errorf("exit %#v gpu_uuid %#v; exit 0 must be written, not omitted", m["exit"], m["gpu_uuid"])
	}
	killed := validResult()
	killed.Status, killed.Fitness, killed.Signal = schema.StatusError, schema.InfeasibleFitness, "SIGKILL"
	if m := keys(t, killed); m["signal"] != "SIGKILL" || m["exit"] != nil {
		t.Errorf("signal %#v exit %#v, want SIGKILL and no exit", m["signal"], m["exit"])
	}

	old, err := schema.DecodeResult(mustMarshal(t, plain))
	if err != nil || old.Exit != nil || old.Signal != "" || old.GPUUUID != "" {
		t.Fatalf("result without the node fields: %+v, %v; want them unset", old, err)
	}
	newer := with(keys(t, nodeResult()), "a_later_field", map[string]any{"x": 1})
	r, err := schema.DecodeResult(mustMarshal(t, newer))
	if err != nil || r.Exit == nil || *r.Exit != 0 {
		t.Fatalf("result with a key this build does not know: %+v, %v; want it decoded, the key skipped", r, err)
	}
}

func TestExtendRoundTrip(t *testing.T) {
	t.Parallel()
	e := &schema.Extend{Run: "r1", Budget: 80, TimeBudget: 2 * time.Hour, Sent: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	b, err := schema.EncodeExtend(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeExtend(b)
	if err != nil || got.V != schema.Version || got.Budget != 80 || got.TimeBudget != 2*time.Hour || !got.Sent.Equal(e.Sent) {
		t.Fatalf("DecodeExtend = %+v, %v; want %+v", got, err, e)
	}
	for name, bad := range map[string]*schema.Extend{
		"no limit":               {Run: "r1"},
		"a negative budget":      {Run: "r1", Budget: -1},
		"a negative time":        {Run: "r1", TimeBudget: -time.Second},
		"a run that is no token": {Run: "r 1", Budget: 5},
	} {
		if _, err := schema.EncodeExtend(bad); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}
