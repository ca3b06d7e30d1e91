package runstate

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// SeenWindow is how many of the last counted designs the fold remembers
// the genomes of (Fold.Seen): every design of a run of that budget or
// less, at 8 bytes and a map entry each, so that a run of millions of
// designs holds a bounded set.
const SeenWindow = 10000

// GenomeKey is a 64-bit FNV-1a hash of genome g in a canonical form:
// map keys sorted, every number as its float64 value, so that a genome
// decoded from the stream, whose integers may come back as any integer
// type, and the same genome freshly made have one key. It is computed for
// every design and result of a novel run, so it writes straight into the
// hash rather than through an encoder.
func GenomeKey(g map[string]any) uint64 {
	h := uint64(fnvOffset)
	return hashValue(h, g)
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

func hashNumber(h uint64, f float64) uint64 {
	var b [9]byte
	b[0] = 'n'
	binary.BigEndian.PutUint64(b[1:], math.Float64bits(f))
	return hashBytes(h, b[:])
}

// hashValue hashes v, tagged by its kind so that "1" and 1 differ.
func hashValue(h uint64, v any) uint64 {
	switch x := v.(type) {
	case nil:
		return hashBytes(h, []byte{'z'})
	case string:
		h = hashBytes(h, []byte{'s'})
		h = hashString(h, x)
		return hashBytes(h, []byte{0})
	case bool:
		if x {
			return hashBytes(h, []byte{'t'})
		}
		return hashBytes(h, []byte{'f'})
	case map[string]any:
		// A genome's maps are small: their keys are sorted on the stack,
		// not in a slice made for each map.
		var buf [16]string
		keys := buf[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		h = hashBytes(h, []byte{'{'})
		for _, k := range keys {
			h = hashString(h, k)
			h = hashBytes(h, []byte{':'})
			h = hashValue(h, x[k])
		}
		return hashBytes(h, []byte{'}'})
	case []any:
		h = hashBytes(h, []byte{'['})
		for _, e := range x {
			h = hashValue(h, e)
		}
		return hashBytes(h, []byte{']'})
	}
	if f, ok := number(v); ok {
		return hashNumber(h, f)
	}
	// Any other type (none comes from a space or the wire): its printed form.
	h = hashBytes(h, []byte{'?'})
	return hashString(h, fmt.Sprint(v))
}

// number is v as a float64 when v is any Go number.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

// seenSet is the genome keys of the last SeenWindow counted designs, in
// the order they counted.
type seenSet struct {
	count map[uint64]int
	ring  []uint64
	next  int
}

func (s *seenSet) add(k uint64) {
	if s.count == nil {
		s.count = map[uint64]int{}
	}
	if len(s.ring) < SeenWindow {
		s.ring = append(s.ring, k)
	} else {
		old := s.ring[s.next]
		if s.count[old]--; s.count[old] == 0 {
			delete(s.count, old)
		}
		s.ring[s.next] = k
		s.next = (s.next + 1) % SeenWindow
	}
	s.count[k]++
}

func (s *seenSet) has(k uint64) bool { return s.count[k] > 0 }
