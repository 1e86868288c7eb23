package terminal

import (
	"encoding/json"
	"errors"
	"time"

	"termlink/server/agent"
)

// maxQuestionIDBytes bounds a question frame's "id" (the agent's own
// name for it, echoed in the answer).
const maxQuestionIDBytes = 128

// answerLine is what an agent reads on stdin for its question: the
// option's id, or none (null) and why: "timeout", "cancelled",
// "unavailable" (the device cannot answer questions), "busy" (another
// question of this run is open) or "refused" (the question is out of
// bounds: Error says which field).
type answerLine struct {
	Type   string  `json:"type"` // "answer"
	ID     string  `json:"id"`
	Option *string `json:"option"`
	Reason string  `json:"reason,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// question handles a question frame: asked of the device through
// Request.Ask on a goroutine of the run's (the stdout reader goes on),
// its answer written to stdin as one answerLine.
func (s *runState) question(f Frame, line []byte) {
	bad := func(problem string) {
		s.log.Warn("agent frame dropped: "+problem, "line", preview(string(line)))
		if s.req.Event != nil {
			s.req.Event("agent_bad_frame", problem)
		}
	}
	switch {
	case !s.r.cfg.Questions:
		bad(`question frame from an agent not configured with "questions": true (its stdin is closed)`)
		return
	case f.Problem != "" && f.ID == "":
		bad(f.Problem)
		return
	case len(f.ID) > maxQuestionIDBytes:
		bad("question frame whose \"id\" is longer than 128 bytes")
		return
	case f.Problem != "":
		bad(f.Problem)
		s.answer(answerLine{ID: f.ID, Reason: "refused", Error: f.Problem})
		return
	case s.req.Ask == nil:
		s.answer(answerLine{ID: f.ID, Reason: "unavailable"})
		return
	}
	s.stdinMu.Lock()
	busy := s.asking
	s.asking = true
	s.stdinMu.Unlock()
	if busy {
		s.answer(answerLine{ID: f.ID, Reason: "busy"})
		return
	}
	q := agent.Question{Text: f.Text, Options: f.Options, Timeout: time.Duration(f.TimeoutSeconds) * time.Second}
	s.asks.Add(1)
	go func() {
		defer s.asks.Done()
		opt, err := s.req.Ask(s.askCtx, q)
		s.stdinMu.Lock()
		s.asking = false
		s.stdinMu.Unlock()
		a := answerLine{ID: f.ID}
		switch {
		case err == nil:
			a.Option = &opt
		case errors.Is(err, agent.ErrQuestionTimeout):
			a.Reason = "timeout"
		case errors.Is(err, agent.ErrQuestionCancelled) || s.askCtx.Err() != nil:
			a.Reason = "cancelled"
		default:
			a.Reason, a.Error = "refused", err.Error()
		}
		s.answer(a)
	}()
}

// answer writes a to the agent's stdin, after the envelope; a run that
// has ended (stdin closed) drops it.
func (s *runState) answer(a answerLine) {
	a.Type = "answer"
	b, err := json.Marshal(a)
	if err != nil {
		return
	}
	b = append(b, '\n')
	select {
	case <-s.enveloped:
	case <-s.askCtx.Done():
		return
	}
	s.stdinMu.Lock()
	defer s.stdinMu.Unlock()
	if _, err := s.stdin.Write(b); err != nil {
		s.log.Debug("writing an answer to the agent's stdin", "err", err)
	}
}
