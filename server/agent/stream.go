package agent

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"termlink/link"
)

// MaxStreamChars caps the text a run streams (Request.Stream): the most
// characters one frame link.Client reads can carry (link.MaxFrameBytes,
// sized as link.ReadLimit sizes a channel's frames: up to 6 bytes a
// character once JSON-escaped, plus 4 KiB for the other fields). A
// device that reconnects mid-run is sent all the text so far in one
// delta frame, so the whole stream must fit in one. The server applies
// no other cap to a reply's text: each runner bounds its own output
// (the Terminal agent's maxOutputBytes, ACP's MaxReplyBytes).
const MaxStreamChars = (link.MaxFrameBytes - 4096) / 6

// StreamGap is the least time between two updates of a Stream: the
// first chunk passes at once, later ones at most once per StreamGap,
// all the text so far in each.
const StreamGap = 125 * time.Millisecond

// Stream accumulates the text a run streams and passes it on, coalesced,
// to update: the first chunk at once (the first character's latency is
// what a user notices), then at most one update per StreamGap carrying
// all the text so far (the latest wins; nothing is dropped from the
// middle, as each update carries everything). The text is capped at
// max characters, cut on a rune boundary; chunks after the cap are
// ignored. Close drops what is pending (the run's final reply supersedes
// it); no update is passed after Close returns.
//
// Write never blocks on update: updates are passed on a timer's
// goroutine, one at a time. Safe for concurrent use.
type Stream struct {
	update func(text string)
	max    int
	gap    time.Duration

	emit sync.Mutex // held while update runs: Close waits for it

	mu      sync.Mutex
	text    strings.Builder
	chars   int
	capped  bool
	closed  bool
	pending bool        // text grew since the last update
	last    time.Time   // when the last update was taken
	timer   *time.Timer // the next update, armed
}

// NewStream returns a Stream that passes its text to update, capped at
// max characters (max <= 0: MaxStreamChars).
func NewStream(max int, update func(text string)) *Stream {
	if max <= 0 {
		max = MaxStreamChars
	}
	return &Stream{update: update, max: max, gap: StreamGap}
}

// Write appends chunk to the text (Request.Stream). It never blocks for
// long: the update it causes runs on a timer's goroutine.
func (s *Stream) Write(chunk string) {
	if chunk == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.capped {
		return
	}
	room := s.max - s.chars
	if n := utf8.RuneCountInString(chunk); n > room {
		chunk = cutRunes(chunk, room)
		s.chars = s.max
		s.capped = true
	} else {
		s.chars += n
	}
	if chunk == "" {
		return
	}
	s.text.WriteString(chunk)
	s.pending = true
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(s.last.Add(s.gap)), s.fire)
	}
}

// cutRunes returns the first n runes of s.
func cutRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// fire passes the text so far to update (on the timer's goroutine).
func (s *Stream) fire() {
	s.emit.Lock()
	defer s.emit.Unlock()
	s.mu.Lock()
	s.timer = nil
	if s.closed || !s.pending {
		s.mu.Unlock()
		return
	}
	text := completeRunes(s.text.String())
	if text == "" { // only part of a character so far: it comes with the next chunk
		s.mu.Unlock()
		return
	}
	s.pending = len(text) < s.text.Len() // a held-back partial character goes with the next chunk's update
	s.last = time.Now()
	s.mu.Unlock()
	s.update(text)
}

// completeRunes is s without a trailing partial UTF-8 sequence (a runner
// that splits a character between two chunks): a delta must not end
// halfway through a character.
func completeRunes(s string) string {
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				return s[:i]
			}
			return s
		}
	}
	return s
}

// Close stops the stream: what is pending is dropped, and no update is
// passed once Close returns (an update in progress is waited for).
func (s *Stream) Close() {
	s.mu.Lock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.mu.Unlock()
	s.emit.Lock() // an update under way ends first
	s.emit.Unlock()
}

// Text returns all the text written so far (capped).
func (s *Stream) Text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.text.String()
}
