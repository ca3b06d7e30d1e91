package mlp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// mustEvaluateFrom evaluates g from parent and fails the test on error.
func mustEvaluateFrom(t testing.TB, g map[string]any, parent []byte) (Result, []byte) {
	t.Helper()
	res, ckpt, err := EvaluateFrom(context.Background(), g, parent)
	if err != nil {
		t.Fatalf("EvaluateFrom: %v", err)
	}
	return res, ckpt
}

// parentCheckpoint trains g from scratch and returns its checkpoint.
func parentCheckpoint(t testing.TB, g map[string]any) []byte {
	t.Helper()
	_, ckpt := mustEvaluateFrom(t, g, nil)
	if ckpt == nil {
		t.Fatal("no checkpoint")
	}
	return ckpt
}

func TestCheckpointRoundTrip(t *testing.T) {
	t.Parallel()
	c, err := parseGenome(genome([]int{5, 3, 4}, "relu", 0.1, 1, 0, 8))
	if err != nil {
		t.Fatal(err)
	}
	n := newNet(&c, rand.New(rand.NewPCG(3, 4)))
	for i := range n.layers {
		for j := range n.layers[i].b {
			n.layers[i].b[j] = float64(i) + float64(j)/8 // biases start at zero
		}
	}
	b := encodeCheckpoint(n)
	got, err := decodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		shape []int
	}{
		{"layer0.w", []int{5, 2}}, {"layer0.b", []int{5}},
		{"layer1.w", []int{3, 5}}, {"layer1.b", []int{3}},
		{"layer2.w", []int{4, 3}}, {"layer2.b", []int{4}},
		{"output.w", []int{2, 4}}, {"output.b", []int{2}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].name != w.name || !slices.Equal(got[i].shape, w.shape) {
			t.Errorf("tensor %d: %s %v, want %s %v", i, got[i].name, got[i].shape, w.name, w.shape)
		}
	}
	for i, tt := range n.tensors() {
		if !slices.Equal(got[i].data, tt.data) {
			t.Errorf("%s: values differ after the round trip", tt.name)
		}
	}
	fresh := newNet(&c, rand.New(rand.NewPCG(5, 6)))
	if copied := fresh.inherit(got); copied != c.params() {
		t.Fatalf("inherited %d of %d", copied, c.params())
	}
	if again := encodeCheckpoint(fresh); !bytes.Equal(again, b) {
		t.Error("a net loaded from a checkpoint encodes differently")
	}
}

func TestEvaluateFromNoParent(t *testing.T) {
	t.Parallel()
	want := mustEvaluate(t, smallGenome())
	for _, tc := range []struct {
		name   string
		parent []byte
	}{{"nil", nil}, {"empty", []byte{}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, ckpt := mustEvaluateFrom(t, smallGenome(), tc.parent)
			if res != want {
				t.Fatalf("got %+v, want Evaluate's %+v", res, want)
			}
			ts, err := decodeCheckpoint(ckpt)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, tt := range ts {
				total += len(tt.data)
			}
			if len(ts) != 6 || total != res.Params {
				t.Errorf("%d tensors of %d values, want 6 of %d", len(ts), total, res.Params)
			}
		})
	}
}

func TestInheritIdentical(t *testing.T) {
	t.Parallel()
	parentGenome := genome([]int{8, 8}, "tanh", 0.05, 15, 0.5, 16)
	parentRes, parent := mustEvaluateFrom(t, parentGenome, nil)

	// A learning rate too small to move any weight makes the child's
	// training a no-op: if every value was copied, the child is its
	// parent, bit for bit.
	frozen := withKey(genome([]int{8, 8}, "tanh", 1e-300, 1, 0, 16), "l2", 0.0)
	res, ckpt := mustEvaluateFrom(t, frozen, parent)
	if !res.Inherited || res.InheritedParams != res.Params || res.InheritReason != "" {
		t.Fatalf("got %+v, want all %d parameters inherited", res, res.Params)
	}
	if !bytes.Equal(ckpt, parent) || res.Accuracy != parentRes.Accuracy {
		t.Errorf("an untrained child differs from its parent: accuracy %v, parent's %v", res.Accuracy, parentRes.Accuracy)
	}

	mutant := genome([]int{8, 8}, "relu", 0.2, 5, 0.9, 8)
	first, ckpt1 := mustEvaluateFrom(t, mutant, parent)
	second, ckpt2 := mustEvaluateFrom(t, mutant, parent)
	if first != second || !bytes.Equal(ckpt1, ckpt2) {
		t.Errorf("inheriting from the same parent twice: %+v then %+v", first, second)
	}
	if !first.Inherited || first.InheritedParams != first.Params {
		t.Errorf("mutant of the same shape: %+v, want all %d parameters inherited", first, first.Params)
	}
	if scratch := mustEvaluate(t, mutant); scratch.Accuracy == first.Accuracy && scratch.Loss == first.Loss {
		t.Error("the inherited weights changed nothing")
	}
}

func TestInheritResized(t *testing.T) {
	t.Parallel()
	parent := parentCheckpoint(t, genome([]int{8, 8}, "tanh", 0.05, 5, 0.5, 16))
	const (
		first  = 8*2 + 8 // layer0 of the parent
		second = 8*8 + 8 // layer1
		output = 2*8 + 2
	)
	for _, tc := range []struct {
		name  string
		units []int
		want  int
	}{
		{"same shape", []int{8, 8}, first + second + output},
		{"first layer wider", []int{12, 8}, output}, // layer1 is 8×12 now
		{"last layer narrower", []int{8, 5}, first},
		{"layer appended", []int{8, 8, 8}, first + second + output},
		{"layer appended of another width", []int{8, 8, 3}, first + second},
		{"layer removed", []int{8}, first + output},
		{"nothing alike", []int{3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, _ := mustEvaluateFrom(t, genome(tc.units, "tanh", 0.05, 2, 0.5, 16), parent)
			if res.InheritedParams != tc.want || res.Inherited != (tc.want > 0) {
				t.Fatalf("got %+v, want %d parameters inherited", res, tc.want)
			}
			if tc.want == 0 && !strings.Contains(res.InheritReason, "no layer") {
				t.Errorf("reason %q", res.InheritReason)
			}
			if tc.want > 0 && res.InheritReason != "" {
				t.Errorf("inherited with reason %q", res.InheritReason)
			}
		})
	}
}

// frame wraps a checkpoint body (what follows the version byte) in the
// magic, a version and a valid checksum.
func frame(version byte, body []byte) []byte {
	b := append([]byte(checkpointMagic), version)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// body builds a checkpoint body from its parts: ints go as uint32,
// bytes and strings as themselves, float64s as their bits.
func body(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch x := p.(type) {
		case int:
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		case byte:
			b = append(b, x)
		case string:
			b = append(b, x...)
		case float64:
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
	}
	return b
}

// name is a tensor's name as the encoding prefixes it.
func name(s string) []any { return []any{byte(len(s)), s} }

// bias is a tensor of one value.
func bias(s string, v float64) []any { return append(name(s), byte(1), 1, v) }

func join(parts ...[]any) []any { return slices.Concat(parts...) }

// zeros is n values of 0.
func zeros(n int) []any { return slices.Repeat([]any{0.0}, n) }

func TestCheckpointCorrupt(t *testing.T) {
	t.Parallel()
	valid := parentCheckpoint(t, smallGenome())
	flipped := slices.Clone(valid)
	flipped[len(flipped)/2] ^= 0x10
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"one byte", []byte{0}, "no magic"},
		{"text", []byte("layer0.w 1 2 3\n"), "no magic"},
		{"another format", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"), "no magic"},
		{"magic only", []byte(checkpointMagic), "truncated"},
		{"header only", valid[:headerSize], "truncated"},
		{"cut short", valid[:len(valid)-9], "checksum"},
		{"one bit flipped", flipped, "checksum"},
		{"over the size limit", append(slices.Clone(valid), make([]byte, MaxCheckpointSize)...), "over the limit"},
		{"other version", frame(2, body(0)), "version 2"},
		{"no count", frame(1, nil), "truncated at 12 bytes"},
		{"too many tensors", frame(1, body(math.MaxUint32)), "tensors, more than MaxParams"},
		{"missing tensors", frame(1, body(join([]any{3}, bias("output.b", 1))...)), "ends inside"},
		{"empty name", frame(1, body(1, byte(0), byte(1), 1, 0.0)), "name of 0 bytes"},
		{"long name", frame(1, body(join([]any{1}, name(strings.Repeat("x", 40)), []any{byte(1), 1, 0.0})...)), "name of 40 bytes"},
		{"rank 3", frame(1, body(join([]any{1}, name("a"), []any{byte(3), 1, 1, 1, 0.0})...)), "rank 3"},
		{"zero dimension", frame(1, body(join([]any{1}, name("a"), []any{byte(1), 0})...)), "dimension 0"},
		{"huge dimension", frame(1, body(join([]any{1}, name("a"), []any{byte(2), math.MaxUint32, math.MaxUint32})...)), "dimension 4294967295"},
		{"over MaxParams", frame(1, body(join([]any{1}, name("a"), []any{byte(2), 2000, 2000})...)), "more than MaxParams"},
		{"over MaxParams in all", frame(1, body(join([]any{2}, name("a"), []any{byte(1), 2000}, zeros(2000), name("b"), []any{byte(1), 1001})...)), "dimension 1001, want 1 to 1000"},
		{"values missing", frame(1, body(join([]any{1}, name("a"), []any{byte(1), 3, 0.0})...)), "ends inside"},
		{"NaN", frame(1, body(join([]any{1}, bias("a", math.NaN()))...)), "is NaN"},
		{"infinity", frame(1, body(join([]any{1}, bias("a", math.Inf(-1)))...)), "is -Inf"},
		{"repeated name", frame(1, body(join([]any{2}, bias("a", 1), bias("a", 2))...)), `"a" repeated`},
		{"trailing bytes", frame(1, body(join([]any{1}, bias("a", 1), []any{byte(0)})...)), "1 bytes after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeCheckpoint(tc.b)
			if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrCheckpoint saying %q", err, tc.want)
			}
			// A bad parent is a reason, never an error: the design trains
			// from scratch, exactly as without a parent.
			res, _ := mustEvaluateFrom(t, smallGenome(), tc.b)
			if res.Inherited || res.InheritedParams != 0 || res.InheritReason != err.Error() {
				t.Errorf("got %+v, want from scratch with reason %q", res, err)
			}
			res.InheritReason = ""
			if want := mustEvaluate(t, smallGenome()); res != want {
				t.Errorf("got %+v, want Evaluate's %+v", res, want)
			}
		})
	}
}

// TestCheckpointNeverPanics decodes every prefix of a valid checkpoint
// and thousands of random corruptions of it, checksum fixed so that the
// parser sees them, and wants an error or a checkpoint within the limits
// from each, never a panic.
func TestCheckpointNeverPanics(t *testing.T) {
	t.Parallel()
	valid := parentCheckpoint(t, genome([]int{3, 2}, "relu", 0.05, 1, 0, 32))
	for n := range len(valid) {
		if _, err := decodeCheckpoint(valid[:n]); !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("prefix of %d bytes: got %v", n, err)
		}
	}
	rng := rand.New(rand.NewPCG(11, 12))
	accepted := 0
	for range 20_000 {
		b := slices.Clone(valid[len(checkpointMagic)+1 : len(valid)-trailerSize])
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] = byte(rng.Uint32())
		}
		if rng.IntN(4) == 0 {
			b = b[:rng.IntN(len(b))]
		}
		ts, err := decodeCheckpoint(frame(checkpointVersion, b))
		if err != nil {
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("error %v does not wrap ErrCheckpoint", err)
			}
			continue
		}
		accepted++
		total := 0
		for _, tt := range ts {
			total += len(tt.data)
		}
		if total > MaxParams {
			t.Fatalf("accepted %d values", total)
		}
	}
	t.Logf("%d of 20000 corruptions decoded (changed values or names)", accepted)
}

// FuzzDecodeCheckpoint decodes its input as it is and framed with a
// valid checksum, so that the parser behind the checksum is fuzzed too.
func FuzzDecodeCheckpoint(f *testing.F) {
	valid := parentCheckpoint(f, genome([]int{3}, "tanh", 0.05, 1, 0, 32))
	f.Add(valid)
	f.Add(valid[len(checkpointMagic)+1 : len(valid)-trailerSize])
	f.Add(body(join([]any{1}, bias("a", 1))...))
	f.Add([]byte(checkpointMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, frame(checkpointVersion, b)} {
			ts, err := decodeCheckpoint(in)
			if err != nil {
				if !errors.Is(err, ErrCheckpoint) {
					t.Fatalf("error %v does not wrap ErrCheckpoint", err)
				}
				continue
			}
			total := 0
			for _, tt := range ts {
				total += len(tt.data)
			}
			if total > MaxParams {
				t.Fatalf("accepted %d values", total)
			}
		}
	})
}

func TestCheckpointSizeBound(t *testing.T) {
	t.Parallel()
	// Layers one unit wide give the most tensors, and so the most
	// overhead, per parameter: 3 + 2·1496 + 4 parameters in 2·1498
	// tensors.
	deep := genome(slices.Repeat([]int{1}, 1497), "tanh", 0.05, 1, 0, 32)
	res, ckpt := mustEvaluateFrom(t, deep, nil)
	t.Logf("%d parameters in %d bytes", res.Params, len(ckpt))
	if res.Params != MaxParams-1 || len(ckpt) > MaxCheckpointSize/4 {
		t.Fatalf("%d parameters in %d bytes, want %d in at most a quarter of %d", res.Params, len(ckpt), MaxParams-1, MaxCheckpointSize)
	}
	if _, err := decodeCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
}

func TestDivergedStoresNoCheckpoint(t *testing.T) {
	t.Parallel()
	res, ckpt := mustEvaluateFrom(t, genome([]int{64, 32}, "relu", 1e6, 50, 0.99, 8), nil)
	if res.Epochs >= 50 || ckpt != nil {
		t.Fatalf("diverged design: %+v with a checkpoint of %d bytes", res, len(ckpt))
	}
}

func TestEvaluateFromErrors(t *testing.T) {
	t.Parallel()
	parent := parentCheckpoint(t, smallGenome())
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		g    map[string]any
		want error
	}{
		{"infeasible", context.Background(), genome([]int{64, 64, 64}, "relu", 0.05, 1, 0, 8), ErrInfeasible},
		{"cancelled", cancelled, smallGenome(), context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ckpt, err := EvaluateFrom(tc.ctx, tc.g, parent)
			if !errors.Is(err, tc.want) || ckpt != nil {
				t.Fatalf("got %v with %d bytes, want %v and no checkpoint", err, len(ckpt), tc.want)
			}
		})
	}
	if _, _, err := EvaluateFrom(context.Background(), nil, parent); err == nil || !strings.Contains(err.Error(), "bad genome") {
		t.Errorf("nil genome: %v", err)
	}
}

// TestInheritanceHelps checks, on one design, that what is inherited is
// worth having: a child that trains briefly from its parent's weights
// beats the same child trained as briefly from scratch. The margin is
// wide (see TestInheritanceFigures for the measured figures) so that a
// platform's rounding cannot close it.
func TestInheritanceHelps(t *testing.T) {
	t.Parallel()
	parent := parentCheckpoint(t, genome([]int{16, 16}, "relu", 0.02, 60, 0.9, 8))
	child := genome([]int{16, 16}, "relu", 0.03, 20, 0.9, 8)
	scratch := mustEvaluate(t, child)
	inherited, _ := mustEvaluateFrom(t, child, parent)
	t.Logf("child accuracy from scratch %.3f, from its parent %.3f", scratch.Accuracy, inherited.Accuracy)
	if inherited.Accuracy < scratch.Accuracy+0.1 {
		t.Errorf("from its parent %.3f, from scratch %.3f: inheritance gains under 0.1", inherited.Accuracy, scratch.Accuracy)
	}
}
