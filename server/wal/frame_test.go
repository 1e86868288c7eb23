package wal

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
)

func frameOf(lsn LSN, off uint32, p string) []byte {
	return appendFrame(nil, lsn, off, crc32.Checksum([]byte(p), castagnoli), []byte(p))
}

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		lsn     LSN
		off     uint32
		payload string
	}{
		{"empty payload", 1, 0, ""},
		{"one byte", 2, 1, "x"},
		{"200 bytes", 1 << 40, 7, strings.Repeat("a", 200)},
		{"binary", 9, 0, "\x00\xff\n{}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := frameOf(tc.lsn, tc.off, tc.payload)
			if len(b) != headerSize+len(tc.payload) {
				t.Fatalf("frame is %d bytes, want %d", len(b), headerSize+len(tc.payload))
			}
			if n := binary.LittleEndian.Uint32(b[0:4]); n != uint32(len(tc.payload)) {
				t.Fatalf("length field %d (little-endian), want %d", n, len(tc.payload))
			}
			f, ferr := decodeFrame(append(b, "trailing"...))
			if ferr != nil {
				t.Fatal(ferr.reason)
			}
			if f.lsn != tc.lsn || f.batchOff != tc.off || string(f.payload) != tc.payload || f.size != len(b) {
				t.Fatalf("decoded %+v", f)
			}
		})
	}
}

func TestFrameDecodeErrors(t *testing.T) {
	t.Parallel()
	good := frameOf(5, 0, "hello world")
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x10
		return b
	}
	// A length over the limit with a header CRC that matches.
	huge := bytes.Clone(good)
	binary.LittleEndian.PutUint32(huge[0:4], MaxPayload+1)
	binary.LittleEndian.PutUint32(huge[20:24], crc32.Checksum(huge[0:20], castagnoli))
	for _, tc := range []struct {
		name       string
		data       []byte
		reason     string
		incomplete bool
	}{
		{"empty", nil, "incomplete header (0 of 24", true},
		{"short header", good[:23], "incomplete header (23 of 24", true},
		{"short payload", good[:len(good)-1], "incomplete payload (10 of 11", true},
		{"length bit flipped", flip(0), "header CRC mismatch", false},
		{"lsn bit flipped", flip(5), "header CRC mismatch", false},
		{"header CRC flipped", flip(21), "header CRC mismatch", false},
		{"payload bit flipped", flip(headerSize + 3), "payload CRC mismatch", false},
		{"payload CRC field flipped (covered by the header CRC)", flip(17), "header CRC mismatch", false},
		{"length over limit", huge, "over the limit", false},
		{"zeros", make([]byte, 64), "header CRC mismatch", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ferr := decodeFrame(tc.data)
			if ferr == nil {
				t.Fatal("decoded a bad frame")
			}
			if !strings.Contains(ferr.reason, tc.reason) || ferr.incomplete != tc.incomplete {
				t.Fatalf("reason %q incomplete %v, want %q incomplete %v", ferr.reason, ferr.incomplete, tc.reason, tc.incomplete)
			}
		})
	}
}

// TestScanTornOrCorrupt builds segments by hand: writes A (LSN 1-3) and B
// (LSN 4-6), and decides whether a bad frame is a torn tail.
func TestScanTornOrCorrupt(t *testing.T) {
	t.Parallel()
	var frames [][]byte
	for lsn := LSN(1); lsn <= 6; lsn++ {
		first := LSN(1)
		if lsn >= 4 {
			first = 4
		}
		frames = append(frames, frameOf(lsn, uint32(lsn-first), "payload"))
	}
	seg := bytes.Join(frames, nil)
	offset := func(lsn LSN) int { return int(lsn-1) * len(frames[0]) }
	for _, tc := range []struct {
		name string
		bad  LSN // its payload's first byte flipped
		cut  int // bytes cut off the end
		good LSN // records read
		torn bool
	}{
		{"intact", 0, 0, 6, false},
		{"last frame cut", 0, 3, 5, true},
		{"bad last frame", 6, 0, 5, true},
		{"bad first frame of the last write, rest of it intact", 4, 0, 3, true},
		{"bad frame of an earlier write", 2, 0, 1, false},
		{"bad last frame of an earlier write", 3, 0, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := bytes.Clone(seg)
			if tc.bad != 0 {
				data[offset(tc.bad)+headerSize] ^= 1
			}
			data = data[:len(data)-tc.cut]
			var n LSN
			r, err := scanSegment(data, 1, func(lsn LSN, _ []byte) error { n++; return nil })
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.good || r.next != tc.good+1 || r.good != offset(tc.good+1) && tc.cut == 0 {
				t.Fatalf("read %d records, next %d, good %d bytes; want %d records", n, r.next, r.good, tc.good)
			}
			if tc.good < 6 && (r.torn != tc.torn || r.bad == "") {
				t.Fatalf("torn %v (%s), want %v", r.torn, r.bad, tc.torn)
			}
		})
	}
}

// A frame is appended without an allocation once the buffer has room
// (the header was a local array that escaped through crc32.Checksum).
func TestAppendFrameAllocs(t *testing.T) {
	payload := []byte("terminal-dev:local:p\n{\"role\":\"user\"}\n")
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		buf = appendFrame(buf[:0], 7, 0, crc32.Checksum(payload, castagnoli), payload)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per frame, want 0", allocs)
	}
	f, ferr := decodeFrame(buf)
	if ferr != nil || f.lsn != 7 || string(f.payload) != string(payload) {
		t.Fatalf("decoded %+v, %v", f, ferr)
	}
}
