package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// LSN is a record's log sequence number: 1 for the first record ever
// appended, one more for each record after it. 0 means none.
type LSN uint64

const (
	headerSize = 24
	// MaxPayload is the largest record payload.
	MaxPayload = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends the frame of one record to buf. pcrc is the
// payload's CRC-32C (computed by the caller outside any lock).
func appendFrame(buf []byte, lsn LSN, batchOff uint32, pcrc uint32, payload []byte) []byte {
	// The header is written in place: a local array would escape to the
	// heap through crc32.Checksum (one allocation per record).
	off := len(buf)
	buf = append(buf, endMarker[:]...) // headerSize zero bytes, overwritten
	h := buf[off : off+headerSize]
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[4:12], uint64(lsn))
	binary.LittleEndian.PutUint32(h[12:16], batchOff)
	binary.LittleEndian.PutUint32(h[16:20], pcrc)
	binary.LittleEndian.PutUint32(h[20:24], crc32.Checksum(h[0:20], castagnoli))
	return append(buf, payload...)
}

// frame is one decoded frame.
type frame struct {
	lsn      LSN
	batchOff uint32
	payload  []byte // aliases the segment's bytes
	size     int    // header and payload
}

// frameError says why the bytes at an offset are not a valid frame.
type frameError struct {
	reason     string
	incomplete bool // the segment ends inside the frame
}

// decodeFrame decodes the frame at the start of b. It checks the header
// CRC before trusting the length, so a flipped bit in a length is a CRC
// error, not a frame running past the end.
func decodeFrame(b []byte) (frame, *frameError) {
	if len(b) < headerSize {
		return frame{}, &frameError{reason: fmt.Sprintf("incomplete header (%d of %d bytes)", len(b), headerSize), incomplete: true}
	}
	if got, want := crc32.Checksum(b[0:20], castagnoli), binary.LittleEndian.Uint32(b[20:24]); got != want {
		return frame{}, &frameError{reason: fmt.Sprintf("header CRC mismatch (stored %08x, computed %08x)", want, got)}
	}
	n := binary.LittleEndian.Uint32(b[0:4])
	if n > MaxPayload {
		return frame{}, &frameError{reason: fmt.Sprintf("payload length %d over the limit %d", n, MaxPayload)}
	}
	f := frame{
		lsn:      LSN(binary.LittleEndian.Uint64(b[4:12])),
		batchOff: binary.LittleEndian.Uint32(b[12:16]),
		size:     headerSize + int(n),
	}
	if len(b) < f.size {
		return frame{}, &frameError{reason: fmt.Sprintf("incomplete payload (%d of %d bytes)", len(b)-headerSize, n), incomplete: true}
	}
	f.payload = b[headerSize:f.size]
	if got, want := crc32.Checksum(f.payload, castagnoli), binary.LittleEndian.Uint32(b[16:20]); got != want {
		return frame{}, &frameError{reason: fmt.Sprintf("payload CRC mismatch (stored %08x, computed %08x)", want, got)}
	}
	return f, nil
}

// scanResult is what scanSegment found in one segment's bytes.
type scanResult struct {
	next LSN // the LSN after the last good record
	good int // bytes of good records from the start
	// end: the records stop at good cleanly: an end marker (a zeroed
	// header, written after every batch) or a frame of the file's earlier
	// life as another segment (recycled: its LSN is below the segment's
	// first), and no valid frame of a later write follows.
	end bool
	// bad is set when good < len(data) and not end: why the frame at good
	// is not valid.
	bad string
	// torn: the bad frame can be the unsynced tail of the last write (no
	// valid frame of a later write follows it).
	torn bool
}

// endMarker is written after every batch, where the next one goes: a
// zeroed header, which no frame has (its header CRC is not zero).
var endMarker [headerSize]byte

// MarkerSize is the size of the end marker that follows the records of
// every write: a segment's last record ends MarkerSize bytes before its
// end (tests that cut records use it).
const MarkerSize = headerSize

func isEndMarker(b []byte) bool {
	return len(b) >= headerSize && [headerSize]byte(b[:headerSize]) == endMarker
}

// scanSegment walks the frames of one segment whose first record has LSN
// first, calling fn for each good record in order (fn may be nil). It
// stops at the first bad frame or at an error from fn.
func scanSegment(data []byte, first LSN, fn func(LSN, []byte) error) (scanResult, error) {
	r := scanResult{next: first}
	for r.good < len(data) {
		if isEndMarker(data[r.good:]) {
			r.end = !laterWriteFollows(data, r.good+1, r.next)
			if !r.end {
				r.bad = "zeroed header followed by records of a later write"
			}
			return r, nil
		}
		f, ferr := decodeFrame(data[r.good:])
		if ferr == nil && f.lsn < first {
			// The file was a segment before (recycled): what follows
			// the records is its earlier content.
			r.end = !laterWriteFollows(data, r.good+1, r.next)
			if !r.end {
				r.bad = fmt.Sprintf("LSN %d where %d was expected", f.lsn, r.next)
			}
			return r, nil
		}
		if ferr == nil && f.lsn != r.next {
			ferr = &frameError{reason: fmt.Sprintf("LSN %d where %d was expected", f.lsn, r.next)}
		}
		if ferr == nil && uint64(f.batchOff) >= uint64(f.lsn) {
			ferr = &frameError{reason: fmt.Sprintf("batch offset %d not below LSN %d", f.batchOff, f.lsn)}
		}
		if ferr != nil {
			r.bad = ferr.reason
			r.torn = ferr.incomplete || !laterWriteFollows(data, r.good+1, r.next)
			return r, nil
		}
		if fn != nil {
			if err := fn(f.lsn, f.payload); err != nil {
				return r, err
			}
		}
		r.good += f.size
		r.next++
	}
	return r, nil
}

// laterWriteFollows reports whether a valid frame from a write after the
// one holding LSN bad starts anywhere in data[from:]. Such a frame was
// written, hence synced, after the bad one's write was acknowledged, so
// the bad frame is corruption, not a torn tail. This scans byte by byte
// and runs only when a frame is bad.
func laterWriteFollows(data []byte, from int, bad LSN) bool {
	for off := from; off+headerSize <= len(data); off++ {
		// Cheap checks before the CRC: this runs over the whole rest of
		// a recycled segment at every Open.
		if lsn := LSN(binary.LittleEndian.Uint64(data[off+4:])); lsn <= bad || lsn > bad+1<<40 {
			continue
		}
		f, ferr := decodeFrame(data[off:])
		if ferr != nil || f.lsn <= bad || uint64(f.batchOff) >= uint64(f.lsn) {
			continue
		}
		if f.lsn-LSN(f.batchOff) > bad {
			return true
		}
	}
	return false
}
