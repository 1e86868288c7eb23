package delta

import (
	"encoding/binary"
	"fmt"
	"index/suffixarray"
)

// suffixArray is the suffix array of old as bsdiff's search wants it:
// len(old)+1 entries, the first the empty suffix, then every suffix in
// lexical order.
//
// The standard library's index/suffixarray sorts with SA-IS (linear
// time: about 0.5 s for a 9 MB termd, where the qsufsort bsdiff ships
// took 6.5 s, and 35 s of the race step's delta e2e test for two
// patches). It does not hand out its array, but its Index.Write is a
// persistent serialization (Read takes it back on any Go version): the
// text's length, the text, then the array in chunks of uvarints, each
// chunk headed by its size. saReader decodes that stream as it is
// written, without a copy of it.
func suffixArray(old []byte) []int32 {
	r := &saReader{I: make([]int32, 1, len(old)+1)}
	r.I[0] = int32(len(old))
	if err := suffixarray.New(old).Write(r); err != nil {
		panic(err) // saReader's own, below: the format changed
	}
	if len(r.I) != len(old)+1 || r.state != saChunkHead || len(r.head) != 0 || r.shift != 0 {
		panic(fmt.Sprintf("delta: index/suffixarray wrote %d entries for %d bytes", len(r.I)-1, len(old)))
	}
	return r.I
}

// saReader decodes index/suffixarray's Index.Write stream (suffixarray.go:
// writeInt, writeSlice): a varint in MaxVarintLen64 bytes (the text's
// length), the text, then chunks of a varint in MaxVarintLen64 bytes
// (the chunk's size, its header included) and that many uvarints.
type saReader struct {
	I     []int32
	state int
	head  []byte // a header's bytes so far
	left  int    // the text's or the chunk's bytes still to come
	x     uint64 // the uvarint being decoded
	shift uint
}

const (
	saLength = iota
	saText
	saChunkHead
	saChunk
)

func (r *saReader) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		switch r.state {
		case saLength, saChunkHead:
			k := min(binary.MaxVarintLen64-len(r.head), len(p))
			r.head, p = append(r.head, p[:k]...), p[k:]
			if len(r.head) < binary.MaxVarintLen64 {
				continue
			}
			v, w := binary.Varint(r.head)
			r.head = r.head[:0]
			if w <= 0 || v < 0 || (r.state == saChunkHead && v < binary.MaxVarintLen64) {
				return 0, fmt.Errorf("delta: index/suffixarray's serialization is not the one this reads (a header of %d)", v)
			}
			if r.state == saLength {
				r.left, r.state = int(v), saText
			} else {
				r.left, r.state = int(v)-binary.MaxVarintLen64, saChunk
			}
		case saText:
			k := min(r.left, len(p))
			r.left, p = r.left-k, p[k:]
		case saChunk:
			k := min(r.left, len(p))
			for _, b := range p[:k] {
				r.x |= uint64(b&0x7f) << r.shift
				if b < 0x80 {
					if len(r.I) == cap(r.I) || r.x >= uint64(cap(r.I)-1) {
						return 0, fmt.Errorf("delta: index/suffixarray wrote an entry %d past the text's %d bytes", r.x, cap(r.I)-1)
					}
					r.I = append(r.I, int32(r.x))
					r.x, r.shift = 0, 0
				} else if r.shift += 7; r.shift > 35 {
					return 0, fmt.Errorf("delta: index/suffixarray wrote an entry of more than 32 bits")
				}
			}
			r.left, p = r.left-k, p[k:]
		}
		if r.left == 0 && (r.state == saText || r.state == saChunk) {
			r.state = saChunkHead
		}
	}
	return n, nil
}
