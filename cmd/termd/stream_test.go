package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/device"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/link/linktest"
	"termlink/server/servertest"
	"termlink/testrig/buildtest"
	"termlink/testrig/tmuxtest"
)

// termd on the sim board (the console on its own terminal, in tmux)
// against a scripted server that streams: the answer grows on the screen
// while it is written, with the mark that more is coming, before the
// final reply; the final text then stands without the mark. With
// --stream=false termd does not list stream.
func TestTermdStreamsOnTheConsole(t *testing.T) {
	t.Parallel()
	srv := linktest.New(t)
	msgs := make(chan *link.Message, 4)
	srv.OnMessage(func(s *linktest.Server, m *link.Message) {
		_ = s.Send(&link.Ack{MessageID: m.MessageID, SessionID: "s", Accepted: true})
		select { // never blocks the reader: the test reads what it waits for
		case msgs <- m:
		default:
		}
	})
	w := tmuxtest.Start(t, 80, 20, fmt.Sprintf("%s --server %s --board sim --state-dir %s", termdRun, srv.URL(), t.TempDir()))
	const wait = testwait.Deadline
	w.WaitFor("online", wait)
	if c := srv.Connect(0); c == nil || !strings.Contains(strings.Join(c.Capabilities, ","), link.CapStream) {
		t.Fatalf("termd's connect does not list stream: %+v", c)
	}
	w.Type("tell me a story")
	w.Keys("Enter")
	var m *link.Message
	select {
	case m = <-msgs:
	case <-time.After(wait):
		t.Fatal("the server got no message")
	}
	send := func(frames ...link.Frame) {
		t.Helper()
		if err := srv.Send(frames...); err != nil {
			t.Fatal(err)
		}
	}
	send(linktest.Deltas(m.MessageID, []string{"Once upon ", "a time"})...)
	s := w.WaitFor("Once upon a time"+device.ConsoleStreamMark, wait)
	if !strings.Contains(s, "writing...") {
		t.Errorf("the status line does not say the answer is being written:\n%s", s)
	}
	send(&link.Delta{MessageID: m.MessageID, Seq: 3, Text: " there was a console."})
	w.WaitFor("there was a console."+device.ConsoleStreamMark, wait)
	send(linktest.Reply(m.MessageID, "Once upon a time there was a console. The end.", link.FinishStop))
	s = w.WaitFor("The end.", wait)
	if strings.Contains(s, strings.TrimSpace(device.ConsoleStreamMark)) || strings.Count(s, "Once upon") != 1 {
		t.Fatalf("the final reply did not replace the streamed text:\n%s", s)
	}
	w.Keys("C-d")
	w.WaitFor("EXIT=0", wait)

	// --stream=false: the capability is not listed.
	srv2 := linktest.New(t)
	w2 := tmuxtest.Start(t, 80, 20, fmt.Sprintf("%s --server %s --board sim --stream=false --state-dir %s", termdRun, srv2.URL(), t.TempDir()))
	w2.WaitFor("online", wait)
	if c := srv2.Connect(0); strings.Contains(strings.Join(c.Capabilities, ","), link.CapStream) {
		t.Fatalf("--stream=false still lists stream: %v", c.Capabilities)
	}
	w2.Keys("C-d")
	w2.WaitFor("EXIT=0", wait)
}

// termd on the sim board's console in tmux, against a real termserver
// whose agent is the scripted ACP agent: its first word shows with the
// mark while the agent waits, then the final reply stands whole without
// it.
func TestTermdStreamsFromARealACPAgent(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.WithACP(buildtest.Command(t, "termlink/testrig/agents/acpagent")))
	w := tmuxtest.Start(t, 100, 24, fmt.Sprintf("%s --server %s --board sim --state-dir %s", termdRun, srv.URL, t.TempDir()))
	const wait = testwait.Deadline
	w.WaitFor("online", wait)
	var words []string
	for i := range 30 {
		words = append(words, fmt.Sprintf("w%d", i))
	}
	// The agent writes its first word, then waits for the gate file.
	gate := filepath.Join(t.TempDir(), "gate")
	w.Type("/gate " + gate + " " + strings.Join(words, " "))
	w.Keys("Enter")
	s := w.WaitFor("w0"+device.ConsoleStreamMark, wait)
	if !strings.Contains(s, "writing...") {
		t.Errorf("the status line does not say the answer is being written:\n%s", s)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testwait.UntilOK(t, "the final answer standing whole", func() error {
		s = w.Screen()
		if strings.Contains(s, "w28 w29") && !strings.Contains(s, strings.TrimSpace(device.ConsoleStreamMark)) && !strings.Contains(s, "writing...") {
			return nil
		}
		return fmt.Errorf("the screen:\n%s", s)
	})
	w.Keys("C-d")
	w.WaitFor("EXIT=0", wait)
}
