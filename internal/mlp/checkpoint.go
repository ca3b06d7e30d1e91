package mlp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
)

// ErrCheckpoint is wrapped by the reason EvaluateFrom gives for not
// inheriting from a parent checkpoint it could not decode: one that is not
// this package's encoding, of an unknown version, truncated or corrupt.
var ErrCheckpoint = errors.New("mlp: bad checkpoint")

// MaxCheckpointSize bounds the encoding of a checkpoint, in bytes. Every
// net of at most MaxParams parameters encodes well within it, and a longer
// input is refused before it is parsed, so a caller can bound what it
// reads from a file by it.
const MaxCheckpointSize = 1 << 20

// The checkpoint encoding, little-endian throughout:
//
//	magic    "EVOQMLP" and a version byte (checkpointVersion)
//	count    uint32, the number of tensors
//	tensors  count times: name length (uint8), name, rank (uint8, 1 or 2),
//	         rank uint32 dimensions, then their product float64 values
//	crc      uint32, CRC-32C of every byte before it
//
// The version byte lets a later encoding be told from this one rather
// than misread; the checksum catches what the size and shape checks let
// through (flipped bits in the values). The worker checks a parent's
// SHA-256 against what its parent stored, but that proves only that the
// bytes arrived intact, not that an mlp run wrote them.
const (
	checkpointMagic   = "EVOQMLP"
	checkpointVersion = 1
	// headerSize is the magic, version and count; trailerSize the CRC.
	headerSize  = len(checkpointMagic) + 1 + 4
	trailerSize = 4
	// maxNameLen bounds a tensor's name; "layer" and a layer index of any
	// net within MaxParams and ".w" fit with room to spare.
	maxNameLen = 32
)

// castagnoli is the CRC-32C table of the trailer.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// tensor is one named array of a checkpoint: a layer's weights (rank 2,
// out×in, row-major) or biases (rank 1).
type tensor struct {
	name  string
	shape []int
	data  []float64
}

// Tensor names: hidden layer i is "layer<i>.w" and "layer<i>.b"; the
// output layer is "output.w" and "output.b", apart from the hidden ones,
// so that a child with a layer more or fewer than its parent still
// inherits the parent's output layer when its input width matches.
const (
	outputName = "output"
	weightsSfx = ".w"
	biasesSfx  = ".b"
)

// layerName is the name prefix of layer i of n.
func (n *net) layerName(i int) string {
	if i == len(n.layers)-1 {
		return outputName
	}
	return "layer" + strconv.Itoa(i)
}

// tensors lists n's weights and biases as a checkpoint holds them. The
// slices alias the net's.
func (n *net) tensors() []tensor {
	ts := make([]tensor, 0, 2*len(n.layers))
	for i := range n.layers {
		l := &n.layers[i]
		name := n.layerName(i)
		ts = append(ts,
			tensor{name: name + weightsSfx, shape: []int{l.out, l.in}, data: l.w},
			tensor{name: name + biasesSfx, shape: []int{l.out}, data: l.b})
	}
	return ts
}

// encodeCheckpoint returns n's checkpoint.
func encodeCheckpoint(n *net) []byte {
	ts := n.tensors()
	size := headerSize + trailerSize
	for _, t := range ts {
		size += 2 + len(t.name) + 4*len(t.shape) + 8*len(t.data)
	}
	b := make([]byte, 0, size)
	b = append(b, checkpointMagic...)
	b = append(b, checkpointVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ts)))
	for _, t := range ts {
		b = append(b, byte(len(t.name)))
		b = append(b, t.name...)
		b = append(b, byte(len(t.shape)))
		for _, d := range t.shape {
			b = binary.LittleEndian.AppendUint32(b, uint32(d))
		}
		for _, v := range t.data {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeCheckpoint parses a checkpoint. Whatever b holds, it returns an
// error wrapping ErrCheckpoint rather than panicking, and allocates no
// more than b's length and MaxParams values.
func decodeCheckpoint(b []byte) ([]tensor, error) {
	body, err := checkFrame(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	ts, err := parseTensors(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return ts, nil
}

// checkFrame checks b's size, magic, version and checksum, and returns
// what lies between the header's magic and version and the trailer.
func checkFrame(b []byte) ([]byte, error) {
	switch {
	case len(b) > MaxCheckpointSize:
		return nil, fmt.Errorf("%d bytes, over the limit of %d", len(b), MaxCheckpointSize)
	case len(b) < len(checkpointMagic) || string(b[:len(checkpointMagic)]) != checkpointMagic:
		return nil, errors.New("not an mlp checkpoint (no magic header)")
	case len(b) < headerSize+trailerSize:
		return nil, fmt.Errorf("truncated at %d bytes", len(b))
	case b[len(checkpointMagic)] != checkpointVersion:
		return nil, fmt.Errorf("version %d, want %d", b[len(checkpointMagic)], checkpointVersion)
	}
	end := len(b) - trailerSize
	if got, want := crc32.Checksum(b[:end], castagnoli), binary.LittleEndian.Uint32(b[end:]); got != want {
		return nil, fmt.Errorf("checksum %08x, want %08x: truncated or corrupt", got, want)
	}
	return b[len(checkpointMagic)+1 : end], nil
}

// parseTensors reads the tensor count and the tensors of a checkpoint's
// body, which must hold nothing else.
func parseTensors(body []byte) ([]tensor, error) {
	r := reader{b: body}
	count := r.u32()
	// Every tensor holds at least one value, so a count over MaxParams is
	// corrupt; refusing it first bounds the slice allocated for it.
	if count > MaxParams {
		return nil, fmt.Errorf("%d tensors, more than MaxParams", count)
	}
	ts := make([]tensor, 0, count)
	seen := make(map[string]bool, count)
	total := 0
	for i := range int(count) {
		t, err := r.tensor(MaxParams - total)
		if err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		if seen[t.name] {
			return nil, fmt.Errorf("tensor %d: %q repeated", i, t.name)
		}
		seen[t.name] = true
		total += len(t.data)
		ts = append(ts, t)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%d bytes after the last tensor", len(r.b))
	}
	return ts, nil
}

// errShort is a reader's error once it has read past its end.
var errShort = errors.New("ends inside its tensors")

// reader consumes a checkpoint's body. Once a read runs past the end, it
// and every later read return zeros and err is set.
type reader struct {
	b   []byte
	err error
}

// take returns the next n bytes, or nil past the end.
func (r *reader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errShort
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u8() int {
	if p := r.take(1); p != nil {
		return int(p[0])
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

// tensor reads one tensor of at most limit values.
func (r *reader) tensor(limit int) (tensor, error) {
	var t tensor
	nameLen := r.u8()
	if nameLen == 0 || nameLen > maxNameLen {
		return t, r.or(fmt.Errorf("name of %d bytes, want 1 to %d", nameLen, maxNameLen))
	}
	t.name = string(r.take(nameLen))
	rank := r.u8()
	if rank != 1 && rank != 2 {
		return t, r.or(fmt.Errorf("%q: rank %d, want 1 or 2", t.name, rank))
	}
	t.shape = make([]int, rank)
	size := 1
	for i := range t.shape {
		d := r.u32()
		// Both dimensions at most limit keep size below 2^64 before it is
		// compared with limit.
		if d < 1 || d > uint32(limit) {
			return t, r.or(fmt.Errorf("%q: dimension %d, want 1 to %d", t.name, d, limit))
		}
		t.shape[i] = int(d)
		size *= int(d)
	}
	if size > limit {
		return t, fmt.Errorf("%q: %d values, more than MaxParams in all", t.name, size)
	}
	raw := r.take(8 * size)
	if raw == nil {
		return t, r.err
	}
	t.data = make([]float64, size)
	for i := range t.data {
		v := math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return t, fmt.Errorf("%q: value %d is %v", t.name, i, v)
		}
		t.data[i] = v
	}
	return t, nil
}

// or returns the reader's error when a read ran past the end, err if not:
// a field read as zero past the end is the truncation's fault, not a bad
// value's.
func (r *reader) or(err error) error {
	if r.err != nil {
		return r.err
	}
	return err
}

// inherit copies into n every layer of ts whose weights and biases both
// have the name and shape of n's, and returns the number of values copied.
// A layer is inherited whole or not at all: a parent's biases mean little
// without the weights they were trained with, and a layer whose input
// width changed has the biases' shape still.
func (n *net) inherit(ts []tensor) int {
	byName := make(map[string]*tensor, len(ts))
	for i := range ts {
		byName[ts[i].name] = &ts[i]
	}
	copied := 0
	mine := n.tensors()
	for i := 0; i < len(mine); i += 2 {
		w, b := byName[mine[i].name], byName[mine[i+1].name]
		if !sameShape(w, &mine[i]) || !sameShape(b, &mine[i+1]) {
			continue
		}
		copied += copy(mine[i].data, w.data) + copy(mine[i+1].data, b.data)
	}
	return copied
}

// sameShape says whether parent is present and shaped like mine.
func sameShape(parent, mine *tensor) bool {
	if parent == nil || len(parent.shape) != len(mine.shape) {
		return false
	}
	for i, d := range parent.shape {
		if d != mine.shape[i] {
			return false
		}
	}
	return true
}
