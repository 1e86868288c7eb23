package device_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/device"
	"termlink/display/hd44780"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/servertest"
	"termlink/testrig/buildtest"
	"termlink/testrig/lcdemu"
)

// acpServer is a real termserver whose channel runs the scripted ACP
// agent (testrig/agents/acpagent), one process per session.
func acpServer(t *testing.T) *servertest.Server {
	return servertest.Start(t, servertest.WithACP(buildtest.Command(t, "termlink/testrig/agents/acpagent")))
}

// words is "w0 w1 ... w(n-1)".
func words(n int) string {
	var w []string
	for i := range n {
		w = append(w, fmt.Sprintf("w%d", i))
	}
	return strings.Join(w, " ")
}

// A real ACP agent writing its answer through a real termserver to termd
// on the emulated LCD: the answer begun shows on the glass with the
// streaming mark while the agent waits, and the final reply then lands
// in place with its end in view.
func TestACPStreamOnTheGlassEndToEnd(t *testing.T) {
	t.Parallel()
	srv := acpServer(t)
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	client, err := link.NewClient(link.ClientConfig{URL: srv.URL, PeerID: "desk-acp", StateDir: t.TempDir(), Stream: true,
		Capabilities: append(link.DefaultCapabilities(), link.CapScreen), RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inputs := make(chan device.Input)
	done := make(chan error, 1)
	d := &device.Daemon{Client: client, View: &device.LCDView{Screen: lcd}, Inputs: inputs, Logger: discard}
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	glass := func() string { return strings.Join(bus.Text(), "\n") }
	waitGlass := func(what string, cond func(string) bool) string {
		t.Helper()
		var g string
		testwait.UntilOK(t, "the LCD to show "+what, func() error {
			if g = glass(); !cond(g) {
				return fmt.Errorf("it shows:\n%s", g)
			}
			return nil
		})
		return g
	}
	waitGlass("online", func(g string) bool { return strings.Contains(g, "ok") })

	// The agent writes its first word, then waits for the gate file: the
	// glass shows the answer begun, with the mark, while the run goes on.
	answer := words(30)
	gate := filepath.Join(t.TempDir(), "gate")
	select {
	case inputs <- device.Input{Kind: device.InputSend, Text: "/gate " + gate + " " + answer}:
	case <-time.After(testwait.Deadline):
		t.Fatal("the daemon takes no input")
	}
	waitGlass("the answer begun", func(g string) bool {
		return strings.Contains(g, "w0"+string(device.StreamMark))
	})
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	final := waitGlass("the final answer", func(g string) bool {
		return !strings.ContainsRune(g, device.StreamMark) && strings.Contains(g, "w29") && strings.Contains(g, " ok")
	})
	if !strings.Contains(normalize(final), "w26 w27 w28 w29") {
		t.Fatalf("the final answer's end is not in view:\n%s", final)
	}
	if w := bus.Warnings(); len(w) != 0 {
		t.Fatalf("the emulated controller saw problems: %v", w)
	}
}

// A real ACP agent through a real termserver to a link.Client that lists
// stream: deltas arrive while the run goes on, each carrying all the text
// so far (each the start of the next and of the final); the final reply
// carries the whole answer. A client without stream gets the same final
// reply and no delta. A cancel mid-stream ends it with the cancelled
// reply, which begins with what was streamed, and no delta after it.
func TestACPStreamToLinkClientEndToEnd(t *testing.T) {
	t.Parallel()
	srv := acpServer(t)
	answer := words(20)

	gate := filepath.Join(t.TempDir(), "gate")
	streamed, final := acpAsk(t, srv.URL, "with-stream", true, "/gate "+gate+" "+answer, func(*link.Client, string) {
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Error(err)
		}
	})
	if len(streamed) == 0 || streamed[0] != "w0" {
		t.Fatalf("deltas before the final %q, want the first word first (the agent waits after it)", streamed)
	}
	for i, s := range streamed {
		next := final.Text
		if i+1 < len(streamed) {
			next = streamed[i+1]
		}
		if !strings.HasPrefix(next, s) {
			t.Fatalf("delta %d %q is not the start of what follows it %q", i, s, next)
		}
	}
	if final.Text != answer || final.FinishReason != link.FinishStop {
		t.Fatalf("final %+v, want the whole answer", final)
	}

	none, plain := acpAsk(t, srv.URL, "no-stream", false, "/stream 20 "+answer, nil)
	if len(none) != 0 || plain.Text != answer {
		t.Fatalf("without stream: %d deltas, final %+v", len(none), plain)
	}

	// A gate that never opens: the run is cancelled while it waits.
	cut, cancelled := acpAsk(t, srv.URL, "cancel-stream", true, "/gate "+filepath.Join(t.TempDir(), "never")+" "+answer, func(c *link.Client, id string) {
		if err := c.Cancel(context.Background(), id); err != nil {
			t.Error(err)
		}
	})
	if cancelled.FinishReason != link.FinishCancelled || len(cut) == 0 || !strings.HasPrefix(cancelled.Text, cut[len(cut)-1]) {
		t.Fatalf("cancelled final %+v after deltas %q", cancelled, cut)
	}
}

// acpAsk sends text from a fresh link.Client (peer id peer) and returns
// the texts of the deltas it saw, in order, and the final reply;
// onFirst, when set, is called at the first delta.
func acpAsk(t *testing.T, url, peer string, stream bool, text string, onFirst func(c *link.Client, id string)) ([]string, *link.Message) {
	t.Helper()
	client, err := link.NewClient(link.ClientConfig{URL: url, PeerID: peer, Stream: stream, StateDir: t.TempDir(),
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), testwait.Deadline)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- client.Run(ctx) }()
	defer func() {
		stop()
		<-done
	}()
	id, err := client.Send(ctx, text)
	if err != nil {
		t.Fatal(err)
	}
	var deltas []string
	for {
		select {
		case e := <-client.Events():
			switch {
			case e.Kind == link.EventDelta && e.MessageID == id:
				deltas = append(deltas, e.Text)
				if len(deltas) == 1 && onFirst != nil {
					onFirst(client, id)
				}
			case e.Kind == link.EventReply && e.MessageID == id:
				if err := client.Delivered(id); err != nil {
					t.Fatal(err)
				}
				return deltas, e.Reply
			}
		case <-ctx.Done():
			t.Fatalf("no final reply to %q; deltas %q", text, deltas)
		}
	}
}
