package load

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"termlink/link"
)

// Count is one distinct error text and how often it was seen.
type Count struct {
	Text  string `json:"text"`
	Count int64  `json:"count"`
}

// otherText is the bucket for distinct texts beyond a counter's limit.
const otherText = "(other)"

// localAddr matches the local address of a network error ("read tcp
// 127.0.0.1:53812->127.0.0.1:8080: ..."): an ephemeral port, different for
// every connection.
var localAddr = regexp.MustCompile(`(?:\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.%\w]*\]|[\w.-]+):\d+->`)

// errorKind is text without what differs between connections failing the
// same way: "read tcp 127.0.0.1:53812->127.0.0.1:8080: read: connection
// reset by peer" becomes "read tcp 127.0.0.1:8080: read: connection reset
// by peer".
func errorKind(text string) string { return localAddr.ReplaceAllString(text, "") }

// counter counts texts by kind (errorKind), keeping at most limit distinct
// kinds in first-seen order; the rest are counted under otherText. Not
// safe for concurrent use.
type counter struct {
	limit int
	list  []Count
	index map[string]int
}

func (c *counter) add(text string) {
	text = errorKind(text)
	if c.index == nil {
		c.index = make(map[string]int)
	}
	if i, ok := c.index[text]; ok {
		c.list[i].Count++
		return
	}
	if len(c.index) >= c.limit {
		text = otherText
		if i, ok := c.index[text]; ok {
			c.list[i].Count++
			return
		}
	}
	c.index[text] = len(c.list)
	c.list = append(c.list, Count{Text: text, Count: 1})
}

// counts returns a copy of the counts in first-seen order.
func (c *counter) counts() []Count {
	if len(c.list) == 0 {
		return nil
	}
	return append([]Count(nil), c.list...)
}

// sendState is what is known about one sent message.
type sendState struct {
	sent    time.Time
	ackAt   time.Time
	replyAt time.Time
	acked   bool
	replied bool
	// Streaming (Options.Stream): the deltas received, the last seq on
	// the current connection, and the text they add up to.
	deltas   int32
	seq      int64
	streamed string
}

// tracker matches acks and replies to sent messages. Readers of every
// device and the writer pool share it under one mutex: its operations are
// a map lookup and an append, cheap next to a WebSocket frame.
type tracker struct {
	mu      sync.Mutex
	msgs    map[string]*sendState
	rtt     []time.Duration
	ackLat  []time.Duration
	open    int // sent, not yet replied
	errText counter
	badText counter
	finish  map[string]int64

	sent, sendErrors, acked, rejected, replied int64
	resent                                     int64 // lean: messages written again after a move
	dupAcks, dupReplies, unknown, errFrames    int64
	badFrames, unexpected                      int64
	lastReply                                  time.Time

	// Streaming (Options.Stream; see delta).
	firstDelta                        []time.Duration // message sent to its first delta
	deltaFrames, streamedRuns         int64
	maxDeltas                         int32
	deltaGaps, deltaLate, deltaDiffer int64
}

func newTracker(expected int) *tracker {
	expected = min(expected, 1<<22)
	return &tracker{
		msgs:    make(map[string]*sendState, expected),
		rtt:     make([]time.Duration, 0, expected),
		ackLat:  make([]time.Duration, 0, expected),
		errText: counter{limit: 10},
		badText: counter{limit: 5},
		finish:  make(map[string]int64),
	}
}

// sending registers id as sent at t; call it before writing the frame so a
// fast reply finds it.
func (t *tracker) sending(id string, at time.Time) {
	t.mu.Lock()
	t.msgs[id] = &sendState{sent: at}
	t.sent++
	t.open++
	t.mu.Unlock()
}

// resend counts a message written again (same id) after a move.
func (t *tracker) resend() {
	t.mu.Lock()
	t.resent++
	t.mu.Unlock()
}

// sendError counts a message that could not be handed over at all
// (client mode: Send returned an error).
func (t *tracker) sendError() {
	t.mu.Lock()
	t.sendErrors++
	t.mu.Unlock()
}

// sendFailed takes back a sending whose write failed.
func (t *tracker) sendFailed(id string) {
	t.mu.Lock()
	if s, ok := t.msgs[id]; ok {
		delete(t.msgs, id)
		t.sent--
		if !s.replied {
			t.open--
		}
	}
	t.sendErrors++
	t.mu.Unlock()
}

func (t *tracker) ack(a *link.Ack, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.msgs[a.MessageID]
	if !ok {
		t.unknown++
		return
	}
	if a.Duplicate {
		t.dupAcks++
	}
	if !a.Accepted {
		t.rejected++
	}
	if !s.acked {
		s.acked = true
		s.ackAt = at
		t.acked++
		t.ackLat = append(t.ackLat, at.Sub(s.sent))
	}
	// A duplicate ack may carry the cached reply: that is how the server
	// delivers an answer it already has.
	if a.Reply != nil {
		t.replyLocked(s, a.Reply, at)
	}
}

func (t *tracker) reply(m *link.Message, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.msgs[m.MessageID]
	if !ok {
		t.unknown++
		return
	}
	t.replyLocked(s, m, at)
}

// delta takes a delta frame of a streamed reply: the first one of a
// message times the first character, each one must follow the one
// before it on the connection (seq+1; seq 1 starts over with all the
// text so far, as after a reconnect), and none may come after the reply.
func (t *tracker) delta(d *link.Delta, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deltaFrames++
	s, ok := t.msgs[d.MessageID]
	switch {
	case !ok:
		t.unknown++
		return
	case s.replied:
		t.deltaLate++
		return
	}
	if s.deltas == 0 {
		t.firstDelta = append(t.firstDelta, at.Sub(s.sent))
	}
	s.deltas++
	switch {
	case d.Seq == 1:
		s.streamed = d.Text
	case d.Seq == s.seq+1:
		s.streamed += d.Text
	default:
		t.deltaGaps++
	}
	s.seq = d.Seq
}

func (t *tracker) replyLocked(s *sendState, m *link.Message, at time.Time) {
	if s.replied {
		t.dupReplies++
		return
	}
	if s.deltas > 0 {
		t.streamedRuns++
		t.maxDeltas = max(t.maxDeltas, s.deltas)
		// The deltas are the reply's text as it was written: what they
		// add up to begins the final text (all of it, unless the last
		// update was superseded by the reply).
		if !strings.HasPrefix(m.Text, s.streamed) {
			t.deltaDiffer++
		}
		s.streamed = ""
	}
	s.replied = true
	s.replyAt = at
	t.replied++
	t.open--
	t.rtt = append(t.rtt, at.Sub(s.sent))
	reason := m.FinishReason
	if reason == "" {
		reason = "(none)"
	}
	t.finish[reason]++
	if at.After(t.lastReply) {
		t.lastReply = at
	}
}

// errorFrame counts an error frame by its code and text, with the message
// id and the peer id (which differ for every message and device failing
// the same way) replaced by placeholders.
func (t *tracker) errorFrame(e *link.Error, peerID string) {
	text := e.Error
	if e.MessageID != "" {
		text = strings.ReplaceAll(text, e.MessageID, "<message_id>")
	}
	if peerID != "" {
		text = strings.ReplaceAll(text, peerID, "<peer_id>")
	}
	if e.Code != "" {
		text = e.Code + ": " + text
	}
	t.errorText(text)
}

// errorText counts an error frame (lean mode) or EventError (client mode)
// by its text.
func (t *tracker) errorText(text string) {
	t.mu.Lock()
	t.errFrames++
	t.errText.add(text)
	t.mu.Unlock()
}

func (t *tracker) badFrame(err error) {
	t.mu.Lock()
	t.badFrames++
	t.badText.add(err.Error())
	t.mu.Unlock()
}

func (t *tracker) unexpectedFrame() {
	t.mu.Lock()
	t.unexpected++
	t.mu.Unlock()
}

// outstanding is the number of sent messages still without a reply.
func (t *tracker) outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

// repliedCount is the number of distinct messages answered so far.
func (t *tracker) repliedCount() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.replied
}

// writeLatencies writes one line per message sent (Options.Latencies):
// the send time (UnixNano), the ack's and the reply's delay after it in
// microseconds (-1: none), and the message id, in the order sent.
func (t *tracker) writeLatencies(w io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.msgs))
	for id := range t.msgs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return t.msgs[ids[i]].sent.Before(t.msgs[ids[j]].sent) })
	us := func(s *sendState, at time.Time) int64 {
		if at.IsZero() {
			return -1
		}
		return at.Sub(s.sent).Microseconds()
	}
	bw := bufio.NewWriter(w)
	for _, id := range ids {
		s := t.msgs[id]
		fmt.Fprintf(bw, "%d %d %d %s\n", s.sent.UnixNano(), us(s, s.ackAt), us(s, s.replyAt), id)
	}
	return bw.Flush()
}
