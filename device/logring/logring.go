// Package logring keeps the end of a log in memory: a Ring is an
// io.Writer of bounded size (DefaultSize, 256 KiB) that keeps the newest
// bytes written to it, for an operator who asks a device for its log
// over the session (issue 28: termd writes its slog output both to its
// file or stderr and to a Ring; a diag request "logs" answers with
// Ring.Tail). Nothing is written to disk and nothing is parsed: the ring
// holds bytes, and Tail only looks for the newline before which to cut.
//
// A Ring is safe for concurrent use: a Write and a Tail never see half of
// each other.
package logring

import (
	"bytes"
	"sync"
)

// DefaultSize is the size of a Ring from New(0): 256 KiB.
const DefaultSize = 256 << 10

// Ring is a bounded in-memory log: the last Size bytes written.
type Ring struct {
	mu      sync.Mutex
	buf     []byte // len(buf) == size once allocated
	w       int    // where the next byte goes
	held    int    // bytes held, at most len(buf)
	written int64  // bytes ever written
}

// New returns a Ring that keeps the last size bytes (DefaultSize when
// size <= 0). Its memory is allocated once, on the first Write.
func New(size int) *Ring {
	if size <= 0 {
		size = DefaultSize
	}
	return &Ring{buf: make([]byte, 0, size)}
}

// Size is the most the ring holds.
func (r *Ring) Size() int { return cap(r.buf) }

// Write keeps p's bytes, dropping the oldest past the ring's size. It
// never fails (an io.Writer for slog, io.MultiWriter).
func (r *Ring) Write(p []byte) (int, error) {
	n := len(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	size := cap(r.buf)
	if len(r.buf) < size {
		r.buf = r.buf[:size]
	}
	r.written += int64(n)
	if n >= size { // only p's end stays
		copy(r.buf, p[n-size:])
		r.w, r.held = 0, size
		return n, nil
	}
	c := copy(r.buf[r.w:], p)
	if c < n {
		copy(r.buf, p[c:])
	}
	r.w = (r.w + n) % size
	r.held = min(r.held+n, size)
	return n, nil
}

// Written is the number of bytes ever written (held or dropped).
func (r *Ring) Written() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written
}

// Len is the number of bytes held.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// Tail returns a copy of at most the last n bytes written (all held when
// n <= 0 or n is more than the ring holds), starting at a line boundary:
// when the n bytes begin inside a line, the part of that line is left
// out. One line longer than n is returned cut, as it is the only thing
// there is to show.
func (r *Ring) Tail(n int) []byte {
	r.mu.Lock()
	if n <= 0 || n > r.held {
		n = r.held
	}
	out := make([]byte, n)
	start := (r.w - n + len(r.buf)) % max(len(r.buf), 1)
	if c := copy(out, r.buf[start:min(start+n, len(r.buf))]); c < n {
		copy(out[c:], r.buf[:n-c])
	}
	// Does the tail start a line? Yes at the very start of the log, or
	// when the byte before it, still held, is a newline.
	atLine := int64(n) == r.written
	if !atLine && n < r.held {
		atLine = r.buf[(start-1+len(r.buf))%len(r.buf)] == '\n'
	}
	r.mu.Unlock()
	if !atLine {
		if i := bytes.IndexByte(out, '\n'); i >= 0 && i+1 < len(out) {
			out = out[i+1:]
		}
	}
	return out
}
