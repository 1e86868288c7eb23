package link

import (
	"context"
	"errors"
)

// Questions and answers (capability "choice", see choice.go) on the
// client's side. A question frame becomes an EventQuestion. An answer
// (Client.Answer) is an entry of the outbox like a message: stored
// before it is sent, sent in outbox order, resent with the same
// message_id after every reconnect and restart until its final answer.
// Its final answer is the server's ack (EventAck with Final set) or a
// refusal (EventError with Final set, Code CodeQuestionClosed,
// CodeQuestionUnknown, CodeBadAnswer or CodeBadMessage); either waits for
// Client.Delivered like a reply does, and then the answer leaves the
// outbox.

// ErrBadAnswer is returned by Answer for an empty question or option id.
var ErrBadAnswer = errors.New("link: an answer needs a question id and an option id")

// Answer stores the answer optionID to the question questionID in the
// outbox (durably, for the file outbox) and returns the answer's message
// id; it goes out as soon as the link is up, and again after every
// reconnect until the server acks or refuses it. Answer works before
// Run and while offline.
func (c *Client) Answer(ctx context.Context, questionID, optionID string) (string, error) {
	if questionID == "" || optionID == "" || len(questionID) > MaxFleetIDBytes || len(optionID) > MaxOptionIDBytes {
		return "", ErrBadAnswer
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.store(func() (OutboxEntry, error) { return c.outbox.AddAnswer(questionID, optionID) })
}

// frame is the frame that sends m: an answer or a message.
func (m *outMsg) frame() []byte {
	if m.questionID != "" {
		return MustEncode(&Answer{MessageID: m.id, QuestionID: m.questionID, OptionID: m.optionID})
	}
	return MustEncode(&Message{MessageID: m.id, Text: m.text})
}

// question hands a question frame to the caller.
func (c *Client) question(q *Question) {
	c.questions.Add(1)
	c.log.Debug("question received", "question_id", q.QuestionID, "message_id", q.MessageID, "options", len(q.Options), "timeout_seconds", q.TimeoutSeconds)
	qc := *q
	qc.Options = append([]Option(nil), q.Options...)
	c.emit(Event{Kind: EventQuestion, MessageID: q.MessageID, Question: &qc})
}

// answerAcked takes an ack: when it is the ack of an answer waiting for
// its final answer, that is its final answer (true). An ack of an answer
// answered already (a second copy) is dropped (true).
func (s *session) answerAcked(f *Ack) bool {
	c := s.c
	c.mu.Lock()
	m := c.msgs[f.MessageID]
	if m == nil || m.questionID == "" {
		c.mu.Unlock()
		return false
	}
	ok := c.answerLocked(m)
	qid := m.questionID
	c.mu.Unlock()
	delete(s.inflight, f.MessageID)
	if !ok {
		c.dupReplies.Add(1)
		return true
	}
	if s.busyB != nil {
		s.busyB.Reset() // the server takes messages again
	}
	c.answersAcked.Add(1)
	ack := *f
	ack.Reply = nil
	c.emit(Event{Kind: EventAck, MessageID: f.MessageID, QuestionID: qid, Ack: &ack, Final: true})
	return true
}

// isAnswerRefusal reports whether code refuses an answer for good.
func isAnswerRefusal(code string) bool {
	switch code {
	case CodeQuestionClosed, CodeQuestionUnknown, CodeBadAnswer:
		return true
	}
	return false
}
