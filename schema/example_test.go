package schema_test

import (
	"fmt"
	"time"

	"github.com/evoq/evoq/schema"
)

func ExampleEncodeDesign() {
	d := &schema.Design{
		Run:     "demo",
		ID:      schema.DesignID("demo", 1),
		Seq:     1,
		Origin:  schema.OriginRandom,
		Genome:  map[string]any{"layers": []any{map[string]any{"units": int64(16), "activation": "relu"}}, "lr": 0.01},
		Created: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	data, err := schema.EncodeDesign(d)
	if err != nil {
		fmt.Println("encode:", err)
		return
	}
	got, err := schema.DecodeDesign(data)
	if err != nil {
		fmt.Println("decode:", err)
		return
	}
	layer := got.Genome["layers"].([]any)[0].(map[string]any)
	fmt.Println("subject:", schema.DesignSubject(got.Run))
	fmt.Println("id:", got.ID, "version:", got.V)
	fmt.Printf("units: %v (%T), lr: %v\n", layer["units"], layer["units"], got.Genome["lr"])
	fmt.Println("created:", got.Created.UTC().Format(time.RFC3339))

	d.Seq = 2 // the ID no longer matches
	_, err = schema.EncodeDesign(d)
	fmt.Println(err)
	// Output:
	// subject: evoq.design.demo
	// id: demo-1 version: 1
	// units: 16 (int64), lr: 0.01
	// created: 2024-01-02T03:04:05Z
	// invalid message: design: id: "demo-1", want "demo-2" for run "demo" seq 2
}
