// Package syncbuf is a bytes.Buffer that one goroutine may write while
// another reads it: a log sink or a program's output that a test reads
// while the code under test still writes.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write and String. The zero value is an
// empty, unbounded buffer.
type Buffer struct {
	// Max, when above zero, is how many bytes it keeps: a write past it
	// is taken (its length returned) and dropped.
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p (or drops it past Max) and never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Max > 0 && s.b.Len()+len(p) > s.Max {
		return len(p), nil
	}
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
