package link

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A reply's text as the agent writes it (capability "stream"): the
// session turns delta frames into EventDelta events carrying all the
// text so far. The text is kept per connection: the server numbers a
// message's deltas from 1 on every connection, and the first one of a
// connection carries everything so far, so it replaces what the client
// had.

// streamState is what one message's deltas built on one connection;
// owned by the session loop.
type streamState struct {
	seq    int64           // the last delta taken
	text   strings.Builder // all the text so far (String does not copy)
	full   bool            // the text reached MaxStreamBytes: it grows no more
	broken int64           // a gap was seen at this seq: later deltas are ignored
}

// maxLoggedIgnores bounds the (message, reason) pairs a session
// remembers having logged, so a server sending a flood of bad deltas
// logs each kind of mistake once per message, not once per frame.
const maxLoggedIgnores = 64

// delta takes one delta frame.
func (s *session) delta(f *Delta) {
	c := s.c
	if !c.cfg.Stream {
		s.ignoreDelta(f, "unlisted", "the client did not list stream in connect")
		return
	}
	c.mu.Lock()
	m := c.msgs[f.MessageID]
	answered := m != nil && m.answered
	c.mu.Unlock()
	st := s.streams[f.MessageID]
	switch {
	case m == nil:
		delete(s.streams, f.MessageID)
		s.ignoreDelta(f, "unknown", "no message waiting for its answer has that id (unknown, or answered and confirmed)")
		return
	case answered:
		delete(s.streams, f.MessageID)
		s.ignoreDelta(f, "final", "its final reply is in already: the reply supersedes the stream")
		return
	case st == nil && f.Seq != 1:
		s.ignoreDelta(f, "gap", fmt.Sprintf("gap: the first delta on this connection has seq %d, want 1", f.Seq))
		s.streams[f.MessageID] = &streamState{broken: f.Seq}
		return
	case st != nil && st.broken > 0:
		s.ignoreDelta(f, "broken", fmt.Sprintf("after a gap at seq %d on this connection: the final reply will carry the text", st.broken))
		return
	case st != nil && f.Seq <= st.seq:
		s.ignoreDelta(f, "duplicate", fmt.Sprintf("duplicate: seq %d, this connection is at %d", f.Seq, st.seq))
		return
	case st != nil && f.Seq != st.seq+1:
		s.ignoreDelta(f, "gap", fmt.Sprintf("gap: seq %d after %d", f.Seq, st.seq))
		st.broken = f.Seq
		return
	}
	if st == nil {
		if len(s.streams) >= c.cfg.Window {
			s.ignoreDelta(f, "many", fmt.Sprintf("%d messages stream on this connection already (the window)", len(s.streams)))
			return
		}
		st = &streamState{}
		s.streams[f.MessageID] = st
	}
	st.seq = f.Seq
	c.deltas.Add(1)
	if st.full {
		return // the text grows no more: nothing new to show
	}
	text := f.Text
	if room := c.cfg.MaxStreamBytes - st.text.Len(); len(text) > room {
		text = cutRunes(text, room)
		st.full = true
		c.log.Warn("streamed text cut: it reached the client's limit; the final reply carries it all",
			"message_id", f.MessageID, "seq", f.Seq, "limit_bytes", c.cfg.MaxStreamBytes)
	}
	st.text.WriteString(text)
	c.emit(Event{Kind: EventDelta, MessageID: f.MessageID, Seq: f.Seq, Text: st.text.String()})
}

// ignoreDelta counts an ignored delta and logs why, once per message,
// kind and connection.
func (s *session) ignoreDelta(f *Delta, kind, why string) {
	s.c.deltasIgnored.Add(1)
	key := kind + "\x00" + f.MessageID
	if _, done := s.deltaLogged[key]; done {
		return
	}
	if len(s.deltaLogged) >= maxLoggedIgnores {
		clear(s.deltaLogged)
	}
	s.deltaLogged[key] = struct{}{}
	s.c.log.Warn("delta ignored: "+why, "message_id", f.MessageID, "seq", f.Seq, "reason", kind)
}

// endStream forgets a message's stream once its final answer is in.
func (s *session) endStream(id string) { delete(s.streams, id) }

// cutRunes returns the longest prefix of s of at most n bytes that does
// not split a rune.
func cutRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
