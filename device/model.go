package device

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"time"

	"termlink/link"
)

// Role says who wrote an entry of the conversation.
type Role uint8

// Roles.
const (
	User Role = iota
	Assistant
	System // notices and errors from termd itself
)

// Delivery is where a user's message is.
type Delivery uint8

// Deliveries, in order.
const (
	Queued   Delivery = iota // in the outbox, not acknowledged yet
	Accepted                 // acked by the server; the agent is on it
	Answered                 // the reply arrived
	Failed                   // refused by the server
)

// Entry is one message in the conversation.
type Entry struct {
	Role      Role
	Text      string
	MessageID string
	Delivery  Delivery // User entries
	Finish    string   // Assistant entries: the reply's finish_reason
	Seq       uint64   // 1, 2, ... in the order entries were added
	// Streaming marks an Assistant entry whose text is still being
	// written (deltas, capability stream): the final reply replaces its
	// text in place and clears it.
	Streaming bool
}

// MaxEntries bounds the conversation a device keeps.
const MaxEntries = 100

// Model is what the device shows. It is owned by one goroutine (the
// daemon's); views read it while drawing.
type Model struct {
	Entries []Entry

	// Compose is the text being typed; ComposePending marks that its last
	// character is a multi-tap letter not yet committed.
	Compose        string
	ComposePending bool
	Mode           string // keypad text mode ("abc", "ABC", "123"), when there is one

	Link      link.State
	NextTry   time.Time // StateWaiting: when the next dial starts
	Reason    string    // why the link is offline
	SessionID string

	Progress string // the agent's latest progress text, while busy
	Unread   bool   // more (of an answer, of the conversation) is below the page shown (LCD)
	Stopping bool   // termd is shutting down
	// Storage is a short label (at most 13 characters, for a 16x2
	// screen) of why the state dir cannot be written and messages are
	// kept in memory; empty while storage works.
	Storage string

	// Overlay is what takes over the screen (a notice, the idle screen);
	// Dark turns the backlight off (idle, or an alert's blink). Set by the
	// daemon's kiosk behaviour (see Kiosk).
	Overlay Overlay
	Dark    bool

	// Ask is the question open on the screen (capability choice; see
	// question.go), Said what became of the last one, shown briefly.
	Ask  *Ask
	Said Said

	seq   uint64
	qs    questions
	pager pager
}

// pager is where the LCD's page of the conversation is. It follows the
// newest lines unless pinned: then its top is line top.line of the entry
// with Seq top.seq, wherever that entry now is (entries are dropped from
// the front, and wrapping depends on the screen). Page moves wait in moves
// until the next layout (Window), which knows the page size.
type pager struct {
	pinned bool
	top    struct {
		seq  uint64
		line int
	}
	moves int // pages forward (+) or back (-) asked for since the last layout
}

// PageUp asks for the page before the one shown.
func (m *Model) PageUp() { m.pager.moves-- }

// PageDown asks for the page after the one shown.
func (m *Model) PageDown() { m.pager.moves++ }

// Window lays out the conversation page: lineSeq holds, for each wrapped
// line of the conversation in order, the Seq of the entry it belongs to,
// and page is the number of rows for it. It applies the page moves asked
// for and returns the index of the first line to show; the page is
// lineSeq[start:min(start+page, len(lineSeq))], full whenever there are
// enough lines. The first page (top) is full too, and a new answer longer
// than a page opens at its first line.
func (m *Model) Window(lineSeq []uint64, page int) (start int) {
	page = max(page, 1)
	bottom := max(len(lineSeq)-page, 0)
	cur := bottom
	if p := &m.pager; p.pinned {
		first := -1 // the pinned entry's first line
		for i, seq := range lineSeq {
			if seq >= p.top.seq {
				first = i
				break
			}
		}
		switch {
		case first < 0: // the entry has no lines (any more)
		case lineSeq[first] != p.top.seq: // dropped: the oldest line left
			cur = first
		default:
			cur = first + p.top.line
			if cur >= len(lineSeq) || lineSeq[cur] != p.top.seq {
				cur = first // the entry now wraps to fewer lines
			}
		}
	}
	cur += m.pager.moves * page
	m.pager.moves = 0
	cur = min(max(cur, 0), bottom)
	if cur == bottom {
		m.pager.pinned, m.Unread = false, false
		return bottom
	}
	seq := lineSeq[cur]
	line := 0
	for i := cur - 1; i >= 0 && lineSeq[i] == seq; i-- {
		line++
	}
	m.pager.pinned = true
	m.pager.top.seq, m.pager.top.line = seq, line
	m.Unread = true // more is below the page
	return cur
}

// Busy reports whether a message waits for its answer.
func (m *Model) Busy() bool {
	for i := range m.Entries {
		if e := &m.Entries[i]; e.Role == User && (e.Delivery == Queued || e.Delivery == Accepted) {
			return true
		}
	}
	return false
}

// Pending returns the newest message id still waiting for its answer.
func (m *Model) Pending() string {
	for i := len(m.Entries) - 1; i >= 0; i-- {
		if e := &m.Entries[i]; e.Role == User && (e.Delivery == Queued || e.Delivery == Accepted) {
			return e.MessageID
		}
	}
	return ""
}

func (m *Model) add(e Entry) {
	m.seq++
	e.Seq = m.seq
	m.Entries = append(m.Entries, e)
	if over := len(m.Entries) - MaxEntries; over > 0 {
		m.Entries = append(m.Entries[:0], m.Entries[over:]...)
	}
}

func (m *Model) find(messageID string) *Entry {
	for i := len(m.Entries) - 1; i >= 0; i-- {
		if m.Entries[i].Role == User && m.Entries[i].MessageID == messageID {
			return &m.Entries[i]
		}
	}
	return nil
}

// Sent records a message the user sent (it is in the outbox).
func (m *Model) Sent(messageID, text string) {
	m.add(Entry{Role: User, Text: text, MessageID: messageID, Delivery: Queued})
	m.pager = pager{} // back to the newest lines
	m.Unread = false
}

// Notice adds a line from termd itself.
func (m *Model) Notice(text string) { m.add(Entry{Role: System, Text: text}) }

// Apply updates the model with an event of the link client.
func (m *Model) Apply(ev link.Event) {
	switch ev.Kind {
	case link.EventState:
		m.Link, m.NextTry = ev.State, ev.NextTry
		if ev.Reason != "" { // the last failure's reason stays while connecting again
			m.Reason = ev.Reason
		}
		if ev.State == link.StateConnected {
			m.SessionID, m.Reason = ev.SessionID, ""
		}
	case link.EventAck:
		if e := m.find(ev.MessageID); e != nil && e.Delivery == Queued {
			e.Delivery = Accepted
		}
	case link.EventProgress:
		m.Progress = ev.Text
	case link.EventDelta:
		m.delta(ev)
	case link.EventReply:
		if ev.Reply == nil || m.answered(ev.MessageID) {
			return // shown once, even if it came twice
		}
		if e := m.find(ev.MessageID); e != nil {
			e.Delivery = Answered
		}
		streamed := m.streaming(ev.MessageID)
		text := ev.Reply.Text
		switch ev.Reply.FinishReason {
		case "", link.FinishStop:
		case link.FinishCancelled:
			text = "(cancelled) " + text
		default:
			text = fmt.Sprintf("(%s) %s", ev.Reply.FinishReason, text)
		}
		if streamed != nil {
			// The reply supersedes the stream in place: the page stays
			// where the user is (following the newest lines, or pinned
			// where they read back); no jump to the answer's first line.
			streamed.Text, streamed.Finish, streamed.Streaming = strings.TrimSpace(text), ev.Reply.FinishReason, false
			if !m.Busy() {
				m.Progress = ""
			}
			if m.pager.pinned {
				m.Unread = true
			}
			return
		}
		m.add(Entry{Role: Assistant, Text: strings.TrimSpace(text), MessageID: ev.MessageID, Finish: ev.Reply.FinishReason})
		if !m.Busy() {
			m.Progress = ""
		}
		if m.pager.pinned {
			m.Unread = true // the user reads back: the page stays
		} else {
			// Open the answer at its first line; Window follows the newest
			// lines again when it fits the page.
			m.pager.pinned = true
			m.pager.top.seq, m.pager.top.line = m.seq, 0
			m.Unread = true
		}
	case link.EventStorage:
		label := StorageLabel(ev.Err)
		switch {
		case label == m.Storage:
		case label == "":
			m.Notice("disk ok again")
		default:
			m.Notice(label + ": using memory") // two lines of 16
		}
		m.Storage = label
	case link.EventError:
		if ev.MessageID == "" && m.Link == link.StateConnecting {
			// The server refused the connect: that is the reason of the
			// next offline state, shown on the status line, not a line of
			// the conversation at every retry.
			return
		}
		if ev.MessageID != "" {
			if e := m.find(ev.MessageID); e != nil && e.Delivery != Answered {
				e.Delivery = Failed
			}
			if ev.Final {
				if e := m.streaming(ev.MessageID); e != nil {
					e.Streaming = false // refused: nothing more comes
				}
			}
		}
		msg := "error"
		if ev.Err != nil {
			msg = ev.Err.Error()
		}
		m.Notice(msg)
	}
}

// answered reports whether the final answer to messageID is shown
// already.
func (m *Model) answered(messageID string) bool {
	for i := range m.Entries {
		if e := &m.Entries[i]; e.Role == Assistant && e.MessageID == messageID && !e.Streaming {
			return true
		}
	}
	return false
}

// streaming returns the entry of messageID's answer still being written,
// or nil.
func (m *Model) streaming(messageID string) *Entry {
	for i := len(m.Entries) - 1; i >= 0; i-- {
		if e := &m.Entries[i]; e.Role == Assistant && e.Streaming && e.MessageID == messageID {
			return e
		}
	}
	return nil
}

// Streaming reports whether an answer is being written now.
func (m *Model) Streaming() bool {
	for i := range m.Entries {
		if m.Entries[i].Streaming {
			return true
		}
	}
	return false
}

// delta shows the text of an answer so far (all of it: the client
// accumulates the deltas): the first one adds the answer's entry, the
// next ones replace its text. The page follows the newest lines unless
// the user reads back (then '+' says more is below).
func (m *Model) delta(ev link.Event) {
	if m.answered(ev.MessageID) {
		return // the final answer is shown: it supersedes the stream
	}
	text := strings.TrimSpace(ev.Text)
	e := m.streaming(ev.MessageID)
	switch {
	case e != nil:
		e.Text = text
	case text == "":
		return // nothing to show yet
	default:
		m.add(Entry{Role: Assistant, Text: text, MessageID: ev.MessageID, Streaming: true})
		m.Progress = "" // the agent now writes its answer ("thinking" is over); a later progress shows again
	}
	if m.pager.pinned {
		m.Unread = true
	}
}

// StorageLabel names a storage error in at most 13 characters (the text
// field of a 16x2 screen): "disk full", "disk readonly", "disk denied" or
// "disk error"; "" for nil.
func StorageLabel(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "disk full"
	case errors.Is(err, syscall.EROFS):
		return "disk readonly"
	case errors.Is(err, fs.ErrPermission):
		return "disk denied"
	}
	return "disk error"
}

// Queued counts the messages not yet acknowledged by the server.
func (m *Model) Queued() int {
	n := 0
	for i := range m.Entries {
		if e := &m.Entries[i]; e.Role == User && e.Delivery == Queued {
			n++
		}
	}
	return n
}

// ShortReason is the short form of why the link is offline (see
// link.ShortReason: "unknown CA", "token refused", "no server" ...); ""
// while online or before the first failure.
func (m *Model) ShortReason() string {
	if m.Link == link.StateConnected || m.Stopping {
		return ""
	}
	return link.ShortReason(m.Reason)
}

// LinkText says where the link is, with the short reason it is offline
// and the seconds to the next try: "offline (unknown CA): retry in 14s".
func (m *Model) LinkText(now time.Time) string {
	switch {
	case m.Stopping:
		return "offline: stopped"
	case m.Link == link.StateConnected:
		return "online"
	case m.Link == link.StateWaiting && m.Reason != "":
		return fmt.Sprintf("offline (%s): retry in %ds", m.ShortReason(), secondsUntil(now, m.NextTry))
	case m.Link == link.StateWaiting:
		return fmt.Sprintf("offline: retry in %ds", secondsUntil(now, m.NextTry))
	case m.Link == link.StateClosed:
		return "offline"
	default:
		return "connecting"
	}
}

func secondsUntil(now, t time.Time) int {
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}
