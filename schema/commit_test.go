package schema_test

import (
	"errors"
	"testing"

	"github.com/evoq/evoq/schema"
)

func TestCheckpointName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, design string
		progress, ok bool
	}{
		{"r-1", "r-1", false, true},
		{"r-12.progress", "r-12", true, true},
		{"r-a-3", "", false, false}, // of run r-a, not r
		{"r-0", "", false, false},
		{"r-01", "", false, false},
		{"r-1.progress.progress", "", false, false},
		{"r-1.ckpt", "", false, false},
		{"x-1", "", false, false},
		{"r-", "", false, false},
		{".progress", "", false, false},
	} {
		d, p, ok := schema.CheckpointName("r", tc.name)
		if d != tc.design || p != tc.progress || ok != tc.ok {
			t.Errorf("CheckpointName(r, %q) = %q, %v, %v; want %q, %v, %v", tc.name, d, p, ok, tc.design, tc.progress, tc.ok)
		}
	}
}

func TestCommitRoundTrip(t *testing.T) {
	t.Parallel()
	c := &schema.CheckpointCommit{Run: "r", Name: "r-2.progress", NUID: "abc", Size: 5, Chunks: 1, Digest: "SHA-256=xyz"}
	b, err := schema.EncodeCommit(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeCommit(b)
	if err != nil || *got != *c {
		t.Fatalf("DecodeCommit = %+v, %v; want %+v", got, err, c)
	}
	for _, bad := range []schema.CheckpointCommit{
		{Run: "r", Name: "s-2", NUID: "abc", Size: 5, Chunks: 1, Digest: "SHA-256=xyz"},
		{Run: "r", Name: "r-2", NUID: "a.b", Size: 5, Chunks: 1, Digest: "SHA-256=xyz"},
		{Run: "r", Name: "r-2", NUID: "abc", Size: 5, Chunks: 0, Digest: "SHA-256=xyz"},
		{Run: "r", Name: "r-2", NUID: "abc", Size: 5, Chunks: 1, Digest: "sha256:00"},
	} {
		if _, err := schema.EncodeCommit(&bad); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("EncodeCommit(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}
