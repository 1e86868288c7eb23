package wal

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// seeds are valid, cut and padded segments.
func seeds(f *testing.F) {
	var seg []byte
	for lsn := LSN(1); lsn <= 4; lsn++ {
		seg = append(seg, frameOf(lsn, uint32(lsn-1), "record payload")...)
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-5])
	f.Add(append(bytes.Clone(seg), make([]byte, 40)...))
	f.Add(frameOf(1, 0, ""))
	f.Add([]byte{})
	// An end marker, then a recycled segment's earlier content.
	f.Add(append(append(bytes.Clone(seg[:len(seg)/2]), endMarker[:]...), seg[len(seg)/2:]...))
	f.Add(append(frameOf(1, 0, "new"), frameOf(0, 0, "old")...))
}

// FuzzReplay feeds arbitrary bytes to the segment reader: it never
// panics, and what replays is a prefix of valid records with consecutive
// LSNs, ending exactly where the reader says the good bytes end.
func FuzzReplay(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScan(t, data)
	})
}

// checkScan reads data as segment 1 and checks the result.
func checkScan(t *testing.T, data []byte) (scanResult, []rec) {
	var got []rec
	r, err := scanSegment(data, 1, func(lsn LSN, p []byte) error {
		got = append(got, rec{lsn, string(p)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for i, g := range got {
		fr, ferr := decodeFrame(data[off:])
		if ferr != nil || g.lsn != LSN(i+1) || fr.lsn != g.lsn || string(fr.payload) != g.payload {
			t.Fatalf("record %d %v is not the valid frame at %d", i, g, off)
		}
		off += fr.size
	}
	if off != r.good || r.next != LSN(len(got)+1) || (r.good < len(data)) != (r.bad != "" || r.end) || (r.end && r.bad != "") {
		t.Fatalf("good %d bytes, next %d, end %v, bad %q; records end at %d", r.good, r.next, r.end, r.bad, off)
	}
	return r, got
}

// FuzzOpen opens a log whose only segment holds arbitrary bytes: Open
// repairs a torn tail or refuses corruption, replays what the reader
// read, and a repaired log takes appends.
func FuzzOpen(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, got := checkScan(t, data)
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, recs, err := tryOpen(dir, Options{NoSync: true})
		if err != nil {
			if r.torn || r.bad == "" {
				t.Fatalf("open refused a readable or torn segment: %v", err)
			}
			return
		}
		defer l.Close()
		if len(recs) != len(got) {
			t.Fatalf("open replayed %d records, the reader %d", len(recs), len(got))
		}
		if lsn, err := l.Append(t.Context(), []byte("next")); err != nil || lsn != LSN(len(got)+1) {
			t.Fatalf("append after open: %d %v", lsn, err)
		}
	})
}
