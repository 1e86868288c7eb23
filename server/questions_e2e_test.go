package server

import (
	"strings"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
)

// Questions end to end (issue 42, the "choice" extension) with a raw
// WebSocket device speaking link's codec and the built-in echo's
// "/ask TEXT".

// withEchoAsk sets how long echo's "/ask" question stays open.
func withEchoAsk(seconds int) func(*config.Config) {
	return func(c *config.Config) {
		a := c.Agents["echo"]
		b := *a.Builtin
		b.AskTimeoutSeconds = seconds
		a.Builtin = &b
		c.Agents["echo"] = a
	}
}

// choiceDevice is a device that listed choice; frames is what it read,
// in order, as short strings.
type choiceDevice struct {
	*client
}

func newChoiceDevice(t *testing.T, ts *testServer, peer string, caps ...string) *choiceDevice {
	c := dial(t, ts.ws, nil)
	c.connect(peer, append([]string{link.CapText, link.CapChoice}, caps...)...)
	return &choiceDevice{client: c}
}

// until reads frames until pred says done; it returns them all.
func (d *choiceDevice) until(pred func(f link.Frame) bool) []link.Frame {
	d.t.Helper()
	var got []link.Frame
	for {
		f := d.read()
		got = append(got, f)
		if pred(f) {
			return got
		}
	}
}

// question sends "/ask TEXT" as message id and returns the question.
func (d *choiceDevice) question(id, text string) *link.Question {
	d.t.Helper()
	d.send(&link.Message{MessageID: id, Text: "/ask " + text})
	var q *link.Question
	d.until(func(f link.Frame) bool {
		q, _ = f.(*link.Question)
		return q != nil
	})
	if q.MessageID != id || q.Text != text || len(q.Options) != 2 || q.Options[0].ID != "yes" || q.Options[1].ID != "no" {
		d.t.Fatalf("question %+v", q)
	}
	return q
}

// reply reads frames until the reply to id; it fails on an error frame.
func (d *choiceDevice) reply(id string) *link.Message {
	d.t.Helper()
	var m *link.Message
	d.until(func(f link.Frame) bool {
		if e, ok := f.(*link.Error); ok {
			d.t.Fatalf("error frame %+v while waiting for the reply to %s", e, id)
		}
		m, _ = f.(*link.Message)
		return m != nil && m.MessageID == id
	})
	return m
}

// answerRefused sends an answer and wants its ack, then an error frame
// with code.
func (d *choiceDevice) answerRefused(a *link.Answer, code string) {
	d.t.Helper()
	d.send(a)
	if ack := readAs[*link.Ack](d.client); ack.MessageID != a.MessageID || ack.Reply != nil {
		d.t.Fatalf("ack %+v", ack)
	}
	if e := readAs[*link.Error](d.client); e.MessageID != a.MessageID || e.Code != code {
		d.t.Fatalf("error %+v, want code %s", e, code)
	}
}

// Echo's /ask answered yes: "You chose: yes". A bad option first is
// bad_answer and leaves the question open; a second answer after it is
// question_closed; an answer to a question never asked question_unknown.
func TestAskAnsweredEndToEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	d := newChoiceDevice(t, ts, "kiosk")

	d.answerRefused(&link.Answer{MessageID: "a0", QuestionID: "q-never", OptionID: "yes"}, link.CodeQuestionUnknown)
	q := d.question("m1", "Deploy now?")
	d.answerRefused(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "maybe"}, link.CodeBadAnswer)
	d.send(&link.Answer{MessageID: "a2", QuestionID: q.QuestionID, OptionID: "yes"})
	frames := d.until(func(f link.Frame) bool { m, ok := f.(*link.Message); return ok && m.MessageID == "m1" })
	var acked bool
	for _, f := range frames {
		switch f := f.(type) {
		case *link.Ack:
			acked = acked || f.MessageID == "a2" && f.Reply == nil && !f.Duplicate
		case *link.Error, *link.Message:
			if m, ok := f.(*link.Message); !ok || m.MessageID != "m1" {
				t.Fatalf("unexpected %+v", f)
			}
		}
	}
	if m := frames[len(frames)-1].(*link.Message); !acked || m.Text != "You chose: yes" {
		t.Fatalf("acked %v, reply %+v", acked, m)
	}
	d.answerRefused(&link.Answer{MessageID: "a3", QuestionID: q.QuestionID, OptionID: "no"}, link.CodeQuestionClosed)
	// The question is answered: nothing of it comes again on a reconnect.
	d.ws.Close()
	d2 := newChoiceDevice(t, ts, "kiosk")
	d2.alive()
}

// An answer whose ack was lost is sent again on a new connection: acked
// again (a duplicate), and the run took it once.
func TestAnswerResentAfterReconnectEndToEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	d := newChoiceDevice(t, ts, "kiosk")
	q := d.question("m1", "Ship it?")
	d.send(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "no"})
	ts.waitEvent(t, "inbound_accepted", "a1")
	d.ws.Close() // its ack and the reply never read

	d2 := newChoiceDevice(t, ts, "kiosk")
	d2.send(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "no"})
	var ack *link.Ack
	d2.until(func(f link.Frame) bool {
		switch f := f.(type) {
		case *link.Ack:
			ack = f
			return true
		case *link.Error:
			t.Fatalf("the resent answer got %+v", f)
		}
		return false // the question again, or m1's reply, if they came first
	})
	if ack.MessageID != "a1" || !ack.Duplicate || ack.Reply != nil {
		t.Fatalf("ack of the resent answer %+v", ack)
	}
	d2.send(&link.Message{MessageID: "m1", Text: "/ask Ship it?"})
	var got *link.Message
	d2.until(func(f link.Frame) bool {
		switch f := f.(type) {
		case *link.Ack:
			if f.MessageID == "m1" && f.Reply != nil {
				got = f.Reply
				return true
			}
		case *link.Message:
			if f.MessageID == "m1" {
				got = f
				return true
			}
		case *link.Error:
			t.Fatalf("unexpected %+v", f)
		}
		return false
	})
	if got.Text != "You chose: no" {
		t.Fatalf("reply %+v", got)
	}
	ts.waitEvent(t, "direct_run_finished", "a1")
	if n := countEvents(ts.events(t), "direct_run_finished", "a1"); n != 1 {
		t.Fatalf("answer a1 answered %d times, want once", n)
	}
}

// A question not answered in time closes: the run goes on ("No answer in
// time."), and a late answer is question_closed.
func TestAnswerAfterTimeoutEndToEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withEchoAsk(1), nil)
	d := newChoiceDevice(t, ts, "kiosk")
	q := d.question("m1", "Quick?")
	if q.TimeoutSeconds != 1 {
		t.Fatalf("timeout_seconds %d", q.TimeoutSeconds)
	}
	if m := d.reply("m1"); m.Text != "No answer in time." {
		t.Fatalf("reply %+v", m)
	}
	d.answerRefused(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "yes"}, link.CodeQuestionClosed)
}

// A cancel closes the question of its run; an answer after it is
// question_closed.
func TestAnswerAfterCancelEndToEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	d := newChoiceDevice(t, ts, "kiosk", link.CapCancel)
	q := d.question("m1", "Wait?")
	d.send(&link.Cancel{MessageID: "m1"})
	if m := d.reply("m1"); m.FinishReason != link.FinishCancelled {
		t.Fatalf("reply %+v", m)
	}
	d.answerRefused(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "yes"}, link.CodeQuestionClosed)
}

// A question still open is sent again when its device reconnects, with
// the seconds it has left, and answered there.
func TestOpenQuestionResentOnReconnectEndToEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	d := newChoiceDevice(t, ts, "kiosk")
	q := d.question("m1", "Still there?")
	d.ws.Close()
	d2 := newChoiceDevice(t, ts, "kiosk")
	again := readAs[*link.Question](d2.client)
	if again.QuestionID != q.QuestionID || again.Text != q.Text || again.TimeoutSeconds < 1 || again.TimeoutSeconds > q.TimeoutSeconds {
		t.Fatalf("question again %+v, first %+v", again, q)
	}
	d2.send(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "yes"})
	if m := d2.reply("m1"); m.Text != "You chose: yes" {
		t.Fatalf("reply %+v", m)
	}
}

// A device without "choice" never gets a question: echo's /ask is echoed,
// and its answer frames are refused bad_frame.
func TestNoChoiceNoQuestionEndToEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	c := dial(t, ts.ws, nil)
	c.connect("plain", link.CapText)
	c.send(&link.Message{MessageID: "m1", Text: "/ask Deploy?"})
	readAs[*link.Ack](c)
	if m := readAs[*link.Message](c); m.Text != "You said: /ask Deploy?" {
		t.Fatalf("reply %+v", m)
	}
	c.send(&link.Answer{MessageID: "a1", QuestionID: "q-x", OptionID: "yes"})
	c.expectError(`did not list the "choice" capability`, link.CodeBadFrame)
}

func countEvents(evs []events.Event, name, messageID string) int {
	n := 0
	for _, e := range evs {
		if e.Event == name && e.MessageID == messageID {
			n++
		}
	}
	return n
}

// A real ACP agent process asking permission under policy "device": the
// request's own options as the question (ids and names), answered with
// one key each way (allow, then deny); a device without "choice" gets
// the fallback (reject) without a question.
func TestACPPermissionDeviceEndToEnd(t *testing.T) {
	t.Parallel()
	bin := acpAgent(t)
	ts := startServer(t, withACP(config.ACPAgent{Command: bin, Permission: config.ACPPermissionDevice}), nil)
	d := newChoiceDevice(t, ts, "dev")

	for _, c := range []struct{ option, want string }{{"yes", "allowed"}, {"no", "rejected"}} {
		id := "perm-" + c.option
		d.send(&link.Message{MessageID: id, Text: "/perm"})
		var q *link.Question
		d.until(func(f link.Frame) bool { q, _ = f.(*link.Question); return q != nil })
		if q.MessageID != id || q.Text != "Allow? Edit config.json" || len(q.Options) != 2 ||
			q.Options[0] != (link.Option{ID: "yes", Label: "Allow"}) || q.Options[1] != (link.Option{ID: "no", Label: "Skip"}) {
			t.Fatalf("question %+v", q)
		}
		d.send(&link.Answer{MessageID: "ans-" + c.option, QuestionID: q.QuestionID, OptionID: c.option})
		if m := d.reply(id); m.Text != c.want {
			t.Fatalf("answered %s: reply %+v", c.option, m)
		}
		ts.waitEvent(t, "direct_run_finished", "ans-"+c.option)
		if n := countEvents(ts.events(t), "direct_run_finished", "ans-"+c.option); n != 1 {
			t.Fatalf("answer answered %d times", n)
		}
	}

	permWithoutChoice(t, ts, "rejected")
}

// permWithoutChoice asks the ACP agent for a permission from a device
// that did not list "choice" and checks the agent's outcome.
func permWithoutChoice(t *testing.T, ts *testServer, want string) {
	t.Helper()
	plain := dial(t, ts.ws, nil)
	plain.connect("plain", link.CapText)
	plain.send(&link.Message{MessageID: "p1", Text: "/perm"})
	readAs[*link.Ack](plain)
	if m := readAs[*link.Message](plain); m.Text != want {
		t.Fatalf("without choice: reply %+v, want %q", m, want)
	}
}

// Policy "device" with permissionFallback allow_once: a device without
// "choice" is allowed once.
func TestACPPermissionDeviceFallbackEndToEnd(t *testing.T) {
	t.Parallel()
	bin := acpAgent(t)
	ts := startServer(t, withACP(config.ACPAgent{Command: bin, Permission: config.ACPPermissionDevice, PermissionFallback: config.ACPPermissionAllowOnce}), nil)
	permWithoutChoice(t, ts, "allowed")
}

// Policy "device": a question not answered within askTimeout is answered
// with the fallback (reject), and closed (a late answer is
// question_closed); a cancel of the turn answers the request cancelled.
func TestACPPermissionDeviceTimeoutAndCancelEndToEnd(t *testing.T) {
	t.Parallel()
	bin := acpAgent(t)
	ts := startServer(t, func(c *config.Config) {
		withACP(config.ACPAgent{Command: bin, Permission: config.ACPPermissionDevice})(c)
		c.Agents["coder"].ACP.AskTimeout = 1
	}, nil)
	d := newChoiceDevice(t, ts, "dev", link.CapCancel)
	d.send(&link.Message{MessageID: "t1", Text: "/perm"})
	var q *link.Question
	d.until(func(f link.Frame) bool { q, _ = f.(*link.Question); return q != nil })
	if q.TimeoutSeconds != 1 {
		t.Fatalf("question %+v", q)
	}
	if m := d.reply("t1"); m.Text != "rejected" {
		t.Fatalf("reply %+v", m)
	}
	d.answerRefused(&link.Answer{MessageID: "late", QuestionID: q.QuestionID, OptionID: "yes"}, link.CodeQuestionClosed)

	d.send(&link.Message{MessageID: "c1", Text: "/perm"})
	d.until(func(f link.Frame) bool { q, _ = f.(*link.Question); return q != nil })
	d.send(&link.Cancel{MessageID: "c1"})
	if m := d.reply("c1"); m.FinishReason != link.FinishCancelled {
		t.Fatalf("cancelled turn %+v", m)
	}
	d.answerRefused(&link.Answer{MessageID: "after", QuestionID: q.QuestionID, OptionID: "yes"}, link.CodeQuestionClosed)
}

// askScript is a Terminal Protocol v1 rich agent (a shell script) that
// asks a question and says the answer line it read on stdin.
const askScript = `read env
echo '{"type":"question","id":"q1","text":"Go on?","options":[{"id":"y","label":"Yes"},{"id":"n","label":"No"}],"timeout_seconds":60}'
read ans
echo "got $ans" | tr -d '{}"'
`

// Terminal Protocol v1's question extension: an agent process prints a
// question frame, the device answers it, and the agent reads the answer
// on its stdin; a device without "choice" is answered "unavailable" at
// once.
func TestTerminalQuestionEndToEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withTerminalAgent(config.TerminalAgent{Command: "sh -c " + shellQuote(askScript), Questions: true}), nil)
	d := newChoiceDevice(t, ts, "kiosk")
	d.send(&link.Message{MessageID: "m1", Text: "hello"})
	var q *link.Question
	d.until(func(f link.Frame) bool { q, _ = f.(*link.Question); return q != nil })
	if q.Text != "Go on?" || q.TimeoutSeconds != 60 || len(q.Options) != 2 || q.Options[1] != (link.Option{ID: "n", Label: "No"}) {
		t.Fatalf("question %+v", q)
	}
	d.send(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "n"})
	if m := d.reply("m1"); m.Text != "got type:answer,id:q1,option:n" {
		t.Fatalf("reply %+v", m)
	}

	plain := dial(t, ts.ws, nil)
	plain.connect("plain", link.CapText)
	plain.send(&link.Message{MessageID: "p1", Text: "hello"})
	readAs[*link.Ack](plain)
	if m := readAs[*link.Message](plain); m.Text != "got type:answer,id:q1,option:null,reason:unavailable" {
		t.Fatalf("without choice: reply %+v", m)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// The fleet API's device page shows the question open on the device
// (read-only), and none once it is answered.
func TestOpenQuestionOnPeerPageEndToEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil, nil)
	d := newChoiceDevice(t, ts, "kiosk")
	q := d.question("m1", "Reboot?")
	type page struct {
		Questions []struct {
			QuestionID  string        `json:"question_id"`
			MessageID   string        `json:"message_id"`
			Text        string        `json:"text"`
			Options     []link.Option `json:"options"`
			SecondsLeft int           `json:"seconds_left"`
		}
	}
	var p page
	if code := getJSON(t, ts.http.URL+"/api/channels/terminal-dev/peers/kiosk", &p); code != 200 {
		t.Fatalf("peer page: HTTP %d", code)
	}
	if len(p.Questions) != 1 || p.Questions[0].QuestionID != q.QuestionID || p.Questions[0].MessageID != "m1" || p.Questions[0].Text != "Reboot?" ||
		len(p.Questions[0].Options) != 2 || p.Questions[0].SecondsLeft < 1 || p.Questions[0].SecondsLeft > q.TimeoutSeconds {
		t.Fatalf("questions on the peer page %+v", p.Questions)
	}
	d.send(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "no"})
	if m := d.reply("m1"); m.Text != "You chose: no" {
		t.Fatalf("reply %+v", m)
	}
	p = page{}
	getJSON(t, ts.http.URL+"/api/channels/terminal-dev/peers/kiosk", &p)
	if len(p.Questions) != 0 {
		t.Fatalf("questions after the answer %+v", p.Questions)
	}
}

// In a cluster the question crosses from the worker that runs the
// message to the edge that holds the device (as progress does), is sent
// again when the device reconnects to that edge, and the answer goes
// down the message path to the worker's waiting run; an answer after the
// question closed is question_closed there too.
func TestClusterQuestionEndToEnd(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	clusterCfg := func(role, name string) func(*config.Config) {
		return func(c *config.Config) {
			c.Cluster = config.Cluster{NATS: []string{url}, Role: role, Name: name, Partitions: 1, Replicas: 1,
				AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
		}
	}
	edge := startServer(t, clusterCfg(config.RoleEdge, "edge-1"), nil)
	worker := startServer(t, clusterCfg(config.RoleWorker, "worker-1"), nil)
	if !waitUntil(t, "the worker owns the partition", func() bool { return clusterStore(worker).Node().Owns(0) }) {
		t.FailNow()
	}
	d := newChoiceDevice(t, edge, "kiosk")
	q := d.question("m1", "Across?")
	d.ws.Close()
	d2 := newChoiceDevice(t, edge, "kiosk")
	if again := readAs[*link.Question](d2.client); again.QuestionID != q.QuestionID {
		t.Fatalf("question again %+v", again)
	}
	// A device resends what is unanswered when it reconnects (a cluster's
	// edge sends a reply only to a device waiting for it).
	d2.send(&link.Message{MessageID: "m1", Text: "/ask Across?"})
	if a := readAs[*link.Ack](d2.client); a.MessageID != "m1" || !a.Duplicate || !a.Pending {
		t.Fatalf("ack of the resent message %+v", a)
	}
	d2.send(&link.Answer{MessageID: "a1", QuestionID: q.QuestionID, OptionID: "yes"})
	frames := d2.until(func(f link.Frame) bool { m, ok := f.(*link.Message); return ok && m.MessageID == "m1" })
	if m := frames[len(frames)-1].(*link.Message); m.Text != "You chose: yes" {
		t.Fatalf("reply %+v", m)
	}
	var acked bool
	for _, f := range frames {
		if a, ok := f.(*link.Ack); ok && a.MessageID == "a1" {
			acked = true
		}
		if e, ok := f.(*link.Error); ok {
			t.Fatalf("error %+v", e)
		}
	}
	if !acked {
		d2.until(func(f link.Frame) bool { a, ok := f.(*link.Ack); return ok && a.MessageID == "a1" })
	}
	d2.answerRefused(&link.Answer{MessageID: "a2", QuestionID: q.QuestionID, OptionID: "no"}, link.CodeQuestionClosed)
}
