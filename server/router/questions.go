package router

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
)

// Questions (issue 42, the "choice" extension): a run of a message whose
// device listed "choice" gets a Request.Ask. Ask names the question
// (QuestionID: the run's id and a count, unique per server), keeps it
// open here (r.questions), has the Host send it to the device
// (Host.Question: the way progress goes, so it reaches the device on
// whatever node holds it) and waits for the answer, the question's
// timeout or the end of the run. Then the question is closed: the Host
// tells the device's adapter (Host.QuestionClosed), and its id is kept
// among the closed ones (bounded: maxClosedQuestions), so that a late
// answer is told question_closed rather than question_unknown.
//
// An answer is a message of the question's session (bus.Inbound.Answer)
// that came through the store of record like any other (its ack and
// dedupe are the store's), so it comes to Put; Put never queues it
// behind the session's running message: it hands the option to the
// waiting Ask at once, and the answer is answered (recorded, its Final
// sent) with FinishReason AnswerTaken or the code of its refusal
// (link.CodeQuestionClosed, CodeQuestionUnknown, CodeBadAnswer), which
// the adapter turns into nothing (the ack said it all) or an error frame.

// AnswerTaken is the FinishReason of an answer that reached its question.
const AnswerTaken = "answer_taken"

// IsAnswerReason reports whether reason is what an answer message is
// answered with (AnswerTaken or a refusal's code).
func IsAnswerReason(reason string) bool {
	switch reason {
	case AnswerTaken, link.CodeQuestionClosed, link.CodeQuestionUnknown, link.CodeBadAnswer:
		return true
	}
	return false
}

// maxOpenQuestions bounds the questions open at once on this server (a
// variable for tests): past it Ask refuses the question.
var maxOpenQuestions = 4096

// maxClosedQuestions bounds the closed questions' ids kept (past it
// the oldest are forgotten: an answer to one is question_unknown).
const maxClosedQuestions = 4096

type openQuestion struct {
	q        link.Question
	session  string
	deadline time.Time
	answer   chan string // the option, once answered (buffered: 1)
	done     bool        // answered or closed (r.mu)
}

// closedQuestions remembers the ids of closed questions with their session.
type closedQuestions struct {
	session map[string]string
	order   []string
}

func (c *closedQuestions) add(id, session string) {
	if c.session == nil {
		c.session = map[string]string{}
	}
	if _, ok := c.session[id]; ok {
		return
	}
	if len(c.order) >= maxClosedQuestions {
		delete(c.session, c.order[0])
		c.order[0] = ""
		c.order = c.order[1:]
	}
	c.order = append(c.order, id)
	c.session[id] = session
}

// ask is Request.Ask of the run of in (runCtx: the run's context, ended
// when it is cancelled or returns).
func (r *Router) ask(runCtx, ctx context.Context, in bus.Inbound, n *int, aq agent.Question) (string, error) {
	timeout := aq.Timeout
	if timeout <= 0 {
		timeout = agent.DefaultQuestionTimeout
	}
	secs := int64((timeout + time.Second - 1) / time.Second)
	if secs > link.MaxQuestionSeconds {
		return "", fmt.Errorf("question timeout %s is past the most, %d s", timeout, link.MaxQuestionSeconds)
	}
	r.mu.Lock()
	*n++
	id := "q-" + in.RunID + "-" + strconv.Itoa(*n)
	r.mu.Unlock()
	q := link.Question{MessageID: in.MessageID, QuestionID: id, Text: aq.Text, Options: aq.Options, TimeoutSeconds: int(secs)}
	if err := checkQuestion(&q); err != nil {
		return "", err
	}
	oq := &openQuestion{q: q, session: in.SessionKey, deadline: time.Now().Add(timeout), answer: make(chan string, 1)}
	r.mu.Lock()
	if r.stopped || runCtx.Err() != nil {
		r.mu.Unlock()
		return "", agent.ErrQuestionCancelled
	}
	if len(r.questions) >= maxOpenQuestions {
		r.mu.Unlock()
		return "", fmt.Errorf("question refused: %d questions are open on this server, its most", maxOpenQuestions)
	}
	r.questions[id] = oq
	r.mu.Unlock()
	r.host.Question(r.runCtx, in, q)

	t := time.NewTimer(timeout)
	defer t.Stop()
	var why error
	select {
	case opt := <-oq.answer:
		r.host.QuestionClosed(r.runCtx, in, id)
		return opt, nil
	case <-t.C:
		why = agent.ErrQuestionTimeout
	case <-ctx.Done():
		why = agent.ErrQuestionCancelled
	case <-runCtx.Done():
		why = agent.ErrQuestionCancelled
	}
	r.mu.Lock()
	answered := oq.done // just now: the answer was acked, so it counts
	if !answered {
		r.closeQuestionLocked(oq)
	}
	r.mu.Unlock()
	r.host.QuestionClosed(r.runCtx, in, id)
	if answered {
		return <-oq.answer, nil
	}
	return "", why
}

// closeQuestionLocked closes oq (r.mu held).
func (r *Router) closeQuestionLocked(oq *openQuestion) {
	oq.done = true
	delete(r.questions, oq.q.QuestionID)
	r.closedQs.add(oq.q.QuestionID, oq.session)
}

// checkQuestion applies link's bounds to q: encoded and decoded as the
// device would, so the error names the field.
func checkQuestion(q *link.Question) error {
	b, err := link.Encode(q)
	if err == nil {
		_, err = link.Decode(b)
	}
	if err != nil {
		return fmt.Errorf("question refused: %w", err)
	}
	return nil
}

// answerOf is the answer a message carries, if it is one: marked by its
// adapter, or (recovered after a restart, the mark not in the log) by
// its recorded text.
func answerOf(in *bus.Inbound) *bus.AnswerRef {
	if in.Answer != nil {
		return in.Answer
	}
	if in.Recovered {
		if a, ok := bus.ParseAnswerText(in.Text); ok {
			return &a
		}
	}
	return nil
}

// takeAnswer settles answer a (message in) at once, never behind the
// session's running message: the option goes to the open question it
// names, and the message is answered with what became of it (r.mu held).
func (r *Router) takeAnswerLocked(in bus.Inbound, a bus.AnswerRef) {
	r.admission.Release(in.SessionKey, 1)
	var res agent.Result
	oq := r.questions[a.QuestionID]
	switch {
	case oq != nil && oq.session == in.SessionKey:
		o, ok := oq.q.Option(a.OptionID)
		if !ok {
			res = agent.Result{Text: fmt.Sprintf("question %s has no option %q", a.QuestionID, a.OptionID), FinishReason: link.CodeBadAnswer}
			break
		}
		r.closeQuestionLocked(oq)
		oq.answer <- o.ID
		res = agent.Result{Text: "answered: " + o.Label, FinishReason: AnswerTaken}
	case r.closedQs.session[a.QuestionID] == in.SessionKey && in.SessionKey != "":
		res = agent.Result{Text: "question " + a.QuestionID + " is closed (answered, timed out, or its run cancelled or ended)", FinishReason: link.CodeQuestionClosed}
	default:
		res = agent.Result{Text: "question " + a.QuestionID + " was never asked of this device", FinishReason: link.CodeQuestionUnknown}
	}
	r.wg.Add(1)
	r.goroutines.Run(job{f: func() {
		defer r.wg.Done()
		answer, ok := r.host.Start(r.runCtx, r.runCtx, in)
		if !ok {
			return
		}
		if answer != nil {
			res = *answer
		}
		r.host.Started(in)
		r.host.Finished(r.runCtx, in, res, 0, nil)
	}})
}

// OpenQuestions lists the questions open in the sessions of the peer
// whose thread-less session id is base (the fleet API's device page),
// each with the seconds it has left as its TimeoutSeconds, by id.
func (r *Router) OpenQuestions(base string) []link.Question {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []link.Question
	for _, oq := range r.questions {
		if oq.session == base || strings.HasPrefix(oq.session, base+":") {
			q := oq.q
			q.TimeoutSeconds = max(0, int((oq.deadline.Sub(now)+time.Second-1)/time.Second))
			out = append(out, q)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].QuestionID < out[j].QuestionID })
	return out
}
