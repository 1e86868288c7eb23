package router

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/bus"
)

// questionHost records the questions sent and the results of the
// messages answered.
type questionHost struct {
	host
	asked   chan link.Question
	closed  chan string
	results chan finishedAs
}

type finishedAs struct {
	id  string
	res agent.Result
}

func newQuestionHost() *questionHost {
	return &questionHost{asked: make(chan link.Question, 8), closed: make(chan string, 8), results: make(chan finishedAs, 8)}
}

func (h *questionHost) Question(_ context.Context, _ bus.Inbound, q link.Question) { h.asked <- q }
func (h *questionHost) QuestionClosed(_ context.Context, _ bus.Inbound, id string) { h.closed <- id }
func (h *questionHost) Finished(_ context.Context, in bus.Inbound, res agent.Result, _ time.Duration, _ *bus.Inbound) {
	h.results <- finishedAs{in.MessageID, res}
}

// asker asks each message's text with the options yes and no and
// answers with the option, or the error.
type asker struct{ timeout time.Duration }

func (a asker) Run(ctx context.Context, req agent.Request, _ agent.Progress) agent.Result {
	if req.Ask == nil {
		return agent.Result{Text: "no ask"}
	}
	id, err := req.Ask(ctx, agent.Question{Text: req.Text, Options: []link.Option{{ID: "yes", Label: "Yes"}, {ID: "no", Label: "No"}}, Timeout: a.timeout})
	if err != nil {
		return agent.Result{Text: "error: " + err.Error()}
	}
	return agent.Result{Text: "chose " + id}
}
func (asker) Close() error { return nil }

func putMsg(t *testing.T, r *Router, adm *Admission, in bus.Inbound) {
	t.Helper()
	if err := adm.Reserve(in.SessionKey, 10); err != nil {
		t.Fatal(err)
	}
	r.Put(in)
}

func answerMsg(id, q, opt string) bus.Inbound {
	return bus.Inbound{ChannelID: "c", SessionKey: "s", MessageID: id, Answer: &bus.AnswerRef{QuestionID: q, OptionID: opt}}
}

// An answer reaches the run asking at once, though the run is its
// session's running message; a bad option leaves the question open, an
// answer after it closed is question_closed, one never asked
// question_unknown.
func TestAnswerReachesTheRunAsking(t *testing.T) {
	h := newQuestionHost()
	adm := NewAdmission(100)
	r := New(h, adm, map[string]agent.Runner{"c": asker{}}, t.TempDir(), 1)
	defer r.Stop(context.Background())
	putMsg(t, r, adm, bus.Inbound{ChannelID: "c", SessionKey: "s", MessageID: "m1", Text: "sure?", Capabilities: []string{link.CapChoice}})
	q := <-h.asked
	if q.MessageID != "m1" || q.Text != "sure?" || len(q.Options) != 2 || q.TimeoutSeconds != int(agent.DefaultQuestionTimeout/time.Second) {
		t.Fatalf("question %+v", q)
	}
	if got := r.OpenQuestions("s"); len(got) != 1 || got[0].QuestionID != q.QuestionID || got[0].TimeoutSeconds < 1 {
		t.Fatalf("open questions %+v", got)
	}
	putMsg(t, r, adm, answerMsg("a0", q.QuestionID, "maybe"))
	if f := <-h.results; f.id != "a0" || f.res.FinishReason != link.CodeBadAnswer {
		t.Fatalf("bad option answered %+v", f)
	}
	putMsg(t, r, adm, answerMsg("a1", q.QuestionID, "yes"))
	got := map[string]agent.Result{}
	for range 2 {
		f := <-h.results
		got[f.id] = f.res
	}
	if got["a1"].FinishReason != AnswerTaken || got["m1"].Text != "chose yes" {
		t.Fatalf("results %+v", got)
	}
	if id := <-h.closed; id != q.QuestionID {
		t.Fatalf("closed %q", id)
	}
	putMsg(t, r, adm, answerMsg("a2", q.QuestionID, "no"))
	if f := <-h.results; f.id != "a2" || f.res.FinishReason != link.CodeQuestionClosed {
		t.Fatalf("late answer %+v", f)
	}
	putMsg(t, r, adm, answerMsg("a3", "q-nope", "no"))
	if f := <-h.results; f.id != "a3" || f.res.FinishReason != link.CodeQuestionUnknown {
		t.Fatalf("unknown answer %+v", f)
	}
	if n := adm.Waiting(); n != 0 {
		t.Fatalf("%d waiting places held after the answers", n)
	}
}

// A question times out on its own clock, and is closed: the device's
// adapter is told, and a later answer is question_closed.
func TestQuestionTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newQuestionHost()
		adm := NewAdmission(100)
		r := New(h, adm, map[string]agent.Runner{"c": asker{timeout: 30 * time.Second}}, t.TempDir(), 1)
		defer r.Stop(context.Background())
		putMsg(t, r, adm, bus.Inbound{ChannelID: "c", SessionKey: "s", MessageID: "m1", Text: "sure?", Capabilities: []string{link.CapChoice}})
		q := <-h.asked
		if q.TimeoutSeconds != 30 {
			t.Fatalf("timeout_seconds %d", q.TimeoutSeconds)
		}
		closedThenRefused(t, r, adm, h, q.QuestionID, agent.ErrQuestionTimeout)
	})
}

// closedThenRefused checks that question id was closed, that its run
// ended with why, and that an answer sent after is question_closed.
func closedThenRefused(t *testing.T, r *Router, adm *Admission, h *questionHost, id string, why error) {
	t.Helper()
	if got := <-h.closed; got != id {
		t.Fatalf("closed %q, want %q", got, id)
	}
	if f := <-h.results; f.res.Text != "error: "+why.Error() {
		t.Fatalf("run answered %+v, want the error %q", f, why)
	}
	putMsg(t, r, adm, answerMsg("a1", id, "yes"))
	if f := <-h.results; f.res.FinishReason != link.CodeQuestionClosed {
		t.Fatalf("answer after the close %+v", f)
	}
}

// A cancel closes the question the run waits on.
func TestCancelClosesQuestion(t *testing.T) {
	h := newQuestionHost()
	adm := NewAdmission(100)
	r := New(h, adm, map[string]agent.Runner{"c": asker{}}, t.TempDir(), 1)
	defer r.Stop(context.Background())
	putMsg(t, r, adm, bus.Inbound{ChannelID: "c", SessionKey: "s", MessageID: "m1", Text: "sure?", Capabilities: []string{link.CapChoice}})
	q := <-h.asked
	if !r.Cancel("s", "m1") {
		t.Fatal("cancel found no run")
	}
	closedThenRefused(t, r, adm, h, q.QuestionID, agent.ErrQuestionCancelled)
}

// A device without "choice" gets no Ask; a question out of link's bounds
// is refused naming the field; an answer recovered after a restart (its
// mark only in its text) is still an answer.
func TestAskBounds(t *testing.T) {
	h := newQuestionHost()
	adm := NewAdmission(100)
	r := New(h, adm, map[string]agent.Runner{"c": asker{}}, t.TempDir(), 1)
	defer r.Stop(context.Background())
	putMsg(t, r, adm, bus.Inbound{ChannelID: "c", SessionKey: "s", MessageID: "m1", Text: "sure?"})
	if f := <-h.results; f.res.Text != "no ask" {
		t.Fatalf("run without choice %+v", f)
	}
	_, err := r.ask(context.Background(), context.Background(), bus.Inbound{RunID: "r", MessageID: "m", SessionKey: "s"}, new(int),
		agent.Question{Text: "x", Options: []link.Option{{ID: "a", Label: "A"}}})
	if err == nil || !strings.Contains(err.Error(), "options") {
		t.Fatalf("one option: %v", err)
	}
	in := bus.Inbound{ChannelID: "c", SessionKey: "s", MessageID: "a9", Recovered: true, Text: bus.AnswerText(bus.AnswerRef{QuestionID: "q-x", OptionID: "yes"})}
	putMsg(t, r, adm, in)
	if f := <-h.results; f.res.FinishReason != link.CodeQuestionUnknown {
		t.Fatalf("recovered answer %+v", f)
	}
}

// Past maxOpenQuestions open at once, Ask refuses a question, naming the
// bound; the open ones are unaffected.
func TestOpenQuestionsBounded(t *testing.T) {
	defer func(n int) { maxOpenQuestions = n }(maxOpenQuestions)
	maxOpenQuestions = 1
	h := newQuestionHost()
	adm := NewAdmission(100)
	r := New(h, adm, map[string]agent.Runner{"c": asker{}}, t.TempDir(), 2)
	stopNow, cancel := context.WithCancel(context.Background())
	cancel()
	defer r.Stop(stopNow) // the open question's run is cut short
	putMsg(t, r, adm, bus.Inbound{ChannelID: "c", SessionKey: "s1", MessageID: "m1", Text: "one?", Capabilities: []string{link.CapChoice}})
	<-h.asked
	putMsg(t, r, adm, bus.Inbound{ChannelID: "c", SessionKey: "s2", MessageID: "m2", Text: "two?", Capabilities: []string{link.CapChoice}})
	if f := <-h.results; f.id != "m2" || !strings.Contains(f.res.Text, "1 questions are open on this server") {
		t.Fatalf("second question %+v", f)
	}
	if got := r.OpenQuestions("s1"); len(got) != 1 {
		t.Fatalf("open %+v", got)
	}
}
