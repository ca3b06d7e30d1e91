package runstate

import (
	"testing"

	"github.com/evoq/evoq/schema"
)

// A genome has one key whatever its numbers' Go types, as the stream
// decodes them; the fold remembers the last SeenWindow counted designs'
// genomes and forgets older ones, and a design counted twice is
// remembered until its last copy leaves the window.
func TestFoldSeen(t *testing.T) {
	t.Parallel()
	a := map[string]any{"units": int64(16), "lr": 0.5, "act": "relu", "layers": []any{map[string]any{"u": int8(3)}}}
	b := map[string]any{"act": "relu", "lr": 0.5, "units": 16.0, "layers": []any{map[string]any{"u": uint64(3)}}}
	if GenomeKey(a) != GenomeKey(b) {
		t.Fatal("one genome with other number types has another key")
	}
	for _, other := range []map[string]any{
		{"units": int64(17), "lr": 0.5, "act": "relu", "layers": []any{map[string]any{"u": 3}}},
		{"units": "16", "lr": 0.5, "act": "relu", "layers": []any{map[string]any{"u": 3}}},
		{"units": int64(16), "lr": 0.5, "act": "relu", "layers": []any{map[string]any{"u": 3}, map[string]any{"u": 3}}},
		{"units": int64(16), "lr": 0.5, "act": "relu"},
	} {
		if GenomeKey(a) == GenomeKey(other) {
			t.Fatalf("%v and %v share a key", a, other)
		}
	}
	f := NewFold(NewTally("t", SeenWindow+10, Rules{}), 1, 5, ReplaceWorst)
	f.TrackSeen()
	g := func(i int) map[string]any { return map[string]any{"x": int64(i)} }
	key := func(i int) uint64 { return GenomeKey(g(i)) }
	apply := func(seq int, genome map[string]any) {
		res := result(uint64(seq), schema.StatusOK, float64(seq))
		res.Design.Genome = genome
		if v := f.Apply(res, nil); v != Counted {
			t.Fatalf("seq %d: %v", seq, v)
		}
	}
	apply(1, g(0))
	apply(2, g(0)) // counted twice
	for i := 1; i < SeenWindow; i++ {
		apply(i+2, g(i))
	}
	// The window holds seqs 2..SeenWindow+1: genome 0 once, 1..SeenWindow-1.
	if !f.Seen(key(0)) || !f.Seen(key(SeenWindow-1)) || f.Seen(key(SeenWindow)) {
		t.Fatalf("seen 0 %v, %d %v, %d %v; want true, true, false", f.Seen(key(0)), SeenWindow-1, f.Seen(key(SeenWindow-1)), SeenWindow, f.Seen(key(SeenWindow)))
	}
	apply(SeenWindow+2, g(SeenWindow))
	if f.Seen(key(0)) || !f.Seen(key(1)) || !f.Seen(key(SeenWindow)) {
		t.Fatalf("after one more: seen 0 %v, 1 %v, %d %v; want false, true, true", f.Seen(key(0)), f.Seen(key(1)), SeenWindow, f.Seen(key(SeenWindow)))
	}
}

// BenchmarkGenomeKey hashes the genome of the mlp space's size, once per
// design and result of a novel run.
func BenchmarkGenomeKey(b *testing.B) {
	g := map[string]any{"layers": []any{map[string]any{"units": 64.0, "act": "relu"}, map[string]any{"units": 32.0, "act": "tanh"}},
		"lr": 0.01, "batch": 32.0, "dropout": 0.1, "optimizer": "adam", "weight_decay": 1e-4}
	b.ReportAllocs()
	for b.Loop() {
		GenomeKey(g)
	}
}

// pinGenomes are genomes of every kind of value a genome holds.
func pinGenomes() []map[string]any {
	return []map[string]any{
		{},
		{"lr": 0.01, "units": 64, "act": "relu", "bn": true, "skip": false, "none": nil},
		{"layers": []any{map[string]any{"units": 64.0, "act": "relu"}, map[string]any{"units": 32.0}}, "b": int64(3), "c": float32(0.5)},
		{"a": map[string]any{"z": "1", "y": 1.0}, "odd": struct{ X int }{7}},
	}
}

// TestGenomeKeyPinned pins the keys: a cheaper computation must give the
// same ones.
func TestGenomeKeyPinned(t *testing.T) {
	want := []uint64{0x8f44b07b5901a25, 0x80058102d38b268, 0xbe74ecddbfca656a, 0xeaf896ca799de1f5}
	for i, g := range pinGenomes() {
		if got := GenomeKey(g); got != want[i] {
			t.Errorf("GenomeKey(%v) = %#x, want %#x", g, got, want[i])
		}
	}
}
