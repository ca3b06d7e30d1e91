package bench

import (
	"strings"
	"testing"
)

// The nb201 verdicts are judged on the table without noise: each target
// fails on its own figure, and without the baselines the comparisons with
// them are not met.
func TestNB201Verdicts(t *testing.T) {
	t.Parallel()
	const opt = 47.3111
	seeds := func(at100, at300 []float64) [][]float64 {
		out := make([][]float64, len(at100))
		for i := range at100 {
			out[i] = []float64{at100[i], at300[i]}
		}
		return out
	}
	good := seeds([]float64{46.5, 46.6, 46.7, 46.8, 46.9}, []float64{opt, opt, opt, 47.25, opt})
	tpe := seeds([]float64{46.0, 46.4, 46.5, 46.6, 46.6}, []float64{46, 47, 47, 47, 47}) // median 46.5
	rnd := seeds([]float64{45.0, 45.5, 45.6, 45.7, 46.0}, []float64{46, 46, 46, 46, 46}) // median 45.6
	tests := []struct {
		name   string
		evoq   [][]float64
		noBase bool
		want   [4]bool // all within, at optimum, median vs tpe, worst vs random
	}{
		{"all met", good, false, [4]bool{true, true, true, true}},
		{"a seed stuck", seeds([]float64{46.5, 46.6, 46.7, 46.8, 46.9}, []float64{opt, opt, opt, 47.0, opt}), false, [4]bool{false, true, true, true}},
		{"too few at the optimum", seeds([]float64{46.5, 46.6, 46.7, 46.8, 46.9}, []float64{opt, opt, 47.25, 47.25, opt}), false, [4]bool{true, false, true, true}},
		{"below tpe at 100", seeds([]float64{45.9, 46.0, 46.1, 46.8, 46.9}, []float64{opt, opt, opt, opt, opt}), false, [4]bool{true, true, false, true}},
		{"worst below random's median", seeds([]float64{45.5, 46.6, 46.7, 46.8, 46.9}, []float64{opt, opt, opt, opt, opt}), false, [4]bool{true, true, true, false}},
		{"no baselines", good, true, [4]bool{true, true, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			searches := []*NB201Search{{Name: "evoq", Best: tt.evoq}}
			if !tt.noBase {
				searches = append(searches, &NB201Search{Name: "optuna tpe", Best: tpe}, &NB201Search{Name: "optuna random", Best: rnd})
			}
			n := &NB201{Settings: NB201Settings{Budgets: []int{100, 300}, Seeds: 5, Noises: []float64{0}, Baselines: !tt.noBase},
				Optimum: opt, Tables: []*NB201Table{{Noise: 0, Searches: searches}}}
			n.summarize()
			got := [4]bool{n.AllWithin, n.AtOptimum, n.MedianVsTPE, n.WorstVsRandom}
			if got != tt.want || n.Met != (tt.want == [4]bool{true, true, true, true}) {
				t.Fatalf("verdicts %v met %v, want %v", got, n.Met, tt.want)
			}
			var b strings.Builder
			n.Print(&b, false)
			out := b.String()
			if missed := strings.Contains(out, "MISSED") || strings.Contains(out, "not judged"); !strings.Contains(out, "@300") || missed == n.Met {
				t.Fatalf("printed:\n%s", out)
			}
		})
	}
}
