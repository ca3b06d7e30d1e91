package schema_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/evoq/evoq/schema"
	"github.com/vmihailenco/msgpack/v5"
)

// A result echoes the design a worker received byte for byte, whoever
// encoded it and however (here with unsorted keys and integers in their
// shortest unsigned form, as other encoders write them), and decodes to
// the same design.
func TestResultEchoesDesignAsReceived(t *testing.T) {
	d := validDesign()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true) // not how schema.Marshal writes them
	if err := enc.Encode(d); err != nil {
		t.Fatal(err)
	}
	received := buf.Bytes()
	if own, _ := schema.EncodeDesign(validDesign()); bytes.Equal(own, received) {
		t.Fatal("the foreign encoding is evoq's own: the test would prove nothing")
	}
	got, err := schema.DecodeReceived(received)
	if err != nil {
		t.Fatal(err)
	}
	r := validResult()
	r.Design = *got
	b, err := schema.EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, received) {
		t.Error("the result does not hold the design's bytes as received")
	}
	back, err := schema.DecodeResult(b)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(got)
	have, _ := json.Marshal(back.Design)
	if !bytes.Equal(want, have) {
		t.Errorf("the echoed design decodes to\n%s\nwant\n%s", have, want)
	}

	// A design decoded without keeping its bytes is encoded from its
	// fields, as evoq writes designs.
	plain, err := schema.DecodeDesign(received)
	if err != nil {
		t.Fatal(err)
	}
	r.Design = *plain
	if b, err = schema.EncodeResult(r); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, received) {
		t.Error("a design decoded by DecodeDesign was echoed as received")
	}
}
