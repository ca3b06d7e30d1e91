package space_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/evoq/evoq/space"
)

func ExampleParse() {
	s, err := space.Parse([]byte(`
name: mlp
params:
  layers:
    type: list
    min: 1
    max: 4
    item:
      units: {type: int, min: 2, max: 64}
      activation: {type: choice, values: [relu, tanh, sigmoid]}
  lr: {type: float, min: 0.001, max: 0.5, log: true}
  batch: {type: choice, values: [8, 16, 32]}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s)
	fmt.Println(s.Columns())

	r := rand.New(rand.NewPCG(1, 2))
	parent := s.Random(r)
	child, _ := s.Mutate(parent, r)
	_, err = s.Validate(child)
	fmt.Println("child valid:", err == nil)

	// A genome decoded from JSON: numbers are float64, lists are []any.
	g, err := s.Validate(map[string]any{
		"layers": []any{map[string]any{"units": 32.0, "activation": "relu"}},
		"lr":     0.01,
		"batch":  16.0,
	})
	fmt.Printf("%T %v %v\n", g["batch"], g["batch"], err)

	_, err = s.Validate(map[string]any{
		"layers": []any{map[string]any{"units": 90, "activation": "relu"}},
		"lr":     0.01,
		"batch":  16,
	})
	fmt.Println(err)
	// Output:
	// mlp: 3 params (layers list[1..4] of {units int[2..64], activation choice(3)}, lr float[0.001..0.5] log, batch choice(3))
	// [layers lr batch]
	// child valid: true
	// int64 16 <nil>
	// invalid genome: layers[0].units: 90 above max 64
}
