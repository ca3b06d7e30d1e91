package schema

import (
	"strconv"
	"strings"
)

// CommitPrefix + run ID is where a worker of run asks the run's controller,
// with a NATS request, to commit a checkpoint whose chunks it uploaded to
// the object store (CheckpointCommit, answered by CheckpointCommitted).
// Workers may publish chunks but never an object's metadata: whoever may
// publish metadata may mark any object deleted, or point it at other
// bytes.
const CommitPrefix = "evoq.commit."

// CommitSubject is where the workers of run ask its controller to commit
// a checkpoint.
func CommitSubject(run string) string { return CommitPrefix + run }

// ProgressSuffix ends the name of a design's saved progress in the
// checkpoint store: <design>.progress, which an interrupted attempt of the
// design resumes from. A design's checkpoint proper is named by its ID
// alone.
const ProgressSuffix = ".progress"

// ProgressName is the store's name of design's saved progress.
func ProgressName(design string) string { return design + ProgressSuffix }

// CheckpointName splits name, a name in run's checkpoint store, into the
// design it belongs to and whether it is the design's saved progress. ok
// is false for a name of neither form: <run>-<seq> or
// <run>-<seq>.progress, with seq >= 1 in decimal without leading zeros.
func CheckpointName(run, name string) (design string, progress, ok bool) {
	design, progress = strings.CutSuffix(name, ProgressSuffix)
	s, isRun := strings.CutPrefix(design, run+"-")
	if !isRun || s == "" || s[0] == '0' {
		return "", false, false
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 || DesignID(run, seq) != design {
		return "", false, false
	}
	return design, progress, true
}

// CheckpointCommit asks the controller of Run to publish the metadata of
// object Name, whose Chunks chunks (Size bytes in all, SHA-256 Digest in
// the object store's form SHA-256=<base64url>) the worker stored under
// $O.<bucket>.C.<NUID>.
type CheckpointCommit struct {
	V      int    `msgpack:"v" json:"v"`
	Run    string `msgpack:"run" json:"run"`
	Name   string `msgpack:"name" json:"name"`
	NUID   string `msgpack:"nuid" json:"nuid"`
	Size   uint64 `msgpack:"size" json:"size"`
	Chunks uint32 `msgpack:"chunks" json:"chunks"`
	Digest string `msgpack:"digest" json:"digest"`
	Worker string `msgpack:"worker,omitempty" json:"worker,omitempty"`
}

// Validate checks every field of c.
func (c *CheckpointCommit) Validate() error {
	if err := ValidToken(c.Run); err != nil {
		return invalid("checkpoint commit", "run", "%v", err)
	}
	if _, _, ok := CheckpointName(c.Run, c.Name); !ok {
		return invalid("checkpoint commit", "name", "%q: want a design ID of run %s, or one with %s", c.Name, c.Run, ProgressSuffix)
	}
	if err := ValidToken(c.NUID); err != nil {
		return invalid("checkpoint commit", "nuid", "%v", err)
	}
	if (c.Size == 0) != (c.Chunks == 0) {
		return invalid("checkpoint commit", "chunks", "%d chunks for %d bytes", c.Chunks, c.Size)
	}
	if !strings.HasPrefix(c.Digest, "SHA-256=") {
		return invalid("checkpoint commit", "digest", "%q: want SHA-256=<base64url>", c.Digest)
	}
	return nil
}

// EncodeCommit stamps the schema version on c, validates and encodes it.
func EncodeCommit(c *CheckpointCommit) ([]byte, error) {
	c.V = Version
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return Marshal(c)
}

// DecodeCommit decodes and validates a CheckpointCommit.
func DecodeCommit(b []byte) (*CheckpointCommit, error) {
	c := new(CheckpointCommit)
	if err := unmarshal(b, c, "checkpoint commit"); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// CheckpointCommitted is the controller's answer to a CheckpointCommit:
// Error is empty when the object's metadata is stored, else why it was
// refused (a refusal is final: asking again is refused again).
type CheckpointCommitted struct {
	V     int    `msgpack:"v" json:"v"`
	Name  string `msgpack:"name" json:"name"`
	Error string `msgpack:"error,omitempty" json:"error,omitempty"`
}

// EncodeCommitted stamps the schema version on c and encodes it.
func EncodeCommitted(c *CheckpointCommitted) ([]byte, error) {
	c.V = Version
	return Marshal(c)
}

// DecodeCommitted decodes a CheckpointCommitted.
func DecodeCommitted(b []byte) (*CheckpointCommitted, error) {
	c := new(CheckpointCommitted)
	if err := unmarshal(b, c, "checkpoint committed"); err != nil {
		return nil, err
	}
	return c, nil
}
