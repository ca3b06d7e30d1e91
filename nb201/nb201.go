// Package nb201 is the NAS-Bench-201 landscape on ImageNet16-120: the
// test accuracy, after 200 epochs of training, of every one of the 15,625
// cells of its topology search space (6 edges, each one of 5 operations).
//
// The table is nb201-imagenet16-120.csv (arch,test_accuracy), from
// NAS-Bench-201 (Dong and Yang, "NAS-Bench-201: Extending the Scope of
// Reproducible Neural Architecture Search", ICLR 2020), extended as the
// topology search space of NATS-Bench (Dong, Liu, Musial and Gabrys,
// TPAMI 2021). Both projects' code (github.com/D-X-Y/NAS-Bench-201,
// github.com/D-X-Y/NATS-Bench) is under the MIT licence; the benchmark
// files are released with the papers through those repositories, with no
// other licence stated. The file here is the published accuracies as
// given, with Unix line ends.
//
// It lets the search be measured on a real architecture landscape at no
// cost: an evaluation is a lookup.
package nb201

import (
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/evoq/evoq/space"
)

//go:embed nb201-imagenet16-120.csv
var tableCSV string

// TableCSV is the table's text, arch,test_accuracy, as embedded; a
// baseline in another language reads the same file.
func TableCSV() string { return tableCSV }

// Ops are the operations an edge may hold.
var Ops = []string{"none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3"}

// Edges are the genome's genes, one per edge of the cell: edge_J_I is the
// edge from node I to node J. The arch string lists them in this order:
// |op~0|+|op~0|op~1|+|op~0|op~1|op~2|.
var Edges = []string{"edge_1_0", "edge_2_0", "edge_2_1", "edge_3_0", "edge_3_1", "edge_3_2"}

// Size is the number of cells in the space and in the table.
const Size = 15625

// SpaceName is the search space's name.
const SpaceName = "nb201"

// SpaceYAML is the search space: each edge a choice of Ops.
func SpaceYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nparams:\n", SpaceName)
	for _, e := range Edges {
		fmt.Fprintf(&b, "  %s: {type: choice, values: [%s]}\n", e, strings.Join(Ops, ", "))
	}
	return b.String()
}

// Space is the parsed SpaceYAML.
func Space() (*space.Space, error) { return space.Parse([]byte(SpaceYAML())) }

type table struct {
	acc     map[string]float64
	optimum float64
	best    string
	err     error
}

var load = sync.OnceValue(func() *table {
	t := &table{acc: make(map[string]float64, Size), optimum: math.Inf(-1)}
	lines := strings.Split(strings.TrimSpace(tableCSV), "\n")
	if len(lines) != Size+1 || strings.TrimSpace(lines[0]) != "arch,test_accuracy" {
		t.err = fmt.Errorf("nb201: the embedded table has %d lines and header %q, want %d and arch,test_accuracy", len(lines), lines[0], Size+1)
		return t
	}
	for i, l := range lines[1:] {
		arch, v, ok := strings.Cut(strings.TrimSpace(l), ",")
		acc, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			t.err = fmt.Errorf("nb201: the embedded table's line %d, %q, is not arch,accuracy", i+2, l)
			return t
		}
		t.acc[arch] = acc
		if acc > t.optimum {
			t.optimum, t.best = acc, arch
		}
	}
	if len(t.acc) != Size {
		t.err = fmt.Errorf("nb201: the embedded table has %d distinct cells, want %d", len(t.acc), Size)
	}
	return t
})

// Optimum is the best test accuracy in the table, and its arch.
func Optimum() (float64, string) {
	t := load()
	return t.optimum, t.best
}

// Arch is the arch string of genome g: each edge's op, in the table's
// notation.
func Arch(g map[string]any) (string, error) {
	ops := make([]string, len(Edges))
	for i, e := range Edges {
		op, ok := g[e].(string)
		if !ok || !validOp(op) {
			return "", fmt.Errorf("nb201: gene %s is %v, want one of %s", e, g[e], strings.Join(Ops, ", "))
		}
		ops[i] = op
	}
	return fmt.Sprintf("|%s~0|+|%s~0|%s~1|+|%s~0|%s~1|%s~2|", ops[0], ops[1], ops[2], ops[3], ops[4], ops[5]), nil
}

func validOp(op string) bool {
	for _, o := range Ops {
		if o == op {
			return true
		}
	}
	return false
}

// Accuracy is the test accuracy of arch, in percent.
func Accuracy(arch string) (float64, error) {
	t := load()
	if t.err != nil {
		return 0, t.err
	}
	acc, ok := t.acc[arch]
	if !ok {
		return 0, fmt.Errorf("nb201: no cell %q in the table", arch)
	}
	return acc, nil
}

// GenomeAccuracy is Accuracy of genome g's arch.
func GenomeAccuracy(g map[string]any) (float64, error) {
	arch, err := Arch(g)
	if err != nil {
		return 0, err
	}
	return Accuracy(arch)
}
