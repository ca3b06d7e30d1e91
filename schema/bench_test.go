package schema

import (
	"testing"
	"time"
)

// benchResult is a result as a worker stores it for the default mlp space.
func benchResult() *Result {
	now := time.Now()
	return &Result{Run: "bench", DesignID: DesignID("bench", 1234), Status: StatusOK, Fitness: 0.93,
		Design: Design{Run: "bench", ID: DesignID("bench", 1234), Seq: 1234, Origin: OriginMutant, Created: now,
			Parents: []string{DesignID("bench", 77)},
			Genome: map[string]any{"epochs": int64(40), "lr": 0.01, "l2": 1e-4, "batch": int64(32),
				"momentum": 0.9, "layers": []any{
					map[string]any{"units": int64(32), "activation": "relu"},
					map[string]any{"units": int64(16), "activation": "tanh"}}}},
		Worker: "node17", Host: "node17", Slot: 3, GPU: "3", Attempt: 1, Start: now, Stop: now.Add(time.Second),
		Gap: time.Millisecond}
}

func BenchmarkEncodeResult(b *testing.B) {
	r := benchResult()
	for b.Loop() {
		if _, err := EncodeResult(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResult(b *testing.B) {
	data, err := EncodeResult(benchResult())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodeResult(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeDesign(b *testing.B) {
	d := benchResult().Design
	for b.Loop() {
		if _, err := EncodeDesign(&d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeDesign(b *testing.B) {
	d := benchResult().Design
	data, err := EncodeDesign(&d)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodeDesign(data); err != nil {
			b.Fatal(err)
		}
	}
}
