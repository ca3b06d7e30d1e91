package schema

import (
	"encoding/hex"
	"strings"
)

// Checkpoint stores (Checkpoints.Store).
const (
	// CheckpointObject keeps checkpoints in the broker's JetStream object
	// store, bucket CheckpointBucket(run): workers move the bytes between
	// it and a local file, so no file system is shared.
	CheckpointObject = "object"
	// CheckpointDir keeps checkpoints as files under Checkpoints.Dir
	// (CheckpointDir/<run>/<design>.ckpt), a file system every worker
	// mounts at the same path; nothing moves over the broker.
	CheckpointDir = "dir"
)

// Which checkpoints outlive the run (Checkpoints.Keep). During the run the
// rule is the same for all three: a checkpoint lives while its design is in
// the pool or is the parent of a design in flight.
const (
	KeepBest = "best" // the best design's only (kept through the run)
	KeepPool = "pool" // the final pool's
	KeepAll  = "all"  // every one: nothing is ever deleted
)

// CheckpointBucket is the object store bucket of run's checkpoints; its
// stream is "OBJ_" + the bucket.
func CheckpointBucket(run string) string { return "evoq-ckpt-" + run }

// CheckpointSuffix ends the name of a checkpoint file in a shared
// directory: <dir>/<run>/<design><CheckpointSuffix>. Files being written
// end in CheckpointPartial instead and are never read.
const (
	CheckpointSuffix  = ".ckpt"
	CheckpointPartial = ".partial"
)

// Checkpoints are a run's checkpoint settings, recorded with the run so
// that its workers and any restarted controller use the same store.
type Checkpoints struct {
	// Store is CheckpointObject or CheckpointDir.
	Store string `msgpack:"store" json:"store"`
	// Dir is the shared directory of CheckpointDir.
	Dir string `msgpack:"dir,omitempty" json:"dir,omitempty"`
	// Max is the largest checkpoint stored, in bytes; a larger one is
	// refused (the design's result is kept, its checkpoint is not).
	Max int64 `msgpack:"max" json:"max"`
	// Keep is KeepBest, KeepPool or KeepAll.
	Keep string `msgpack:"keep" json:"keep"`
	// Inherit hands each mutant its parent's checkpoint to start from.
	Inherit bool `msgpack:"inherit,omitempty" json:"inherit,omitempty"`
}

// Validate checks every field of c.
func (c *Checkpoints) Validate() error {
	switch c.Store {
	case CheckpointObject:
	case CheckpointDir:
		if c.Dir == "" {
			return invalid("checkpoints", "dir", "missing for store %q", c.Store)
		}
	default:
		return invalid("checkpoints", "store", "%q: want %s or %s", c.Store, CheckpointObject, CheckpointDir)
	}
	if c.Max < 1 {
		return invalid("checkpoints", "max", "%d < 1", c.Max)
	}
	switch c.Keep {
	case KeepBest, KeepPool, KeepAll:
	default:
		return invalid("checkpoints", "keep", "%q: want %s, %s or %s", c.Keep, KeepBest, KeepPool, KeepAll)
	}
	return nil
}

// DigestPrefix starts every CheckpointRef.Digest: the SHA-256 of the
// checkpoint's bytes, in hex, follows.
const DigestPrefix = "sha256:"

// CheckpointRef names a stored checkpoint and what its bytes must be: a
// result says with it what its design stored, and a mutant of a run with
// inheritance says which checkpoint it starts from (Design.Inherit), so
// that the worker can tell a corrupt one.
type CheckpointRef struct {
	// Design is the ID of the design the checkpoint belongs to.
	Design string `msgpack:"design" json:"design"`
	Size   int64  `msgpack:"size" json:"size"`
	// Digest is DigestPrefix and the SHA-256 of the bytes, in hex.
	Digest string `msgpack:"digest" json:"digest"`
}

// Validate checks every field of c.
func (c *CheckpointRef) Validate() error {
	if c.Design == "" {
		return invalid("checkpoint", "design", "missing")
	}
	if c.Size < 0 {
		return invalid("checkpoint", "size", "%d < 0", c.Size)
	}
	h, ok := strings.CutPrefix(c.Digest, DigestPrefix)
	if _, err := hex.DecodeString(h); !ok || err != nil || len(h) != 64 {
		return invalid("checkpoint", "digest", "%q is not %s and 64 hex digits", c.Digest, DigestPrefix)
	}
	return nil
}
