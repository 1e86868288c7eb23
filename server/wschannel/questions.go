package wschannel

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"termlink/link"
	"termlink/server/bus"
	"termlink/server/record"
	"termlink/server/router"
)

// Questions (issue 42, the "choice" extension). A run's question comes
// to Send as a bus.Question (its frame's JSON as the text) and goes to
// the peer's connection if it listed "choice" (on the fleet queue: held
// until connected is written, at most maxFleetQueue waiting). The
// adapter keeps each peer's open questions (a.questions), so a device
// that reconnects is sent them again right behind connected, each with
// the seconds it has left; a bus.QuestionClosed (answered, timed out,
// its run cancelled or ended) forgets one, and one past its deadline is
// forgotten too (its close lost on the way). The last closed questions'
// sessions are kept a while, so that a late answer goes to the session
// that asked and is told question_closed there.
//
// An answer frame is taken only from a connection that listed "choice"
// (else bad_frame, through the gate, as any answer frame nobody asked
// for), at the connection's message rate, and goes down the message path
// (Accepter: the store of record's ack and dedupe) marked as an answer
// (bus.Inbound.Answer) in the session of the question it names. The
// router answers it at once; its "reply" (FinishReason router.AnswerTaken
// or a refusal's code) is never sent as a message frame: taken, the ack
// said it all; refused, the device gets an error frame with the code and
// the answer's message_id. A resend after a lost ack is acked again, a
// refusal repeated.

const (
	maxQuestionsPerPeer = 8  // open; past it the oldest is forgotten
	maxClosedPerPeer    = 16 // closed questions' sessions kept per peer
	questionSweepEvery  = time.Minute
	closedKeep          = 10 * time.Minute
)

type keptQuestion struct {
	q        link.Question
	session  string
	deadline time.Time
}

type closedQuestion struct {
	id, session string
	at          time.Time
}

type peerQuestions struct {
	open   []*keptQuestion
	closed []closedQuestion
}

// openQuestions is what an adapter keeps of its peers' questions (a.mu).
type openQuestions struct {
	byPeer    map[string]*peerQuestions
	lastSweep time.Time
}

func (s *openQuestions) peer(id string, make_ bool) *peerQuestions {
	p := s.byPeer[id]
	if p == nil && make_ {
		if s.byPeer == nil {
			s.byPeer = map[string]*peerQuestions{}
		}
		p = &peerQuestions{}
		s.byPeer[id] = p
	}
	return p
}

func (s *openQuestions) put(peer, session string, q link.Question, now time.Time) {
	s.sweep(now)
	p := s.peer(peer, true)
	for _, k := range p.open {
		if k.q.QuestionID == q.QuestionID {
			return
		}
	}
	if len(p.open) >= maxQuestionsPerPeer {
		p.open = slices.Delete(p.open, 0, 1)
	}
	p.open = append(p.open, &keptQuestion{q: q, session: session, deadline: now.Add(time.Duration(q.TimeoutSeconds) * time.Second)})
}

func (s *openQuestions) close(peer, id string, now time.Time) {
	p := s.peer(peer, false)
	if p == nil {
		return
	}
	for i, k := range p.open {
		if k.q.QuestionID == id {
			p.open = slices.Delete(p.open, i, i+1)
			s.remember(p, id, k.session, now)
			break
		}
	}
	s.drop(peer, p)
}

func (s *openQuestions) remember(p *peerQuestions, id, session string, now time.Time) {
	if len(p.closed) >= maxClosedPerPeer {
		p.closed = slices.Delete(p.closed, 0, 1)
	}
	p.closed = append(p.closed, closedQuestion{id: id, session: session, at: now})
}

func (s *openQuestions) drop(peer string, p *peerQuestions) {
	if len(p.open) == 0 && len(p.closed) == 0 {
		delete(s.byPeer, peer)
	}
}

// sessionOf is the session of question id asked of peer, open or closed
// lately.
func (s *openQuestions) sessionOf(peer, id string) (string, bool) {
	p := s.peer(peer, false)
	if p == nil {
		return "", false
	}
	for _, k := range p.open {
		if k.q.QuestionID == id {
			return k.session, true
		}
	}
	for _, c := range p.closed {
		if c.id == id {
			return c.session, true
		}
	}
	return "", false
}

// of lists peer's open questions, oldest first, each with the seconds
// it has left.
func (s *openQuestions) of(peer string, now time.Time) []link.Question {
	s.sweep(now)
	p := s.peer(peer, false)
	if p == nil {
		return nil
	}
	var out []link.Question
	for _, k := range p.open {
		q := k.q
		q.TimeoutSeconds = int((k.deadline.Sub(now) + time.Second - 1) / time.Second)
		if q.TimeoutSeconds < 1 {
			continue
		}
		out = append(out, q)
	}
	return out
}

// sweep forgets the questions past their deadline and the closed ones
// kept long enough, at most once per questionSweepEvery.
func (s *openQuestions) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < questionSweepEvery {
		return
	}
	s.lastSweep = now
	for peer, p := range s.byPeer {
		p.open = slices.DeleteFunc(p.open, func(k *keptQuestion) bool {
			if now.After(k.deadline) {
				s.remember(p, k.q.QuestionID, k.session, now)
				return true
			}
			return false
		})
		p.closed = slices.DeleteFunc(p.closed, func(c closedQuestion) bool { return now.Sub(c.at) > closedKeep })
		s.drop(peer, p)
	}
}

// sendQuestionLike handles Send's question kinds and an answer's reply;
// handled false: out is none of them.
func (a *terminalAdapter) sendQuestionLike(out bus.Outbound) (sent, handled bool) {
	switch {
	case out.Kind == bus.Question:
		f, err := link.Decode([]byte(out.Text))
		q, ok := f.(*link.Question)
		if err != nil || !ok {
			a.log.Error("question not sent: its frame does not decode", "peer_id", out.PeerID, "err", err)
			return false, true
		}
		a.mu.Lock()
		a.questions.put(out.PeerID, out.SessionKey, *q, time.Now())
		c := a.peers[out.PeerID]
		a.mu.Unlock()
		if c == nil || !slices.Contains(c.caps, link.CapChoice) {
			return false, true
		}
		return c.offerQueued([]byte(out.Text)), true
	case out.Kind == bus.QuestionClosed:
		a.mu.Lock()
		a.questions.close(out.PeerID, out.Text, time.Now())
		a.mu.Unlock()
		return true, true
	case out.Kind == bus.Final && router.IsAnswerReason(out.FinishReason):
		if out.FinishReason == router.AnswerTaken {
			return true, true // the ack said it
		}
		a.mu.Lock()
		c := a.peers[out.PeerID]
		a.mu.Unlock()
		if c == nil {
			return false, true
		}
		return c.offerQueued(link.MustEncode(&link.Error{MessageID: out.MessageID, Code: out.FinishReason, Error: "answer " + out.MessageID + " refused: " + out.Text})), true
	}
	return false, false
}

// offerQueued queues an encoded frame on the connection's fleet queue
// (written once connected is, at most maxFleetQueue waiting).
func (c *wsConn) offerQueued(b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= connClosing || c.q != nil && len(c.q.fleet) >= maxFleetQueue {
		return false
	}
	q := c.busy()
	q.fleet = append(q.fleet, b)
	c.startWriterLocked()
	return true
}

// questionsOnConnect queues, right behind connected, the peer's open
// questions, if c listed "choice".
func (c *wsConn) questionsOnConnect() {
	if !slices.Contains(c.caps, link.CapChoice) {
		return
	}
	a := c.a
	a.mu.Lock()
	qs := a.questions.of(c.peerID, time.Now())
	a.mu.Unlock()
	for i := range qs {
		c.offerQueued(link.MustEncode(&qs[i]))
	}
}

// OpenQuestions lists the questions open on peer's device as this
// adapter knows them (asked of it here), oldest first, each with the
// seconds it has left.
func (a *terminalAdapter) OpenQuestions(peerID string) []link.Question {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.questions.of(peerID, time.Now())
}

// handleAnswer takes an answer frame down the message path.
func (c *wsConn) handleAnswer(f *link.Answer) {
	a := c.a
	switch {
	case c.peerID == "":
		c.reject(f.MessageID, link.CodeNotConnected, "send a connect frame with your peer_id before answer frames")
		return
	case !slices.Contains(c.caps, link.CapChoice):
		c.refuseFrame(link.CodeBadFrame, fmt.Sprintf("answer refused: this connection did not list the %q capability in its connect frame", link.CapChoice))
		return
	case !c.messageRate().take(time.Now()):
		c.reject(f.MessageID, link.CodeBusy, fmt.Sprintf("answer %s not accepted: peer %s sends faster than %d messages a second (burst %d, ratePerPeer); send it again later",
			f.MessageID, c.peerID, a.cfg.Config.RatePerPeer, a.cfg.Config.RateBurst))
		return
	}
	a.mu.Lock()
	key, ok := a.questions.sessionOf(c.peerID, f.QuestionID)
	a.mu.Unlock()
	if !ok {
		key = c.sessionKey // not asked here: the router of the device's own session tells
	}
	in := bus.Inbound{ChannelID: a.id, AccountID: a.cfg.AccountID, PeerID: c.peerID, ThreadID: threadOf(key, c.sessionKey, c.threadID()),
		UserID: c.userID(), SessionKey: key, MessageID: f.MessageID, Received: time.Now(), Capabilities: c.caps,
		Answer: &bus.AnswerRef{QuestionID: f.QuestionID, OptionID: f.OptionID}}
	c.acceptMessage(in, time.Time{})
}

// threadOf is the thread of session key: the connection's own, or the
// fourth part of a session id (channel:account:peer:thread).
func threadOf(key, connKey, connThread string) string {
	if key == connKey {
		return connThread
	}
	if parts := strings.Split(key, ":"); len(parts) == 4 {
		return parts[3]
	}
	return ""
}

// answerAck is the ack of an answer (res its accept's): acked, never
// with a reply; a resend of one refused gets its error frame again.
func (c *wsConn) answerAck(id, key string, res record.Accepted) {
	c.sendFrame(&link.Ack{MessageID: id, SessionID: key, Accepted: true, Duplicate: res.Duplicate, Pending: res.Pending})
	if r := res.Reply; r != nil && router.IsAnswerReason(r.FinishReason) && r.FinishReason != router.AnswerTaken {
		c.sendError(id, r.FinishReason, "answer "+id+" refused: "+r.Text)
	}
}
