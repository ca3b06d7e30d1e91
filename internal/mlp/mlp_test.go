package mlp

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// genome builds a genome whose hidden layers all share one activation.
func genome(units []int, act string, lr float64, epochs int, momentum float64, batch int) map[string]any {
	layers := make([]any, len(units))
	for i, u := range units {
		layers[i] = map[string]any{"units": u, "activation": act}
	}
	return map[string]any{"layers": layers, "lr": lr, "epochs": epochs, "momentum": momentum, "batch": batch}
}

// goodGenome is a hand-picked design that solves the spirals.
func goodGenome() map[string]any { return genome([]int{32, 32}, "relu", 0.02, 200, 0.9, 8) }

// smallGenome is a quick design for tests that only need some training.
func smallGenome() map[string]any { return genome([]int{8, 8}, "tanh", 0.05, 10, 0.5, 16) }

func TestDatasetSplits(t *testing.T) {
	t.Parallel()
	train, val := splits()
	for _, tc := range []struct {
		name string
		d    dataset
		size int
	}{{"train", train, trainSize}, {"validation", val, valSize}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.d.size() != tc.size || len(tc.d.x) != tc.size*inputDim {
				t.Fatalf("size %d with %d features, want %d", tc.d.size(), len(tc.d.x), tc.size)
			}
			counts := make([]int, numClasses)
			for _, y := range tc.d.y {
				counts[y]++
			}
			if counts[0] != counts[1] {
				t.Errorf("unbalanced classes %v", counts)
			}
			for _, v := range tc.d.x {
				if math.IsNaN(v) || math.Abs(v) > 1.5*spiralScale {
					t.Fatalf("feature %v out of range", v)
				}
			}
		})
	}
	if slices.Equal(train.x[:valSize*inputDim], val.x) {
		t.Error("validation split repeats the training split")
	}
}

func TestDatasetDeterministic(t *testing.T) {
	t.Parallel()
	a, b := makeSpirals(trainSize, dataSeed), makeSpirals(trainSize, dataSeed)
	if !slices.Equal(a.x, b.x) || !slices.Equal(a.y, b.y) {
		t.Fatal("same seed produced different data")
	}
	train, _ := splits()
	if !slices.Equal(a.x, train.x) {
		t.Fatal("training split differs from a fresh draw with its seed")
	}
}

func TestEvaluateDeterministic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		g    map[string]any
	}{
		{"small tanh", smallGenome()},
		{"relu", genome([]int{16, 8}, "relu", 0.1, 15, 0.8, 8)},
		{"sigmoid with l2", withKey(genome([]int{12}, "sigmoid", 0.3, 15, 0.2, 32), "l2", 1e-3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			first := mustEvaluate(t, tc.g)
			if second := mustEvaluate(t, tc.g); first != second {
				t.Fatalf("results differ: %+v vs %+v", first, second)
			}
		})
	}
}

// withKey returns g with key set to v.
func withKey(g map[string]any, key string, v any) map[string]any {
	g[key] = v
	return g
}

// mustEvaluate evaluates g and fails the test on error.
func mustEvaluate(t *testing.T, g map[string]any) Result {
	t.Helper()
	res, err := Evaluate(context.Background(), g)
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return res
}

func TestGoodBeatsTrivial(t *testing.T) {
	t.Parallel()
	good := mustEvaluate(t, goodGenome())
	trivial := mustEvaluate(t, genome([]int{2}, "sigmoid", 0.001, 20, 0, 32))
	t.Logf("good %+v, trivial %+v", good, trivial)
	if good.Accuracy < 0.95 {
		t.Errorf("good design reached only %.3f", good.Accuracy)
	}
	if good.Accuracy < trivial.Accuracy+0.25 {
		t.Errorf("good %.3f does not clearly beat trivial %.3f", good.Accuracy, trivial.Accuracy)
	}
	if good.Params != 1218 || good.Epochs != 200 {
		t.Errorf("good design: %d params, %d epochs; want 1218, 200", good.Params, good.Epochs)
	}
}

func TestInfeasible(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		units  []int
		params int
	}{
		{"just over", []int{61, 44}, MaxParams + 1},
		{"wide", []int{64, 64, 64}, 8642},
		{"deep", slices.Repeat([]int{20}, 10), 3882},
		{"enormous", slices.Repeat([]int{math.MaxInt32}, 4), math.MaxInt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			res, err := Evaluate(context.Background(), genome(tc.units, "relu", 0.05, 1_000_000, 0.9, 1))
			if !errors.Is(err, ErrInfeasible) {
				t.Fatalf("got %v, want ErrInfeasible", err)
			}
			if d := time.Since(start); d > 100*time.Millisecond {
				t.Errorf("took %v", d)
			}
			if res.Params != tc.params || !strings.Contains(err.Error(), strconv.Itoa(tc.params)) {
				t.Errorf("params %d, error %q; want count %d", res.Params, err, tc.params)
			}
		})
	}
}

func TestParamCount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		units []int
		want  int
	}{
		{[]int{2}, 3*2 + 3*2},
		{[]int{32, 32}, 3*32 + 33*32 + 33*2},
		{[]int{28, 94}, MaxParams},
	} {
		c, err := parseGenome(genome(tc.units, "tanh", 0.1, 1, 0, 8))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.params(); got != tc.want {
			t.Errorf("%v: %d parameters, want %d", tc.units, got, tc.want)
		}
	}
	if _, err := Evaluate(context.Background(), genome([]int{28, 94}, "relu", 0.05, 1, 0, 32)); err != nil {
		t.Errorf("design of exactly MaxParams: %v", err)
	}
}

func TestBadGenomes(t *testing.T) {
	t.Parallel()
	layer := func(k string, v any) map[string]any {
		return withKey(genome([]int{8}, "relu", 0.05, 1, 0, 16), "layers", []any{map[string]any{"units": 8, "activation": "relu", k: v}})
	}
	without := func(key string) map[string]any {
		g := smallGenome()
		delete(g, key)
		return g
	}
	for _, tc := range []struct {
		name string
		g    map[string]any
		want string
	}{
		{"nil genome", nil, `mlp: bad genome: missing key "layers"`},
		{"missing layers", without("layers"), `missing key "layers"`},
		{"missing lr", without("lr"), `missing key "lr"`},
		{"missing epochs", without("epochs"), `missing key "epochs"`},
		{"missing momentum", without("momentum"), `missing key "momentum"`},
		{"missing batch", without("batch"), `missing key "batch"`},
		{"missing units", withKey(smallGenome(), "layers", []any{map[string]any{"activation": "tanh"}}), `mlp: bad genome: layers[0]: missing key "units"`},
		{"missing activation", withKey(smallGenome(), "layers", []any{map[string]any{"units": 3}}), `missing key "activation"`},
		{"unknown activation", layer("activation", "swish"), `layers[0]: activation: unknown "swish"`},
		{"activation not a string", layer("activation", 3), `layers[0]: activation: want a string, got int`},
		{"zero layers", withKey(smallGenome(), "layers", []any{}), "at least one hidden layer"},
		{"layers not a list", withKey(smallGenome(), "layers", "32,32"), "want a list of mappings, got string"},
		{"layer not a mapping", withKey(smallGenome(), "layers", []any{32}), "layers[0]: want a mapping, got int"},
		{"units a string", layer("units", "32"), `layers[0]: units: want an integer, got string`},
		{"units fractional", layer("units", 3.5), `layers[0]: units: want an integer, got float64 (3.5)`},
		{"units zero", layer("units", 0), `layers[0]: units: must be at least 1`},
		{"units too large", layer("units", int64(1)<<40), "out of range"},
		{"lr negative", withKey(smallGenome(), "lr", -0.1), `lr: must be positive`},
		{"lr NaN", withKey(smallGenome(), "lr", math.NaN()), `lr: want a finite number`},
		{"lr a string", withKey(smallGenome(), "lr", "0.1"), `lr: want a number, got string`},
		{"momentum one", withKey(smallGenome(), "momentum", 1.0), `momentum: must be in [0, 1)`},
		{"epochs zero", withKey(smallGenome(), "epochs", 0), `epochs: must be at least 1`},
		{"epochs a bool", withKey(smallGenome(), "epochs", true), `epochs: want an integer, got bool`},
		{"batch huge uint", withKey(smallGenome(), "batch", uint64(math.MaxUint64)), `batch: want an integer, got uint64`},
		{"l2 negative", withKey(smallGenome(), "l2", -1e-3), `l2: must be non-negative`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Evaluate(context.Background(), tc.g)
			if err == nil || errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestContextCancel(t *testing.T) {
	t.Parallel()
	endless := genome([]int{32, 32}, "relu", 0.01, 10_000_000, 0.5, 8)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"already cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
		{"deadline during training", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, err := Evaluate(ctx, endless)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("stopped only after %v", d)
			}
		})
	}
}

func TestLooseNumericTypes(t *testing.T) {
	t.Parallel()
	want := mustEvaluate(t, smallGenome())
	typed := func(units, epochs, batch any) map[string]any {
		l := map[string]any{"units": units, "activation": "tanh"}
		return map[string]any{"layers": []map[string]any{l, l}, "lr": 0.05, "epochs": epochs, "momentum": 0.5, "batch": batch}
	}
	for _, tc := range []struct {
		name string
		g    map[string]any
	}{
		{"int64", typed(int64(8), int64(10), int64(16))},
		{"uint64", typed(uint64(8), uint64(10), uint64(16))},
		{"float64", typed(8.0, 10.0, 16.0)},
		{"small kinds", typed(int8(8), uint16(10), int32(16))},
		{"uint and float32", typed(uint(8), float32(10), uint8(16))},
		{"json.Number", typed(json.Number("8"), json.Number("10"), json.Number("16"))},
		{"integer momentum", withKey(typed(8, 10, 16), "momentum", json.Number("0.5"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := mustEvaluate(t, tc.g); got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
	if res := mustEvaluate(t, withKey(smallGenome(), "lr", 1)); res.Epochs != 10 {
		t.Errorf("integer lr: %+v", res)
	}
}

func TestDivergenceStaysFinite(t *testing.T) {
	t.Parallel()
	res := mustEvaluate(t, genome([]int{64, 32}, "relu", 1e6, 50, 0.99, 8))
	if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) || res.Accuracy < 0 || res.Accuracy > 1 {
		t.Fatalf("non-finite or invalid result %+v", res)
	}
	if res.Epochs >= 50 {
		t.Errorf("diverged training ran all %d epochs", res.Epochs)
	}
}

// TestTrainingStepDoesNotAllocate is not parallel: testing.AllocsPerRun
// refuses to run in parallel tests.
func TestTrainingStepDoesNotAllocate(t *testing.T) {
	c, err := parseGenome(genome([]int{16, 16}, "tanh", 0.05, 1, 0.9, 8))
	if err != nil {
		t.Fatal(err)
	}
	train, _ := splits()
	n := newNet(&c, rand.New(rand.NewPCG(1, 2)))
	allocs := testing.AllocsPerRun(100, func() {
		for i := range c.batch {
			n.learn(train.row(i), train.y[i])
		}
		n.step(&c, c.batch)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per minibatch", allocs)
	}
}

func TestDefaultSpace(t *testing.T) {
	t.Parallel()
	space := string(DefaultSpace)
	for _, want := range []string{"name: mlp-spirals", "params:", "layers:", "type: list", "units:", "activation:", "lr:", "epochs:", "momentum:", "batch:", "l2:"} {
		if !strings.Contains(space, want) {
			t.Errorf("DefaultSpace lacks %q", want)
		}
	}
}

func BenchmarkEvaluate(b *testing.B) {
	g := genome([]int{24, 24}, "tanh", 0.05, 100, 0.9, 16)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Evaluate(context.Background(), g); err != nil {
			b.Fatal(err)
		}
	}
}
