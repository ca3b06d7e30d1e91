package nb201

import (
	"math/rand/v2"
	"testing"
)

// TestTable checks the embedded table: every cell of the space is in it
// once, and the optimum is the published 47.31.
func TestTable(t *testing.T) {
	t.Parallel()
	if err := load().err; err != nil {
		t.Fatal(err)
	}
	opt, arch := Optimum()
	if opt != 47.3111 || arch != "|nor_conv_1x1~0|+|nor_conv_1x1~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|" {
		t.Fatalf("optimum %v at %s, want 47.3111", opt, arch)
	}
	sp, err := Space()
	if err != nil {
		t.Fatal(err)
	}
	// Every genome of the space has an accuracy: all 5^6 of them.
	seen := map[string]bool{}
	var walk func(g map[string]any, i int)
	walk = func(g map[string]any, i int) {
		if i == len(Edges) {
			if _, err := sp.Validate(g); err != nil {
				t.Fatal(err)
			}
			a, err := Arch(g)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Accuracy(a); err != nil {
				t.Fatal(err)
			}
			seen[a] = true
			return
		}
		for _, op := range Ops {
			g[Edges[i]] = op
			walk(g, i+1)
		}
	}
	walk(map[string]any{}, 0)
	if len(seen) != Size {
		t.Fatalf("%d distinct archs, want %d", len(seen), Size)
	}
	r := rand.New(rand.NewPCG(1, 2))
	if _, err := GenomeAccuracy(sp.Random(r)); err != nil {
		t.Fatal(err)
	}
	if _, err := GenomeAccuracy(map[string]any{"edge_1_0": "conv"}); err == nil {
		t.Fatal("a genome with an unknown op has an accuracy")
	}
}
