// Package bus holds the two messages of the server's path: Inbound, one
// accepted user message (an adapter hands it to the runtime, the store of
// record hands it to the router, the router to an agent.Runner), and
// Outbound, a reply or progress on its way back (the store of record hands
// it to the runtime, which hands it to the channel's adapter). They are
// passed by call, not through queues: the waiting bounds are the router's
// Admission, and each adapter's Send never blocks.
package bus

import (
	"strings"
	"time"
)

// Inbound is one accepted user message, as nanobot's InboundMessage with the
// channel identity of the terminal channel spelled out.
type Inbound struct {
	ChannelID  string
	AccountID  string
	PeerID     string
	ThreadID   string
	UserID     string
	SessionKey string // <channel_id>:<account_id>:<peer_id>[:<thread_id>]
	MessageID  string
	RunID      string
	Text       string
	Media      []string
	Received   time.Time
	// Capabilities the device listed in connect.
	Capabilities []string
	// Recovered marks a message found accepted and unanswered at start-up:
	// its run records that it runs again before it starts (a restart that
	// cuts this run short too answers it with an error instead).
	Recovered bool
	// Delivery tells the copies of one message apart in a cluster worker
	// (which delivery from the partition's consumer this copy is): a copy
	// left queued from before a partition moved must not run as the copy
	// delivered after it. 0 elsewhere.
	Delivery uint64 `json:"-"`
	// Answer marks a device's answer to a question (link.Answer, the
	// "choice" extension): it rides the message path for its ack and
	// dedupe, and the router hands it to the run that asked instead of
	// starting one. Text is then AnswerText's.
	Answer *AnswerRef `json:",omitempty"`
	// Ref is the store of record's own handle on the message's state, set
	// by its Accept before the message goes to the router, which carries
	// it to the store's Start and Finish: they need not look the message
	// up again (record/local: its dedupe entry). nil: they look it up.
	// Only the store that set it reads it; never serialized.
	Ref any `json:"-"`
}

// AnswerRef is the question and option an answer message names.
type AnswerRef struct {
	QuestionID string `json:"question_id"`
	OptionID   string `json:"option_id"`
}

// AnswerPrefix starts the Text an answer message is recorded with
// (AnswerText): a message recovered after a restart, whose Answer is not
// in the session log, is known for one by it.
const AnswerPrefix = "[answer "

// AnswerText is the text an answer is recorded with in the session log:
// "[answer QUESTION_ID] OPTION_ID".
func AnswerText(a AnswerRef) string { return AnswerPrefix + a.QuestionID + "] " + a.OptionID }

// ParseAnswerText reads AnswerText's form back.
func ParseAnswerText(text string) (AnswerRef, bool) {
	rest, ok := strings.CutPrefix(text, AnswerPrefix)
	if !ok {
		return AnswerRef{}, false
	}
	q, o, ok := strings.Cut(rest, "] ")
	if !ok || q == "" || o == "" || strings.ContainsAny(q, " ]") {
		return AnswerRef{}, false
	}
	return AnswerRef{QuestionID: q, OptionID: o}, true
}

// ChatID is the chat identifier agents see: the peer id, plus the thread.
func (m *Inbound) ChatID() string {
	if m.ThreadID != "" {
		return m.PeerID + ":" + m.ThreadID
	}
	return m.PeerID
}

// Kind tells a final reply from an interim progress update.
type Kind uint8

const (
	// Final is the one reply that answers a message_id.
	Final Kind = iota
	// Progress is an interim update for devices that asked for progress.
	Progress
	// Delta is reply text as the agent writes it, for devices that asked
	// for "stream": Text is all the text of the run so far (each Delta
	// of a run extends the one before it), so a device that connects
	// mid-run, or misses one, is sent what it lacks. Not recorded; the
	// Final reply carries the whole text.
	Delta
	// Question is a question of a run for a device that listed "choice":
	// Text is the link.Question frame's JSON (so it travels wherever a
	// progress update does). Not recorded; the adapter keeps the peer's
	// open questions for a reconnect.
	Question
	// QuestionClosed says the question whose id is Text is no longer
	// open (answered, timed out, its run cancelled or ended).
	QuestionClosed
)

// Outbound is a reply (or progress) on its way to a device.
type Outbound struct {
	Kind         Kind
	ChannelID    string
	PeerID       string
	SessionKey   string
	MessageID    string
	RunID        string
	Text         string
	FinishReason string
	Media        []string
	Started      time.Time // when the message was accepted, for latency metrics
}
