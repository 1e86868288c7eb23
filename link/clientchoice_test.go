package link_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/link/linktest"
)

func testQuestion(id string) *link.Question {
	return &link.Question{MessageID: "m-1", QuestionID: id, Text: "Run rm -rf build?", TimeoutSeconds: 60,
		Options: []link.Option{{ID: "allow_once", Label: "Allow once"}, {ID: "reject", Label: "Deny"}}}
}

// questionsOf returns the EventQuestion events d collected.
func questionsOf(d *device) []*link.Question {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*link.Question
	for _, e := range d.all {
		if e.Kind == link.EventQuestion {
			out = append(out, e.Question)
		}
	}
	return out
}

// finalOf returns the final event d collected for message id.
func finalOf(d *device, id string) (link.Event, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return finalLocked(d, id)
}

// finalLocked is finalOf with d.mu held (in waitFor's cond).
func finalLocked(d *device, id string) (link.Event, bool) {
	for _, e := range d.all {
		if e.Final && e.MessageID == id {
			return e, true
		}
	}
	return link.Event{}, false
}

func answersWith(srv *linktest.Server, id string) int {
	n := 0
	for _, a := range srv.Answers() {
		if a.MessageID == id {
			n++
		}
	}
	return n
}

// A question frame becomes an EventQuestion; the answer goes out as an
// answer frame with its own message id, its ack is its final event
// (with the question's id), and once confirmed it leaves the outbox: a
// reconnect does not send it again.
func TestClientQuestionAnsweredAcked(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	cfg := link.ClientConfig{URL: srv.URL(), Capabilities: append(link.DefaultCapabilities(), link.CapChoice)}
	fastRetry(&cfg)
	d := newDevice(t, cfg)
	srv.WaitFor(t, "the connect", 10*time.Second, func() bool { return srv.Connects() == 1 })
	if caps := srv.Connect(0).Capabilities; !slices.Contains(caps, link.CapChoice) {
		t.Fatalf("connect lists %v, want choice", caps)
	}
	if err := srv.Send(testQuestion("q-1")); err != nil {
		t.Fatal(err)
	}
	d.waitFor("the question event", 0, func() bool {
		return slices.ContainsFunc(d.all, func(e link.Event) bool { return e.Kind == link.EventQuestion })
	})
	qs := questionsOf(d)
	if len(qs) != 1 || qs[0].QuestionID != "q-1" || len(qs[0].Options) != 2 || qs[0].Options[1].Label != "Deny" || qs[0].MessageID != "m-1" {
		t.Fatalf("question events %+v", qs)
	}
	id, err := d.Answer(context.Background(), "q-1", "reject")
	if err != nil {
		t.Fatal(err)
	}
	d.waitFor("the answer's final ack", 0, func() bool {
		for _, e := range d.all {
			if e.Final && e.MessageID == id {
				return true
			}
		}
		return false
	})
	ev, _ := finalOf(d, id)
	if ev.Kind != link.EventAck || ev.QuestionID != "q-1" {
		t.Fatalf("final event %v (question %q), want the ack of q-1's answer", ev, ev.QuestionID)
	}
	a := srv.Answers()
	if len(a) != 1 || a[0].MessageID != id || a[0].QuestionID != "q-1" || a[0].OptionID != "reject" {
		t.Fatalf("server got answers %+v", a)
	}
	testwait.Until(t, "the answer to leave the outbox", func() bool { return d.Status().Pending == 0 })
	// A reconnect sends it no more: a message after the reconnect
	// proves the device has resent whatever it would.
	srv.Drop()
	srv.WaitFor(t, "the reconnect", 10*time.Second, func() bool { return srv.Connects() == 2 })
	mid := d.send("after")
	srv.WaitFor(t, "the message after the reconnect", 10*time.Second, func() bool {
		return slices.ContainsFunc(srv.Messages(), func(m *link.Message) bool { return m.MessageID == mid })
	})
	if n := len(srv.Answers()); n != 1 {
		t.Fatalf("the acked answer reached the server %d times, want once", n)
	}
	if st := d.Stats(); st.Questions != 1 || st.Answers != 1 {
		t.Fatalf("stats: %d questions, %d answers acked; want 1, 1", st.Questions, st.Answers)
	}
}

// An answer the server did not ack is sent again after a reconnect with
// the same message id, and only its first ack is final.
func TestClientAnswerResentUntilAcked(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	srv.OnAnswer(func(*linktest.Server, *link.Answer) {}) // no ack
	cfg := link.ClientConfig{URL: srv.URL(), Capabilities: append(link.DefaultCapabilities(), link.CapChoice)}
	fastRetry(&cfg)
	d := newDevice(t, cfg)
	srv.WaitFor(t, "the connect", 10*time.Second, func() bool { return srv.Connects() == 1 })
	id, err := d.Answer(context.Background(), "q-7", "allow_once")
	if err != nil {
		t.Fatal(err)
	}
	srv.WaitFor(t, "the answer", 10*time.Second, func() bool { return answersWith(srv, id) == 1 })
	srv.OnAnswer(func(s *linktest.Server, a *link.Answer) {
		// Acked twice: the second copy is no second final event.
		_ = s.Send(&link.Ack{MessageID: a.MessageID, SessionID: "s", Accepted: true},
			&link.Ack{MessageID: a.MessageID, SessionID: "s", Accepted: true, Duplicate: true})
	})
	srv.Drop()
	srv.WaitFor(t, "the answer sent again", 10*time.Second, func() bool { return answersWith(srv, id) == 2 })
	d.waitFor("the final ack", 0, func() bool { _, ok := finalLocked(d, id); return ok })
	if a := srv.Answers(); a[1].QuestionID != "q-7" || a[1].OptionID != "allow_once" {
		t.Fatalf("resent answer %+v", a[1])
	}
	mid := d.send("after")
	d.waitFor("the ack of the message after", 0, func() bool {
		return slices.ContainsFunc(d.acks, func(a *link.Ack) bool { return a.MessageID == mid })
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.all {
		if e.MessageID == id && e.Final {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d final events for the answer, want 1", n)
	}
}

// An answer stored while offline survives a restart on the same state
// dir: the next client lists it (with its question and option) and sends
// it with the same message id.
func TestClientAnswerSurvivesRestart(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	state := t.TempDir()
	c, err := link.NewClient(link.ClientConfig{URL: srv.URL(), PeerID: "dev-1", StateDir: state, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Answer(context.Background(), "q-9", "reject")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // never ran: nothing was sent
		t.Fatal(err)
	}
	cfg := link.ClientConfig{URL: srv.URL(), PeerID: "dev-1", StateDir: state, Logger: discard}
	fastRetry(&cfg)
	// Listed by a client that has not run yet: one that runs may have
	// sent it and had it acked before Pending is read (it did in CI).
	c, err = link.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pending()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p[0].ID != id || p[0].QuestionID != "q-9" || p[0].OptionID != "reject" || !p[0].IsAnswer() {
		t.Fatalf("pending after the restart %+v", p)
	}
	d := newDevice(t, cfg)
	srv.WaitFor(t, "the answer", 10*time.Second, func() bool { return answersWith(srv, id) == 1 })
	d.waitFor("the final ack", 0, func() bool { _, ok := finalLocked(d, id); return ok })
	testwait.Until(t, "the outbox to be empty", func() bool { return d.Status().Pending == 0 })
}

// An answer the server refuses (question closed, unknown, bad option) is
// a final error event naming the question and the code; confirmed, it
// leaves the outbox and is not resent; the link stays up.
func TestClientAnswerRefused(t *testing.T) {
	t.Parallel()
	for _, code := range []string{link.CodeQuestionClosed, link.CodeQuestionUnknown, link.CodeBadAnswer} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			srv := linktest.New(t)
			srv.OnAnswer(func(s *linktest.Server, a *link.Answer) {
				_ = s.Send(&link.Error{MessageID: a.MessageID, Code: code, Error: "no such open question"})
			})
			cfg := link.ClientConfig{URL: srv.URL()}
			fastRetry(&cfg)
			d := newDevice(t, cfg)
			id, err := d.Answer(context.Background(), "q-3", "allow_once")
			if err != nil {
				t.Fatal(err)
			}
			d.waitFor("the final refusal", 0, func() bool { _, ok := finalLocked(d, id); return ok })
			ev, _ := finalOf(d, id)
			if ev.Kind != link.EventError || ev.Code != code || ev.QuestionID != "q-3" {
				t.Fatalf("final event %v question %q, want error %s of q-3", ev, ev.QuestionID, code)
			}
			testwait.Until(t, "the answer to leave the outbox", func() bool { return d.Status().Pending == 0 })
			mid := d.send("after")
			srv.WaitFor(t, "the message after", 10*time.Second, func() bool {
				return slices.ContainsFunc(srv.Messages(), func(m *link.Message) bool { return m.MessageID == mid })
			})
			if n, c := answersWith(srv, id), srv.Connects(); n != 1 || c != 1 {
				t.Fatalf("the refused answer was sent %d times over %d connections, want once over 1", n, c)
			}
		})
	}
}

// Answer refuses what cannot be an answer.
func TestClientAnswerBadArguments(t *testing.T) {
	t.Parallel()
	c, err := link.NewClient(link.ClientConfig{URL: "ws://127.0.0.1:1/x", PeerID: "p", Outbox: link.NewMemoryOutbox()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, a := range [][2]string{{"", "x"}, {"q", ""}} {
		if _, err := c.Answer(context.Background(), a[0], a[1]); err != link.ErrBadAnswer {
			t.Errorf("Answer(%q, %q) = %v, want ErrBadAnswer", a[0], a[1], err)
		}
	}
	id, err := c.Answer(context.Background(), "q", "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(context.Background(), id); err != link.ErrUnknownMessage {
		t.Fatalf("Cancel of an answer: %v, want ErrUnknownMessage", err)
	}
}

// termserver acks an answer when it has stored it, and refuses it after
// when its question turns out closed (the run was cancelled, timed out;
// in a cluster the edge acks, the run's node refuses): the ack is the
// answer's final event, and the refusal that follows still names its
// question, so that the glass can say what became of it.
func TestClientAnswerRefusedAfterItsAck(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	srv.OnAnswer(func(s *linktest.Server, a *link.Answer) {
		_ = s.Send(&link.Ack{MessageID: a.MessageID, SessionID: "s"})
		_ = s.Send(&link.Error{MessageID: a.MessageID, Code: link.CodeQuestionClosed, Error: "the run was cancelled"})
	})
	cfg := link.ClientConfig{URL: srv.URL()}
	fastRetry(&cfg)
	d := newDevice(t, cfg)
	id, err := d.Answer(context.Background(), "q-5", "allow_once")
	if err != nil {
		t.Fatal(err)
	}
	d.waitFor("the refusal after the ack", 0, func() bool {
		for _, e := range d.all {
			if e.Kind == link.EventError && e.MessageID == id {
				return true
			}
		}
		return false
	})
	d.mu.Lock()
	var final, refused []link.Event
	for _, e := range d.all {
		if e.MessageID != id {
			continue
		}
		if e.Final {
			final = append(final, e)
		}
		if e.Kind == link.EventError {
			refused = append(refused, e)
		}
	}
	d.mu.Unlock()
	if len(final) != 1 || final[0].Kind != link.EventAck {
		t.Fatalf("final events %v, want the ack alone", final)
	}
	if len(refused) != 1 || refused[0].QuestionID != "q-5" || refused[0].Code != link.CodeQuestionClosed || refused[0].Final {
		t.Fatalf("refusal %+v, want question_closed of q-5, not final", refused)
	}
	if s := d.Status(); s.Pending != 0 {
		t.Fatalf("pending %d after the ack, want 0", s.Pending)
	}
	if srv.Connects() != 1 {
		t.Fatalf("the refusal after the ack made the link reconnect (%d connects)", srv.Connects())
	}
}
