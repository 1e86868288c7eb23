// Package delta makes and applies termd's binary patches (issue 43): a
// bsdiff-like format, so that a device already running release A fetches
// only what release B changed.
//
// Why bsdiff and not zstd with the old binary as a dictionary: a Go
// binary one commit newer has most of its code moved by a few bytes, so
// most of it differs from the old one in a few bytes per word (addresses
// and offsets). bsdiff's "add" blocks turn those into runs of zero
// differences that compress well, where a dictionary compressor sees
// each changed word as a new literal. And applying stays within a fixed
// few hundred KiB however large the binaries are: the old binary is read
// with ReadAt where a control says, the new one is written sequentially,
// and the patch's three streams are read through small buffers. zstd's
// decoder in dictionary ("patch-from") mode keeps the whole old binary as
// its history in memory, and a window of the new one with it: both
// binaries, on a 512 MB Pi Zero.
//
// The server makes the patch (Diff): a suffix array of the old binary
// (SA-IS, index/suffixarray's: the array and the sort's work space, about
// 5 times the old binary's size in memory; suffix.go) and bsdiff's
// search for approximate matches.
//
// Format (all integers little-endian):
//
//	magic       8 bytes "TLDELTA1"
//	newSize     uint64: the bytes the patch makes
//	ctrlLen     uint64: the compressed control stream's bytes
//	diffLen     uint64: the compressed diff stream's bytes
//	extraLen    uint64: the compressed extra stream's bytes
//	ctrl, diff, extra: each a raw DEFLATE stream (RFC 1951)
//
// The control stream is a sequence of controls, each three varints:
// add (uvarint), copy (uvarint) and seek (signed varint). A control adds
// add bytes of the diff stream to the old binary's bytes at the old
// position (both then move on by add), copies copy bytes of the extra
// stream, then moves the old position by seek. Every control but the
// first makes at least one byte. Apply refuses anything else: a length
// that does not add up, an old position outside the old binary, more
// or fewer bytes than newSize, a stream with bytes left over.
package delta

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Magic starts a patch.
const Magic = "TLDELTA1"

// HeaderSize is the bytes before the streams.
const HeaderSize = 8 + 4*8

// chunk is the buffer Apply works through.
const chunk = 32 << 10

// ErrCorrupt wraps every error Apply returns for a patch that is not a
// valid patch of the old binary (as opposed to a read or write error).
var ErrCorrupt = errors.New("corrupt patch")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// Header is a patch's header.
type Header struct {
	NewSize                    int64
	CtrlLen, DiffLen, ExtraLen int64
}

// ReadHeader reads and checks a patch's header against its size.
func ReadHeader(patch io.ReaderAt, patchSize int64) (Header, error) {
	var b [HeaderSize]byte
	if patchSize < HeaderSize {
		return Header{}, corrupt("%d bytes, shorter than the %d-byte header", patchSize, HeaderSize)
	}
	if _, err := patch.ReadAt(b[:], 0); err != nil {
		return Header{}, fmt.Errorf("reading the patch's header: %w", err)
	}
	if string(b[:8]) != Magic {
		return Header{}, corrupt("it does not start with %q", Magic)
	}
	var v [4]uint64
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(b[8+8*i:])
		if v[i] > 1<<62 {
			return Header{}, corrupt("header field %d is %d, out of range", i, v[i])
		}
	}
	h := Header{NewSize: int64(v[0]), CtrlLen: int64(v[1]), DiffLen: int64(v[2]), ExtraLen: int64(v[3])}
	if h.CtrlLen > patchSize || h.DiffLen > patchSize || h.ExtraLen > patchSize {
		return Header{}, corrupt("a stream of the header is longer than the %d-byte patch", patchSize)
	}
	if sum := HeaderSize + h.CtrlLen + h.DiffLen + h.ExtraLen; sum != patchSize {
		return Header{}, corrupt("the header's streams add up to %d bytes, the patch is %d", sum, patchSize)
	}
	return h, nil
}

// stream is one of a patch's DEFLATE streams, read to its exact end.
type stream struct {
	name string
	br   *bufio.Reader
	fr   io.ReadCloser
}

func newStream(name string, patch io.ReaderAt, off, n int64) *stream {
	br := bufio.NewReaderSize(io.NewSectionReader(patch, off, n), 4096)
	return &stream{name: name, br: br, fr: flate.NewReader(br)}
}

// full reads exactly len(p) bytes.
func (s *stream) full(p []byte) error {
	if _, err := io.ReadFull(s.fr, p); err != nil {
		return s.bad(err)
	}
	return nil
}

func (s *stream) bad(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("the %s stream ends early", s.name)
	}
	var ce flate.CorruptInputError
	if errors.As(err, &ce) {
		return corrupt("the %s stream: %v", s.name, err)
	}
	return fmt.Errorf("reading the patch's %s stream: %w", s.name, err)
}

// end checks the stream has nothing left, compressed or not.
func (s *stream) end() error {
	var b [1]byte
	n, err := s.fr.Read(b[:])
	for n == 0 && err == nil {
		n, err = s.fr.Read(b[:])
	}
	if n > 0 {
		return corrupt("the %s stream has bytes past what the controls use", s.name)
	}
	if err != io.EOF {
		return s.bad(err)
	}
	if _, err := s.br.ReadByte(); err != io.EOF {
		return corrupt("the %s stream has bytes after its end", s.name)
	}
	return nil
}

// ReadByte reads the control stream's varints: io.EOF at its end.
func (s *stream) ReadByte() (byte, error) {
	var b [1]byte
	if _, err := io.ReadFull(s.fr, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

// Apply writes to out the binary that patch (patchSize bytes) makes of
// old (oldSize bytes). wantSize is the size the signed manifest says the
// result has: a patch that says otherwise is refused before anything is
// written. Memory is a few buffers whatever the sizes: old is read where
// the controls say, out written sequentially (buffer it).
func Apply(old io.ReaderAt, oldSize int64, patch io.ReaderAt, patchSize, wantSize int64, out io.Writer) error {
	h, err := ReadHeader(patch, patchSize)
	if err != nil {
		return err
	}
	if h.NewSize != wantSize {
		return corrupt("it makes %d bytes, the manifest says %d", h.NewSize, wantSize)
	}
	ctrl := newStream("control", patch, HeaderSize, h.CtrlLen)
	diff := newStream("diff", patch, HeaderSize+h.CtrlLen, h.DiffLen)
	extra := newStream("extra", patch, HeaderSize+h.CtrlLen+h.DiffLen, h.ExtraLen)
	defer ctrl.fr.Close()
	defer diff.fr.Close()
	defer extra.fr.Close()
	buf := make([]byte, chunk)
	obuf := make([]byte, chunk)
	var newPos, oldPos int64
	for n := 0; ; n++ {
		add, err := binary.ReadUvarint(ctrl)
		if err == io.EOF {
			if newPos != h.NewSize {
				return corrupt("its controls end after %d of the %d bytes it makes", newPos, h.NewSize)
			}
			break
		}
		if err != nil {
			return ctrl.varint(err, n)
		}
		cp, err := binary.ReadUvarint(ctrl)
		if err != nil {
			return ctrl.varint(err, n)
		}
		seek, err := binary.ReadVarint(ctrl)
		if err != nil {
			return ctrl.varint(err, n)
		}
		left := h.NewSize - newPos
		switch {
		case add > uint64(left) || cp > uint64(left)-add:
			return corrupt("control %d makes %d+%d bytes, %d are left to make", n, add, cp, left)
		case add+cp == 0 && n > 0:
			return corrupt("control %d makes nothing", n)
		case int64(add) > oldSize-oldPos:
			return corrupt("control %d adds %d bytes at old position %d of %d", n, add, oldPos, oldSize)
		}
		for rest := int64(add); rest > 0; {
			k := min(rest, chunk)
			if err := diff.full(buf[:k]); err != nil {
				return err
			}
			if _, err := old.ReadAt(obuf[:k], oldPos); err != nil {
				return fmt.Errorf("reading the old binary at %d: %w", oldPos, err)
			}
			for i := range k {
				buf[i] += obuf[i]
			}
			if _, err := out.Write(buf[:k]); err != nil {
				return err
			}
			rest -= k
			oldPos += k
			newPos += k
		}
		for rest := int64(cp); rest > 0; {
			k := min(rest, chunk)
			if err := extra.full(buf[:k]); err != nil {
				return err
			}
			if _, err := out.Write(buf[:k]); err != nil {
				return err
			}
			rest -= k
			newPos += k
		}
		if seek < -oldPos || seek > oldSize-oldPos {
			return corrupt("control %d moves the old position from %d by %d, outside the old binary's %d bytes", n, oldPos, seek, oldSize)
		}
		oldPos += seek
	}
	for _, s := range []*stream{ctrl, diff, extra} {
		if err := s.end(); err != nil {
			return err
		}
	}
	return nil
}

// varint says what is wrong with control n's varint.
func (s *stream) varint(err error, n int) error {
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return corrupt("control %d is cut short", n)
	case strings.Contains(err.Error(), "varint overflows"):
		return corrupt("control %d: a varint overflows 64 bits", n)
	}
	return s.bad(err)
}

// Diff writes the patch that makes newb of old.
func Diff(old, newb []byte, w io.Writer) error {
	if int64(len(old)) >= 1<<31-1 || int64(len(newb)) >= 1<<62 {
		return fmt.Errorf("delta: the old binary is %d bytes, more than this format's suffix array takes", len(old))
	}
	I := suffixArray(old)
	var ctrlB, diffB, extraB bytes.Buffer
	cw, _ := flate.NewWriter(&ctrlB, flate.BestCompression)
	dw, _ := flate.NewWriter(&diffB, flate.BestCompression)
	ew, _ := flate.NewWriter(&extraB, flate.BestCompression)
	var vb [3 * binary.MaxVarintLen64]byte
	first := true
	var pend struct{ add, cp, seek int64 }
	havePend := false
	flush := func() error {
		if !havePend {
			return nil
		}
		k := binary.PutUvarint(vb[:], uint64(pend.add))
		k += binary.PutUvarint(vb[k:], uint64(pend.cp))
		k += binary.PutVarint(vb[k:], pend.seek)
		_, err := cw.Write(vb[:k])
		havePend = false
		return err
	}
	emit := func(add, cp, seek int64) error {
		if add+cp == 0 && !first {
			pend.seek += seek // fold into the control before: it makes nothing
			return nil
		}
		if err := flush(); err != nil {
			return err
		}
		first = false
		pend.add, pend.cp, pend.seek, havePend = add, cp, seek, true
		return nil
	}
	oldSize, newSize := len(old), len(newb)
	db := make([]byte, 0, chunk)
	var scan, pos, length, lastscan, lastpos, lastoffset int
	for scan < newSize {
		oldscore := 0
		scan += length
		for scsc := scan; scan < newSize; scan++ {
			pos, length = search(I, old, newb[scan:], 0, oldSize)
			for ; scsc < scan+length; scsc++ {
				if scsc+lastoffset < oldSize && old[scsc+lastoffset] == newb[scsc] {
					oldscore++
				}
			}
			if (length == oldscore && length != 0) || length > oldscore+8 {
				break
			}
			if scan+lastoffset < oldSize && old[scan+lastoffset] == newb[scan] {
				oldscore--
			}
		}
		if length != oldscore || scan == newSize {
			s, sf, lenf := 0, 0, 0
			for i := 0; lastscan+i < scan && lastpos+i < oldSize; {
				if old[lastpos+i] == newb[lastscan+i] {
					s++
				}
				i++
				if s*2-i > sf*2-lenf {
					sf, lenf = s, i
				}
			}
			lenb := 0
			if scan < newSize {
				s, sb := 0, 0
				for i := 1; scan >= lastscan+i && pos >= i; i++ {
					if old[pos-i] == newb[scan-i] {
						s++
					}
					if s*2-i > sb*2-lenb {
						sb, lenb = s, i
					}
				}
			}
			if lastscan+lenf > scan-lenb {
				overlap := (lastscan + lenf) - (scan - lenb)
				s, ss, lens := 0, 0, 0
				for i := 0; i < overlap; i++ {
					if newb[lastscan+lenf-overlap+i] == old[lastpos+lenf-overlap+i] {
						s++
					}
					if newb[scan-lenb+i] == old[pos-lenb+i] {
						s--
					}
					if s > ss {
						ss, lens = s, i+1
					}
				}
				lenf += lens - overlap
				lenb -= lens
			}
			for i := 0; i < lenf; i++ {
				db = append(db, newb[lastscan+i]-old[lastpos+i])
				if len(db) == cap(db) {
					if _, err := dw.Write(db); err != nil {
						return err
					}
					db = db[:0]
				}
			}
			ext := (scan - lenb) - (lastscan + lenf)
			if _, err := ew.Write(newb[lastscan+lenf : lastscan+lenf+ext]); err != nil {
				return err
			}
			if err := emit(int64(lenf), int64(ext), int64((pos-lenb)-(lastpos+lenf))); err != nil {
				return err
			}
			lastscan, lastpos, lastoffset = scan-lenb, pos-lenb, pos-scan
		}
	}
	if first { // an empty new binary: one control making nothing
		if err := emit(0, 0, 0); err != nil {
			return err
		}
	}
	if _, err := dw.Write(db); err != nil {
		return err
	}
	if err := errors.Join(flush(), cw.Close(), dw.Close(), ew.Close()); err != nil {
		return err
	}
	var hdr [HeaderSize]byte
	copy(hdr[:], Magic)
	for i, v := range []int{newSize, ctrlB.Len(), diffB.Len(), extraB.Len()} {
		binary.LittleEndian.PutUint64(hdr[8+8*i:], uint64(v))
	}
	for _, b := range [][]byte{hdr[:], ctrlB.Bytes(), diffB.Bytes(), extraB.Bytes()} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func matchlen(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// search finds the longest match of nb in old among the suffixes
// I[st..en]: its position and length.
func search(I []int32, old, nb []byte, st, en int) (int, int) {
	for en-st >= 2 {
		x := st + (en-st)/2
		p := int(I[x])
		n := min(len(old)-p, len(nb))
		if bytes.Compare(old[p:p+n], nb[:n]) < 0 {
			st = x
		} else {
			en = x
		}
	}
	x := matchlen(old[I[st]:], nb)
	y := matchlen(old[I[en]:], nb)
	if x > y {
		return int(I[st]), x
	}
	return int(I[en]), y
}
