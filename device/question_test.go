package device_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/device"
	"termlink/device/input"
	"termlink/display/console"
	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/link/linktest"
)

// askRig is termd's daemon answering questions: the emulated LCD
// (rows x cols) through the real HD44780 driver, a 4x4 keypad through
// the KeyGate and multi-tap entry, a client listing choice and screen
// with a file outbox in its state dir, and the scripted server.
type askRig struct {
	*rig
	srv    *linktest.Server
	client *link.Client
	mu     sync.Mutex
	opens  []bool // what QuestionOpen was told, in order
}

func startAsker(t *testing.T, srv *linktest.Server, state string, rows, cols int) *askRig {
	t.Helper()
	bus, lcd := emulatedLCD(t, rows, cols)
	client, err := link.NewClient(link.ClientConfig{URL: srv.URL(), PeerID: "desk-1", StateDir: state,
		Capabilities: append(link.DefaultCapabilities(), link.CapScreen, link.CapChoice),
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{bus: bus, keys: make(chan input.Event), done: make(chan error, 1), cancel: cancel, client: client}
	gate := device.NewKeyGate()
	gated := make(chan input.Event)
	actions := make(chan input.Action)
	inputs := make(chan device.Input)
	r.typing = newTypedClock(input.NewMultiTap(input.MultiTapOpts{Keys: input.Keys4x4(), Timeout: 150 * time.Millisecond}))
	go device.GateKeys(ctx, gate, r.keys, gated)
	go func() { _ = input.Drive(ctx, gated, r.typing, actions) }()
	go device.FromActions(ctx, actions, inputs)
	a := &askRig{rig: r, srv: srv, client: client}
	d := &device.Daemon{Client: client, View: framedView{View: &device.LCDView{Screen: lcd}, mu: &r.frame}, Inputs: inputs,
		Gate: gate, Logger: discard, QuestionOpen: func(open bool) {
			a.mu.Lock()
			a.opens = append(a.opens, open)
			a.mu.Unlock()
		}}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() { r.cancel(); <-r.done; r.done <- nil })
	return a
}

// stop stops the daemon (its cleanup then does nothing more).
func (a *askRig) stop() {
	a.cancel()
	err := <-a.done
	a.done <- err
}

func (a *askRig) opened() []bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]bool(nil), a.opens...)
}

func permission(id string, secs int) *link.Question {
	return &link.Question{MessageID: "m-1", QuestionID: id, Text: "Run rm -rf build?", TimeoutSeconds: secs,
		Options: []link.Option{{ID: "allow_once", Label: "Allow once"}, {ID: "allow_always", Label: "Always"}, {ID: "reject", Label: "Deny"}}}
}

func (a *askRig) ask(t *testing.T, q *link.Question) {
	t.Helper()
	if err := a.srv.Send(q); err != nil {
		t.Fatal(err)
	}
}

// answersOf returns the answer frames the server got for questionID.
func answersOf(srv *linktest.Server, questionID string) []*link.Answer {
	var out []*link.Answer
	for _, a := range srv.Answers() {
		if a.QuestionID == questionID {
			out = append(out, a)
		}
	}
	return out
}

// A question takes the 20x4 glass: its text, each option under its key,
// the time left; one key answers (nothing is typed), the server gets the
// answer frame with its own message id, the glass confirms with the
// label, the conversation returns with the question and the answer in
// it, the mirror carried the question, and the acked answer leaves the
// outbox. QuestionOpen is told open, then closed.
func TestQuestionAnsweredWithOneKey(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	a := startAsker(t, srv, t.TempDir(), 4, 20)
	a.waitGlass(t, "ok")
	if !strings.Contains(strings.Join(srv.Connect(0).Capabilities, ","), link.CapChoice) {
		t.Fatalf("connect lists %v, want choice", srv.Connect(0).Capabilities)
	}
	a.ask(t, permission("q-1", 60))
	g := a.waitGlass(t, "1 Allow once")
	want := []string{"Run rm -rf build?", "1 Allow once", "2 Always"}
	for i, w := range want {
		if strings.TrimRight(g[i], " ") != w {
			t.Fatalf("glass row %d %q, want %q; glass:\n%s", i, g[i], w, strings.Join(g, "\n"))
		}
	}
	if !strings.HasPrefix(g[3], "?1/2 #>") || !strings.HasSuffix(g[3], "s") {
		t.Fatalf("bottom row %q, want the page and the time left", g[3])
	}
	srv.WaitFor(t, "a screen frame with the question", 10*time.Second, func() bool {
		for _, s := range srv.Screens() {
			if strings.Contains(strings.Join(s.Rows, "|"), "1 Allow once") {
				return true
			}
		}
		return false
	})
	a.press("#") // the next page: the third option
	a.waitGlass(t, "3 Deny")
	a.press("3")
	a.waitGlass(t, "Deny")
	srv.WaitFor(t, "the answer", 10*time.Second, func() bool { return len(answersOf(srv, "q-1")) == 1 })
	ans := answersOf(srv, "q-1")[0]
	if ans.OptionID != "reject" || ans.MessageID == "" || ans.MessageID == "m-1" {
		t.Fatalf("answer %+v", ans)
	}
	g = a.waitGlass(t, "ok") // the conversation is back
	joined := strings.Join(g, "\n")
	if !strings.Contains(joined, "Deny") || strings.TrimSpace(g[3]) != "ok" {
		t.Fatalf("after the answer the glass shows:\n%s", joined)
	}
	testwait.Until(t, "the acked answer to leave the outbox", func() bool { return a.client.Status().Pending == 0 })
	testwait.Until(t, "QuestionOpen told open then closed", func() bool {
		o := a.opened()
		return len(o) == 2 && o[0] && !o[1]
	})
}

// On a 16x2 glass the question is paged a line at a time with its page
// and the time left on the bottom row; '*' pages back, wrapping around.
func TestQuestionPagedOn16x2(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	a := startAsker(t, srv, t.TempDir(), 2, 16)
	a.waitGlass(t, "ok")
	a.ask(t, permission("q-2", 600))
	g := a.waitGlass(t, "?1/5 #>")
	if strings.TrimRight(g[0], " ") != "Run rm -rf" || !strings.HasSuffix(g[1], "10m") {
		t.Fatalf("first page:\n%s", strings.Join(g, "\n"))
	}
	a.press("*") // back from the first page: the last one
	a.waitGlass(t, "3 Deny")
	a.waitGlass(t, "?5/5")
	a.press("1")
	a.waitGlass(t, "Allow once")
	srv.WaitFor(t, "the answer", 10*time.Second, func() bool { return len(answersOf(srv, "q-2")) == 1 })
	if got := answersOf(srv, "q-2")[0].OptionID; got != "allow_once" {
		t.Fatalf("answered %q", got)
	}
}

// A question whose time runs out on the device closes on the glass ("no
// answer in time"); no answer is sent, and a key then types as usual.
func TestQuestionTimesOutOnTheGlass(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	a := startAsker(t, srv, t.TempDir(), 4, 20)
	a.waitGlass(t, "ok")
	a.ask(t, permission("q-3", 2))
	a.waitGlass(t, "1 Allow once")
	a.waitGlass(t, "no answer in time")
	a.waitNoGlass(t, "1 Allow once")
	a.press("2 ") // types: the question is gone
	a.waitGlass(t, "a_")
	if n := len(srv.Answers()); n != 0 {
		t.Fatalf("%d answers sent for a question that timed out", n)
	}
}

// A second question waits behind the open one and opens when it is
// answered; the same question sent again (as after a reconnect) while
// open, or after it was answered, is not shown again.
func TestSecondQuestionQueuesAndResendIsNotShownTwice(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	a := startAsker(t, srv, t.TempDir(), 4, 20)
	a.waitGlass(t, "ok")
	second := &link.Question{MessageID: "m-2", QuestionID: "q-5", Text: "Push to main?", TimeoutSeconds: 60,
		Options: []link.Option{{ID: "yes", Label: "Yes"}, {ID: "no", Label: "No"}}}
	a.ask(t, permission("q-4", 60))
	a.waitGlass(t, "1 Allow once")
	a.ask(t, permission("q-4", 60)) // resent while open
	a.ask(t, second)
	a.press("1")
	a.waitGlass(t, "Push to main?")
	srv.Drop() // the server resends both open questions after the reconnect
	srv.WaitFor(t, "the reconnect", 10*time.Second, func() bool { return srv.Connects() == 2 })
	a.ask(t, permission("q-4", 60))
	a.ask(t, second)
	a.press("2")
	a.waitGlass(t, "No")
	a.waitGlass(t, "ok")
	srv.WaitFor(t, "the answers", 10*time.Second, func() bool { return len(answersOf(srv, "q-5")) == 1 })
	third := &link.Question{MessageID: "m-3", QuestionID: "q-6", Text: "Third?", TimeoutSeconds: 60,
		Options: []link.Option{{ID: "y", Label: "Yes"}, {ID: "n", Label: "No"}}}
	a.ask(t, third) // proves the resends before it were taken (and dropped)
	a.waitGlass(t, "Third?")
	if n, m := len(answersOf(srv, "q-4")), len(answersOf(srv, "q-5")); n != 1 || m != 1 {
		t.Fatalf("answers: q-4 %d, q-5 %d; want one each", n, m)
	}
	if got := answersOf(srv, "q-5")[0].OptionID; got != "no" {
		t.Fatalf("q-5 answered %q", got)
	}
}

// An answer the server did not ack stays in the outbox: resent after a
// reconnect with the same message id, and after a restart on the same
// state dir too, where the question the server resends is not shown
// again (it was answered); acked, it is sent no more.
func TestAnswerResentUntilAckedAcrossReconnectAndRestart(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	srv.OnAnswer(func(*linktest.Server, *link.Answer) {}) // no ack
	state := t.TempDir()
	a := startAsker(t, srv, state, 4, 20)
	a.waitGlass(t, "ok")
	a.ask(t, permission("q-7", 60))
	a.waitGlass(t, "1 Allow once")
	a.press("1")
	srv.WaitFor(t, "the answer", 10*time.Second, func() bool { return len(answersOf(srv, "q-7")) == 1 })
	id := answersOf(srv, "q-7")[0].MessageID
	srv.Drop()
	srv.WaitFor(t, "the answer again after the reconnect", 10*time.Second, func() bool { return len(answersOf(srv, "q-7")) == 2 })
	a.stop()

	var once sync.Once
	srv.OnAnswer(func(s *linktest.Server, ans *link.Answer) {
		// On connect the server resends the open question, as termserver
		// does, before it acks the answer.
		once.Do(func() { _ = s.Send(permission("q-7", 60)) })
		_ = s.Send(&link.Ack{MessageID: ans.MessageID, SessionID: "s", Accepted: true})
	})
	b := startAsker(t, srv, state, 4, 20)
	srv.WaitFor(t, "the answer after the restart", 10*time.Second, func() bool { return len(answersOf(srv, "q-7")) == 3 })
	testwait.Until(t, "the acked answer to leave the outbox", func() bool { return b.client.Status().Pending == 0 })
	b.waitGlass(t, "ok")
	// A question after it proves the resent one was taken and not shown.
	b.ask(t, &link.Question{MessageID: "m-9", QuestionID: "q-8", Text: "Next?", TimeoutSeconds: 60,
		Options: []link.Option{{ID: "y", Label: "Yes"}, {ID: "n", Label: "No"}}})
	b.waitGlass(t, "Next?")
	for i, ans := range answersOf(srv, "q-7") {
		if ans.MessageID != id || ans.OptionID != "allow_once" {
			t.Fatalf("send %d of the answer: %+v, want message id %s", i+1, ans, id)
		}
	}
	b.press("2")
	srv.WaitFor(t, "the answer to q-8", 10*time.Second, func() bool { return len(answersOf(srv, "q-8")) == 1 })
	if n := len(answersOf(srv, "q-7")); n != 3 {
		t.Fatalf("the acked answer was sent %d times, want 3 (first, after the reconnect, after the restart)", n)
	}
}

// An answer the server refuses for good (the question closed meanwhile,
// unknown, or an option it does not have) leaves the outbox, and the
// glass says why.
func TestAnswerRefusedShownOnTheGlass(t *testing.T) {
	t.Parallel()
	for code, says := range map[string]string{link.CodeQuestionClosed: "question closed",
		link.CodeQuestionUnknown: "question unknown", link.CodeBadAnswer: "answer refused"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			srv := linktest.New(t)
			srv.OnAnswer(func(s *linktest.Server, ans *link.Answer) {
				_ = s.Send(&link.Error{MessageID: ans.MessageID, Code: code, Error: "the run ended"})
			})
			a := startAsker(t, srv, t.TempDir(), 2, 16)
			a.waitGlass(t, "ok")
			a.ask(t, permission("q-9", 60))
			a.waitGlass(t, "?1/5")
			a.press("2")
			a.waitGlass(t, says)
			testwait.Until(t, "the refused answer to leave the outbox", func() bool { return a.client.Status().Pending == 0 })
			srv.Drop()
			srv.WaitFor(t, "the reconnect", 10*time.Second, func() bool { return srv.Connects() == 2 })
			a.waitGlass(t, "ok")
			if n := len(answersOf(srv, "q-9")); n != 1 {
				t.Fatalf("the refused answer was sent %d times, want once", n)
			}
		})
	}
}

// The countdown, with an injected clock: the bottom row counts down from
// timeout_seconds, and at the deadline the question closes.
func TestQuestionCountdownInjectedClock(t *testing.T) {
	t.Parallel()
	bus, lcd := emulatedLCD(t, 2, 16)
	v := &device.LCDView{Screen: lcd}
	t0 := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	var m device.Model
	if !m.AddQuestion(*permission("q-c", 90), t0) || m.AddQuestion(*permission("q-c", 90), t0) {
		t.Fatal("AddQuestion: the first must show, the second copy not")
	}
	for _, step := range []struct {
		after time.Duration
		want  string
	}{{0, "90s"}, {1500 * time.Millisecond, "89s"}, {60 * time.Second, "30s"}, {89 * time.Second, "1s"}} {
		now := t0.Add(step.after)
		if next := m.StepQuestions(now); !next.Equal(t0.Add(90 * time.Second)) {
			t.Fatalf("at +%v the next change is due %v, want the deadline", step.after, next)
		}
		if err := v.Render(context.Background(), &m, now); err != nil {
			t.Fatal(err)
		}
		if row := bus.Text()[1]; !strings.HasSuffix(row, " "+step.want) {
			t.Fatalf("at +%v the bottom row is %q, want it to end in %q", step.after, row, step.want)
		}
	}
	end := t0.Add(90 * time.Second)
	next := m.StepQuestions(end)
	if m.Ask != nil || m.Said.Text != "no answer in time" || !next.Equal(end.Add(device.ConfirmFor)) {
		t.Fatalf("at the deadline: ask %v, said %+v, next %v", m.Ask, m.Said, next)
	}
	if err := v.Render(context.Background(), &m, end); err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(bus.Text(), "|"); !strings.Contains(g, "no answer in") {
		t.Fatalf("glass at the deadline %q", g)
	}
	m.StepQuestions(end.Add(device.ConfirmFor))
	if m.Asking() {
		t.Fatal("the confirmation did not end after ConfirmFor")
	}
	for _, tt := range []struct {
		secs int
		want string
	}{{99, "99s"}, {100, "2m"}, {99 * 60, "99m"}, {99*60 + 1, "2h"}, {24 * 3600, "24h"}} {
		if got := device.TimeLeft(t0, t0.Add(time.Duration(tt.secs)*time.Second)); got != tt.want {
			t.Errorf("TimeLeft(%ds) = %q, want %q", tt.secs, got, tt.want)
		}
	}
}

// On the console the question is a line of the conversation with its
// options under their numbers, the activity line keeps the options and
// the time left in view (and the mirror carries it); a number and Enter
// answers, and so do the arrows and Enter.
func TestQuestionOnTheConsole(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	client, err := link.NewClient(link.ClientConfig{URL: srv.URL(), PeerID: "console-1", StateDir: t.TempDir(),
		Capabilities: append(link.DefaultCapabilities(), link.CapScreen, link.CapChoice), Logger: discard,
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	out := &syncbuf.Buffer{}
	pr, pw := io.Pipe()
	defer pw.Close()
	con := console.New(consoleRW{pr, out}, console.Opts{Width: 100, Height: 20, Logger: discard})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = con.Run(ctx) }()
	inputs := make(chan device.Input)
	go device.FromConsole(ctx, con.Events(), inputs)
	d := &device.Daemon{Client: client, View: &device.ConsoleView{Console: con}, Inputs: inputs, Logger: discard}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	srv.WaitFor(t, "the connect", 10*time.Second, func() bool { return srv.Connects() == 1 })
	if err := srv.Send(permission("q-con", 60)); err != nil {
		t.Fatal(err)
	}
	testwait.UntilOK(t, "the question on the console", func() error {
		s := out.String()
		if !strings.Contains(s, "Run rm -rf build?") || !strings.Contains(s, "[2] Always") || !strings.Contains(s, "its number (or arrows) and Enter") {
			return fmt.Errorf("output %q", s)
		}
		return nil
	})
	srv.WaitFor(t, "the question in the mirror", 10*time.Second, func() bool {
		for _, s := range srv.Screens() {
			if strings.Contains(strings.Join(s.Rows, "|"), "[3] Deny | its number (or arrows) and Enter") {
				return true
			}
		}
		return false
	})
	// Up from nothing picks the last option, down wraps to the first and
	// on to the second: Enter answers with it.
	if _, err := io.WriteString(pw, "\x1b[A\x1b[B\x1b[B\r"); err != nil {
		t.Fatal(err)
	}
	srv.WaitFor(t, "the answer", 10*time.Second, func() bool { return len(answersOf(srv, "q-con")) == 1 })
	if got := answersOf(srv, "q-con")[0].OptionID; got != "allow_always" {
		t.Fatalf("answered %q", got)
	}
	testwait.UntilOK(t, "the confirmation on the console", func() error {
		if !strings.Contains(out.String(), "✓ Always") {
			return fmt.Errorf("output %q", out.String())
		}
		return nil
	})
	if n := len(srv.Messages()); n != 0 {
		t.Fatalf("the answer's key also went out as %d messages", n)
	}
}

// Questions queue behind the open one in order; one whose time ran out
// while it waited is closed without being shown; QuestionRefused names
// the option whose answer was refused.
func TestQuestionQueueModel(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	var m device.Model
	q := func(id string, secs int) link.Question {
		return link.Question{MessageID: "m", QuestionID: id, Text: "Question " + id, TimeoutSeconds: secs,
			Options: []link.Option{{ID: "y", Label: "Yes"}, {ID: "n", Label: "No"}}}
	}
	m.MarkAnswered("q-0")
	if m.AddQuestion(q("q-0", 60), t0) {
		t.Fatal("a question answered before (its answer in the outbox) was shown")
	}
	for _, add := range []struct {
		id   string
		secs int
	}{{"q-1", 60}, {"q-2", 5}, {"q-3", 60}} {
		if !m.AddQuestion(q(add.id, add.secs), t0) {
			t.Fatalf("%s not taken", add.id)
		}
	}
	if m.Ask == nil || m.Ask.Q.QuestionID != "q-1" {
		t.Fatalf("open %+v, want q-1", m.Ask)
	}
	opt, ok := m.OptionKey('2')
	if !ok || opt.ID != "n" {
		t.Fatalf("key 2: %+v %v", opt, ok)
	}
	if _, ok := m.OptionKey('3'); ok {
		t.Fatal("key 3 answers a question of two options")
	}
	m.Answered(opt, "a-1", t0.Add(10*time.Second)) // q-2 ran out meanwhile
	if m.Ask == nil || m.Ask.Q.QuestionID != "q-3" || m.Said.Text != "✓ No" {
		t.Fatalf("after the answer: open %+v, said %+v; want q-3 and the confirmation", m.Ask, m.Said)
	}
	var texts []string
	for _, e := range m.Entries {
		texts = append(texts, e.Text)
	}
	joined := strings.Join(texts, "|")
	if !strings.Contains(joined, "no answer in time: Question q-2") || strings.Contains(joined, "? Question q-2") {
		t.Fatalf("conversation %q: q-2 must be closed unseen", joined)
	}
	m.QuestionRefused(link.Event{Kind: link.EventError, MessageID: "a-1", QuestionID: "q-1", Code: link.CodeQuestionClosed, Final: true}, t0.Add(11*time.Second))
	if last := m.Entries[len(m.Entries)-1].Text; last != "question closed: No not sent" {
		t.Fatalf("refusal line %q", last)
	}
}
