package session

import (
	"context"
	"errors"
	"fmt"
)

// This file is Options.WriteBehind: appends taken in memory (take),
// written in bulk (flush), and the one place every read goes through
// first (catchUp).

// take keeps the lines of one append in memory, after the pending lines
// of the same file. An append that would pass MaxPending first writes
// every pending line; if that fails and leaves the bound passed, it
// fails and takes nothing (the caller treats the records as not
// written), so memory stays bounded while the disk refuses writes.
func (s *Store) take(key string, data []byte, n int) error {
	var flushErr error
	for {
		s.pmu.Lock()
		if s.pclosed {
			s.pmu.Unlock()
			return fmt.Errorf("session: append %s: %w", key, ErrClosed)
		}
		if s.pendBytes == 0 || s.pendBytes+len(data) <= s.maxPending {
			p := s.pend[key]
			if p == nil {
				p = &pendingFile{key: key}
				if n := len(s.free); n > 0 && cap(s.free[n-1]) >= len(data) {
					p.data, s.free = s.free[n-1], s.free[:n-1]
					s.freeBytes -= cap(p.data)
				} else {
					p.data = make([]byte, 0, max(len(data), newPendingBuffer))
				}
				s.pend[key] = p
			}
			p.data = append(p.data, data...)
			p.n += n
			p.calls++
			s.pendBytes += len(data)
			s.pending.Store(int64(s.pendBytes))
			s.pmu.Unlock()
			return nil
		}
		s.pmu.Unlock()
		if flushErr != nil {
			return fmt.Errorf("session: append %s: %d bytes wait to be written and writing them failed: %w", key, s.maxPending, flushErr)
		}
		flushErr = s.flushOver(len(data))
	}
}

// flushOver writes every pending line if an append of n bytes would still
// pass MaxPending once it holds flushMu (another appender may have
// written them meanwhile).
func (s *Store) flushOver(n int) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.pmu.Lock()
	over := s.pendBytes > 0 && s.pendBytes+n > s.maxPending
	s.pmu.Unlock()
	if !over {
		return nil
	}
	return s.flushLocked("")
}

// catchUp writes the pending lines of session key (every session's if
// key is ""), so a read of its file that follows sees every append that
// returned before it. Every read of a session file calls it first
// (openSnapshot, scan, UpdateMetadata). Without WriteBehind it does
// nothing.
func (s *Store) catchUp(key string) error {
	if !s.wb {
		return nil
	}
	return s.flush(key)
}

// flush writes the pending lines of session key (every session's if key
// is ""): one write per file, in one run of the writer. The lines of a
// file whose write fails are put back in front of any taken since, so
// nothing is lost or reordered, and the error is returned.
func (s *Store) flush(key string) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.flushLocked(key)
}

// newPendingBuffer is the room a session's pending lines get when no
// written buffer is free: a busy session's second of lines (a few
// messages of three records) fits without growing it two or three times
// (growslice and its copy were half of take's time at saturation).
const newPendingBuffer = 4096

// maxFreeBuffer is the largest buffer of written lines kept for the next
// appends; those kept take at most MaxPending bytes in all.
const maxFreeBuffer = 64 << 10

func (s *Store) flushLocked(key string) error {
	var files []*pendingFile
	s.pmu.Lock()
	if key == "" {
		for _, p := range s.pend {
			files = append(files, p)
		}
		if len(files) > 0 {
			s.pend = make(map[string]*pendingFile, len(files))
		}
		s.pendBytes = 0
	} else if p := s.pend[key]; p != nil {
		files = append(files, p)
		delete(s.pend, key)
		s.pendBytes -= len(p.data)
	}
	s.pending.Store(int64(s.pendBytes))
	s.pmu.Unlock()
	if len(files) == 0 {
		return nil
	}
	s.flushes.Add(1)
	ctx := context.Background() // a flush is never abandoned halfway: its lines would be written twice
	reqs := make([]*request, len(files))
	all := make([]request, len(files)) // one allocation for the run
	for i, p := range files {
		all[i] = request{ctx: ctx, op: opAppend, key: p.key, data: p.data, n: p.n, calls: p.calls}
		reqs[i] = &all[i]
	}
	err := s.submit(ctx, &request{ctx: ctx, op: opFlush, key: "(pending lines)", batch: reqs})
	var errs []error
	var back []*pendingFile
	for i, r := range reqs {
		switch {
		case err != nil:
			back = append(back, files[i])
		case r.err != nil:
			back = append(back, files[i])
			errs = append(errs, r.err)
		}
	}
	if err != nil {
		errs = append(errs, err)
	}
	s.pmu.Lock()
	for i, r := range reqs { // written: their buffers serve the next appends
		if c := cap(files[i].data); err == nil && r.err == nil && c <= maxFreeBuffer && s.freeBytes+c <= s.maxPending {
			s.free = append(s.free, files[i].data[:0])
			s.freeBytes += c
		}
	}
	s.pmu.Unlock()
	if len(back) > 0 {
		s.pmu.Lock()
		for _, p := range back {
			if q := s.pend[p.key]; q != nil { // taken since: after p
				p.data = append(p.data, q.data...)
				p.n += q.n
				p.calls += q.calls
				s.pendBytes -= len(q.data)
			}
			s.pend[p.key] = p
			s.pendBytes += len(p.data)
		}
		s.pending.Store(int64(s.pendBytes))
		s.pmu.Unlock()
	}
	if len(errs) > 0 {
		return fmt.Errorf("writing the pending lines of %d session files: %w", len(back), errors.Join(errs...))
	}
	return nil
}
