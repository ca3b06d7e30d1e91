package mlp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/evoq/evoq/space"
)

var (
	inheritFigures  = flag.Bool("inherit", false, "measure what inheriting the parent's weights gains a mutant of the default space")
	inheritParents  = flag.Int("inherit.n", 30, "parents drawn by -inherit")
	inheritMutants  = flag.Int("inherit.mutants", 4, "mutants of each parent trained by -inherit")
	inheritLineages = flag.Int("inherit.lineages", 8, "(1+1) lineages evolved by -inherit, with inheritance and without")
	inheritGens     = flag.Int("inherit.gens", 25, "generations of each -inherit lineage")
	inheritSeed     = flag.Uint64("inherit.seed", 1, "seed of -inherit")
	inheritSpace    = flag.String("inherit.space", "", "YAML file of the space -inherit draws from (default: the default space)")
)

// TestInheritanceFigures reports, for random parents of the default space
// and their mutants (space.Mutate, as a run makes them), the mutants'
// accuracy trained from scratch and from the parent's weights, for the
// same training each; and the best accuracy of (1+1) lineages evolved
// with inheritance and without, for the same number of evaluations. It
// runs only with -inherit.
func TestInheritanceFigures(t *testing.T) {
	if !*inheritFigures {
		t.Skip("run with -inherit")
	}
	src := DefaultSpace
	if *inheritSpace != "" {
		var err error
		if src, err = os.ReadFile(*inheritSpace); err != nil {
			t.Fatal(err)
		}
	}
	sp, err := space.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(*inheritSeed, 0x1a4e))
	mutantFigures(t, sp, rng)
	lineageFigures(t, sp, rng)
}

// pair is one mutant's accuracy from scratch and from its parent.
type pair struct {
	scratch, inherited float64
	share              float64 // of its parameters inherited
}

// mutantFigures trains mutants of random parents both ways and logs the
// gains by what the mutation changed.
func mutantFigures(t *testing.T, sp *space.Space, rng *rand.Rand) {
	byKind := map[string][]pair{}
	var parentAcc []float64
	for range *inheritParents {
		g, res, ckpt := trainedParent(t, sp, rng)
		parentAcc = append(parentAcc, res.Accuracy)
		for range *inheritMutants {
			child, err := sp.Mutate(g, rng)
			if err != nil {
				t.Fatal(err)
			}
			scratch, err1 := Evaluate(context.Background(), child)
			inherited, _, err2 := EvaluateFrom(context.Background(), child, ckpt)
			if errors.Is(err1, ErrInfeasible) {
				continue
			}
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			p := pair{scratch.Accuracy, inherited.Accuracy, float64(inherited.InheritedParams) / float64(inherited.Params)}
			kind := mutationKind(g, child, p.share)
			byKind[kind] = append(byKind[kind], p)
			byKind["all"] = append(byKind["all"], p)
		}
	}
	t.Logf("parents: accuracy %s", summary(parentAcc))
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		t.Logf("%-22s %s", kind, pairSummary(byKind[kind]))
	}
}

// trainedParent draws feasible genomes until one trains without
// diverging, and returns it with its result and checkpoint.
func trainedParent(t *testing.T, sp *space.Space, rng *rand.Rand) (map[string]any, Result, []byte) {
	for {
		g := sp.Random(rng)
		res, ckpt, err := EvaluateFrom(context.Background(), g, nil)
		if errors.Is(err, ErrInfeasible) || ckpt == nil {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return g, res, ckpt
	}
}

// mutationKind names the key a mutation changed, and for the layers
// whether the network kept its shape.
func mutationKind(parent, child map[string]any, share float64) string {
	for _, k := range slices.Sorted(maps.Keys(child)) {
		if reflect.DeepEqual(parent[k], child[k]) {
			continue
		}
		if k != keyLayers {
			return k
		}
		if share == 1 {
			return "layers (activation)"
		}
		return "layers (shape)"
	}
	return "unchanged"
}

// pairSummary gives the mean accuracies, the mean gain and how often
// inheriting won, tied and lost.
func pairSummary(ps []pair) string {
	var s, i, share float64
	win, tie, loss := 0, 0, 0
	var gains []float64
	for _, p := range ps {
		s, i, share = s+p.scratch, i+p.inherited, share+p.share
		gains = append(gains, p.inherited-p.scratch)
		switch {
		case p.inherited > p.scratch:
			win++
		case p.inherited == p.scratch:
			tie++
		default:
			loss++
		}
	}
	n := float64(len(ps))
	return fmt.Sprintf("n %3d scratch %.3f inherited %.3f gain %+.3f (median %+.3f) won/tied/lost %d/%d/%d params inherited %.0f%%",
		len(ps), s/n, i/n, (i-s)/n, median(gains), win, tie, loss, 100*share/n)
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// lineageFigures evolves (1+1) lineages from the same random starts and
// with the same mutations, once training every mutant from scratch and
// once from its parent's weights, keeping the mutant when it is at least
// as accurate as its parent; and logs the best accuracy after each
// quarter of the generations.
func lineageFigures(t *testing.T, sp *space.Space, rng *rand.Rand) {
	quarters := [2][4][]float64{}
	for range *inheritLineages {
		start, _, _ := trainedParent(t, sp, rng)
		seed := rng.Uint64()
		for mode, inherit := range []bool{false, true} {
			best := lineage(t, sp, start, rand.New(rand.NewPCG(seed, 1)), inherit)
			for q := range quarters[mode] {
				quarters[mode][q] = append(quarters[mode][q], best[(q+1)*len(best)/4-1])
			}
		}
	}
	for mode, name := range []string{"from scratch", "inheriting"} {
		var b strings.Builder
		for q, accs := range quarters[mode] {
			fmt.Fprintf(&b, " gen %d: mean %.3f median %.3f;", (q+1)**inheritGens/4, mean(accs), median(accs))
		}
		t.Logf("(1+1) lineages, best so far, %s:%s", name, b.String())
	}
}

// lineage runs one (1+1) lineage for -inherit.gens generations and
// returns the best accuracy after each.
func lineage(t *testing.T, sp *space.Space, g map[string]any, rng *rand.Rand, inherit bool) []float64 {
	res, ckpt, err := EvaluateFrom(context.Background(), g, nil)
	if err != nil {
		t.Fatal(err)
	}
	best := make([]float64, 0, *inheritGens)
	for range *inheritGens {
		child, err := sp.Mutate(g, rng)
		if err != nil {
			t.Fatal(err)
		}
		var parent []byte
		if inherit {
			parent = ckpt
		}
		r, c, err := EvaluateFrom(context.Background(), child, parent)
		if err == nil && c != nil && r.Accuracy >= res.Accuracy {
			g, res, ckpt = child, r, c
		} else if err != nil && !errors.Is(err, ErrInfeasible) {
			t.Fatal(err)
		}
		best = append(best, res.Accuracy)
	}
	return best
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
