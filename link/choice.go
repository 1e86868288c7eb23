package link

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Questions (issue 42, extension, capability "choice"): an agent asks the
// person at the device to pick one of a few options — an ACP permission
// request ("run `rm -rf build`?": allow once / always / reject), a plan to
// confirm, a menu — and the device answers with one key.
//
//	question  server -> device   a question of a running message's agent, with 2-9 options
//	answer    device -> server   the option picked: a message for delivery purposes
//
// An answer is a message for delivery purposes: it has its own
// message_id, the server acks it (ack.message_id), deduplicates it, and
// the device keeps it in its outbox across reconnects and restarts until
// acked, so that it reaches the agent exactly once. An answer to a
// question that is closed (answered, timed out, its run cancelled or
// ended) gets an error frame (CodeQuestionClosed) and changes
// nothing. A question still open when its device reconnects is sent
// again. A device that did not list "choice" never gets a question.
const (
	TypeQuestion Type = "question"
	TypeAnswer   Type = "answer"
)

// CapChoice: the device shows questions with their options, one key per
// option, and sends the one picked as an answer.
const CapChoice = "choice"

// Error codes of an answer refused (Error.Code, with Error.MessageID the
// answer's): CodeQuestionClosed, the question is no longer open
// (answered, timed out, its run cancelled or ended); CodeQuestionUnknown,
// it was never asked of this peer; CodeBadAnswer, the option is not one
// of the question's. Each is final: the device drops the answer from its
// outbox and shows why.
const (
	CodeQuestionClosed  = "question_closed"
	CodeQuestionUnknown = "question_unknown"
	CodeBadAnswer       = "bad_answer"
)

// Bounds of a question: at least MinOptions and at most MaxOptions
// options (one key each: 1-9); an option's id at most MaxOptionIDBytes,
// its label MaxOptionLabelBytes; the question's id MaxFleetIDBytes; its
// text MaxQuestionTextBytes (what a reply's text may be: a frame's);
// TimeoutSeconds from 1 to MaxQuestionSeconds.
const (
	MinOptions           = 2
	MaxOptions           = 9
	MaxOptionIDBytes     = 64
	MaxOptionLabelBytes  = 64
	MaxQuestionTextBytes = 16 << 10
	MaxQuestionSeconds   = 24 * 60 * 60
)

// Option is one answer a question offers: ID is what the answer names
// (an ACP option's optionId), Label what the glass shows.
type Option struct {
	ID    string `json:"id"`
	Label string `json:"label"`
}

// Question (extension) asks the person at a device that listed "choice"
// to pick one of Options. MessageID is the device's message whose run
// asks it; QuestionID names it (unique per server); TimeoutSeconds is how
// long it stays open from when it was first asked (the device counts
// down from its arrival; the server's clock decides).
type Question struct {
	MessageID      string   `json:"message_id"`
	QuestionID     string   `json:"question_id"`
	Text           string   `json:"text"`
	Options        []Option `json:"options"`
	TimeoutSeconds int      `json:"timeout_seconds"`
}

// Answer (extension) is the option a person picked for QuestionID:
// MessageID is the answer's own id (acked and deduplicated as a message
// is), OptionID one of the question's options' ids.
type Answer struct {
	MessageID  string `json:"message_id"`
	QuestionID string `json:"question_id"`
	OptionID   string `json:"option_id"`
}

func (*Question) FrameType() Type { return TypeQuestion }
func (*Answer) FrameType() Type   { return TypeAnswer }

// Option returns the option of q with id, if any.
func (q *Question) Option(id string) (Option, bool) {
	for _, o := range q.Options {
		if o.ID == id {
			return o, true
		}
	}
	return Option{}, false
}

// choiceProblem checks a decoded question or answer: the field at fault
// and what is wrong with it, or "", "".
func choiceProblem(f Frame) (field, msg string) {
	const missing = "is missing or empty"
	switch f := f.(type) {
	case *Question:
		if field, msg := choiceIDsProblem(f.MessageID, f.QuestionID); field != "" {
			return field, msg
		}
		switch {
		case f.Text == "":
			return "text", missing
		case len(f.Text) > MaxQuestionTextBytes:
			return "text", tooLong(len(f.Text), MaxQuestionTextBytes)
		case len(f.Options) < MinOptions || len(f.Options) > MaxOptions:
			return "options", fmt.Sprintf("must hold %d to %d options, got %d", MinOptions, MaxOptions, len(f.Options))
		case f.TimeoutSeconds < 1 || f.TimeoutSeconds > MaxQuestionSeconds:
			return "timeout_seconds", fmt.Sprintf("must be from 1 to %d, got %s", MaxQuestionSeconds, strconv.Itoa(f.TimeoutSeconds))
		}
		seen := make(map[string]bool, len(f.Options))
		for i, o := range f.Options {
			at := "options[" + strconv.Itoa(i) + "]"
			switch {
			case o.ID == "":
				return at + ".id", missing
			case len(o.ID) > MaxOptionIDBytes:
				return at + ".id", tooLong(len(o.ID), MaxOptionIDBytes)
			case seen[o.ID]:
				return at + ".id", fmt.Sprintf("%q names an earlier option too", o.ID)
			case o.Label == "":
				return at + ".label", missing
			case len(o.Label) > MaxOptionLabelBytes:
				return at + ".label", tooLong(len(o.Label), MaxOptionLabelBytes)
			case !utf8.ValidString(o.Label) || hasControl(o.Label):
				return at + ".label", "holds a control character"
			}
			seen[o.ID] = true
		}
	case *Answer:
		if field, msg := choiceIDsProblem(f.MessageID, f.QuestionID); field != "" {
			return field, msg
		}
		switch {
		case f.OptionID == "":
			return "option_id", missing
		case len(f.OptionID) > MaxOptionIDBytes:
			return "option_id", tooLong(len(f.OptionID), MaxOptionIDBytes)
		}
	}
	return "", ""
}

// choiceIDsProblem checks the ids a question and an answer both carry.
func choiceIDsProblem(messageID, questionID string) (field, msg string) {
	const missing = "is missing or empty"
	switch {
	case messageID == "":
		return "message_id", missing
	case len(messageID) > MaxFleetIDBytes:
		return "message_id", tooLong(len(messageID), MaxFleetIDBytes)
	case questionID == "":
		return "question_id", missing
	case len(questionID) > MaxFleetIDBytes:
		return "question_id", tooLong(len(questionID), MaxFleetIDBytes)
	}
	return "", ""
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}
