package device_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"termlink/device"
	"termlink/display"
	"termlink/display/hd44780"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/link/linktest"
	"termlink/testrig/lcdemu"
)

// streamRig is termd's daemon on the emulated LCD (the real HD44780
// driver on lcdemu's I2C bus) with a client that lists stream and screen,
// against a scripted server that acks every message and hands it to the
// test. The test plays the user through inputs (what the keypad and the
// console turn into).
type streamRig struct {
	bus    *lcdemu.Bus
	srv    *linktest.Server
	client *link.Client
	view   *drawView
	inputs chan device.Input
	msgs   chan *link.Message
	done   chan error
	cancel context.CancelFunc
}

// drawView tells when the daemon draws: how many draws completed, and
// whether one is under way (writing to the bus).
type drawView struct {
	device.View
	drawing atomic.Int32
	draws   atomic.Int64
}

func (v *drawView) Render(ctx context.Context, m *device.Model, now time.Time) error {
	v.drawing.Add(1)
	defer v.drawing.Add(-1)
	defer v.draws.Add(1)
	return v.View.Render(ctx, m, now)
}

// Mirror passes the LCD's mirror on.
func (v *drawView) Mirror() link.Screen { return v.View.(device.Mirror).Mirror() }

func startStream(t *testing.T, rows, cols int, stream bool) *streamRig {
	t.Helper()
	srv := linktest.New(t)
	msgs := make(chan *link.Message, 16)
	srv.OnMessage(func(s *linktest.Server, m *link.Message) {
		_ = s.Send(&link.Ack{MessageID: m.MessageID, SessionID: "s", Accepted: true})
		select { // never blocks the reader: the test reads what it waits for
		case msgs <- m:
		default:
		}
	})
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	// No periodic refresh: every write on the bus is a frame's change.
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: rows, Cols: cols, Refresh: -1})
	if err != nil {
		t.Fatal(err)
	}
	client, err := link.NewClient(link.ClientConfig{URL: srv.URL(), PeerID: "kiosk-1", StateDir: t.TempDir(), Stream: stream,
		Capabilities: append(link.DefaultCapabilities(), link.CapScreen), RetryInitial: 50 * time.Millisecond,
		RetryMax: 200 * time.Millisecond, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	view := &drawView{View: &device.LCDView{Screen: lcd}}
	r := &streamRig{bus: bus, srv: srv, client: client, view: view, inputs: make(chan device.Input), msgs: msgs, done: make(chan error, 1), cancel: cancel}
	d := &device.Daemon{Client: client, View: view, Inputs: r.inputs, Logger: discard}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(testwait.Deadline):
			t.Error("the daemon did not stop")
		}
	})
	return r
}

func (r *streamRig) glass() string { return strings.Join(r.bus.Text(), "\n") }

// waitGlass waits until the glass satisfies cond.
func (r *streamRig) waitGlass(t *testing.T, what string, cond func(glass string) bool) string {
	t.Helper()
	var g string
	testwait.UntilOK(t, "the LCD to show "+what, func() error {
		if g = r.glass(); !cond(g) {
			return fmt.Errorf("it shows:\n%s", g)
		}
		return nil
	})
	return g
}

func (r *streamRig) waitShows(t *testing.T, want string) string {
	t.Helper()
	return r.waitGlass(t, "\""+want+"\"", func(g string) bool { return strings.Contains(g, want) })
}

func (r *streamRig) input(t *testing.T, in device.Input) {
	t.Helper()
	select {
	case r.inputs <- in:
	case <-time.After(testwait.Deadline):
		t.Fatal("the daemon takes no input")
	}
}

// inputDrawn gives the daemon an input and returns once it has drawn
// it: the daemon takes the next input (an edit that changes nothing,
// the compose line being empty) only after the draw that followed the
// first.
func (r *streamRig) inputDrawn(t *testing.T, in device.Input) {
	t.Helper()
	r.input(t, in)
	r.input(t, device.Input{Kind: device.InputEdit})
}

// ask sends text as the user and returns the message the server got.
func (r *streamRig) ask(t *testing.T, text string) *link.Message {
	t.Helper()
	r.waitShows(t, "ok") // online
	r.input(t, device.Input{Kind: device.InputSend, Text: text})
	select {
	case m := <-r.msgs:
		return m
	case <-time.After(testwait.Deadline):
		t.Fatal("the server got no message")
		return nil
	}
}

func (r *streamRig) send(t *testing.T, frames ...link.Frame) {
	t.Helper()
	if err := r.srv.Send(frames...); err != nil {
		t.Fatal(err)
	}
}

// settled waits until no draw is under way and returns the bus
// counters. Called once the glass shows what the last event drew (the
// draw that wrote it has begun), it returns once that draw is complete.
func (r *streamRig) settled(t *testing.T) lcdemu.Stats {
	t.Helper()
	testwait.Until(t, "the draw under way to end", func() bool { return r.view.drawing.Load() == 0 })
	return r.bus.Stats()
}

// normalize joins the glass's lines with spaces for a text search across
// wrapped lines.
func normalize(glass string) string { return strings.Join(strings.Fields(glass), " ") }

const story = "Once upon a time a tiny LCD waited for an answer, and the answer came word by word, " +
	"line after line, until the whole story was on the glass for everyone to read."

// The answer appears on the glass as it is written, wrapped, its newest
// line in view, ending in the block that says more is coming; the screen
// mirror shows it live; when the final reply lands the block goes, the
// page stays where it was (no jump to the answer's first line), the
// answer is confirmed (leaves the outbox), and the user pages back
// when they ask.
func TestStreamOnTheGlass(t *testing.T) {
	t.Parallel()
	for _, size := range []struct{ rows, cols int }{{4, 20}, {2, 16}} {
		t.Run(fmt.Sprintf("%dx%d", size.cols, size.rows), func(t *testing.T) {
			r := startStream(t, size.rows, size.cols, true)
			m := r.ask(t, "tell me a story")
			words := strings.SplitAfter(story, " ")
			sofar := ""
			for i, w := range words {
				sofar += w
				r.send(t, &link.Delta{MessageID: m.MessageID, Seq: int64(i + 1), Text: w})
				if i == 3 || i == 15 {
					// Partial text on the glass, before the final: its
					// newest word in view, the block after it.
					last := strings.TrimSpace(w)
					g := r.waitShows(t, last+string(device.StreamMark))
					if strings.Contains(g, "read.") {
						t.Fatalf("the end of the story is on the glass before it was written:\n%s", g)
					}
					r.srv.WaitFor(t, "a screen frame with the partial text", testwait.Deadline, func() bool {
						for _, s := range r.srv.Screens() {
							if strings.Contains(strings.Join(s.Rows, "\n"), last+string(device.StreamMark)) {
								return true
							}
						}
						return false
					})
				}
			}
			r.waitShows(t, "read."+string(device.StreamMark))
			r.send(t, linktest.Reply(m.MessageID, story, link.FinishStop))
			g := r.waitGlass(t, "the final text without the block", func(g string) bool {
				return strings.Contains(g, "read.") && !strings.ContainsRune(g, device.StreamMark)
			})
			if strings.Contains(g, "Once upon") {
				t.Fatalf("the final reply jumped back to the answer's first page:\n%s", g)
			}
			// Confirmed only once drawn: the outbox empties.
			testwait.Until(t, "the streamed answer confirmed to the outbox", func() bool { return r.client.Status().Pending == 0 })
			// Paging back is the user's call.
			for i := 0; i < 20 && !strings.Contains(r.glass(), "Once upon"); i++ {
				r.inputDrawn(t, device.Input{Kind: device.InputScrollUp})
			}
			r.waitShows(t, "Once upon")
		})
	}
}

// Without stream the same reply opens at its first line (the behaviour
// the streamed one must not have), and a delta the server sends anyway
// draws nothing.
func TestStreamOffWholeReplyOpensAtTop(t *testing.T) {
	t.Parallel()
	r := startStream(t, 4, 20, false)
	m := r.ask(t, "tell me a story")
	r.send(t, &link.Delta{MessageID: m.MessageID, Seq: 1, Text: "Partial"})
	r.send(t, linktest.Reply(m.MessageID, story, link.FinishStop))
	g := r.waitShows(t, "Once upon")
	if strings.Contains(g, "Partial") || strings.ContainsRune(g, device.StreamMark) {
		t.Fatalf("a delta was drawn without stream:\n%s", g)
	}
}

// Cancel mid-stream: the cancel frame goes out for the message being
// written, the run's final reply (finish_reason cancelled, the text so
// far) replaces the stream, and the block goes.
func TestStreamCancelMidStream(t *testing.T) {
	t.Parallel()
	r := startStream(t, 4, 20, true)
	r.srv.OnCancel(func(s *linktest.Server, c *link.Cancel) {
		_ = s.Send(linktest.Reply(c.MessageID, "Once upon a", link.FinishCancelled))
	})
	m := r.ask(t, "tell me a story")
	r.send(t, linktest.Deltas(m.MessageID, []string{"Once ", "upon ", "a"})...)
	r.waitShows(t, "upon a"+string(device.StreamMark))
	r.input(t, device.Input{Kind: device.InputCancel})
	g := r.waitGlass(t, "the cancelled reply", func(g string) bool {
		return strings.Contains(normalize(g), "(cancelled) Once upon a") && !strings.ContainsRune(g, device.StreamMark)
	})
	// The glass shows the reply's text once its draw has begun: the
	// status field, written last, may still say ':' (a fresh-clone
	// make test read it there). The reference is the glass once that
	// draw is complete.
	r.settled(t)
	g = r.glass()
	if cs := r.srv.Cancels(); len(cs) != 1 || cs[0].MessageID != m.MessageID {
		t.Fatalf("cancels %v, want one for %s", cs, m.MessageID)
	}
	// A late delta of the cancelled run draws nothing: once the client
	// has ignored it and no draw is under way, the glass is as it was.
	ignored := r.client.Stats().DeltasIgnored
	r.send(t, &link.Delta{MessageID: m.MessageID, Seq: 4, Text: " time"})
	testwait.Until(t, "the late delta ignored", func() bool { return r.client.Stats().DeltasIgnored > ignored })
	r.settled(t)
	if g2 := r.glass(); g2 != g {
		t.Fatalf("the glass changed after the final reply:\n%s\nwas\n%s", g2, g)
	}
}

// Each delta writes only the cells that change on the glass: counted on
// the emulated bus (data writes) against the cells that differ between
// the glass before and after. A redraw of the whole screen would write
// all 80 cells each time.
func TestStreamWritesOnlyChangedCells(t *testing.T) {
	t.Parallel()
	r := startStream(t, 4, 20, true)
	m := r.ask(t, "count")
	r.waitShows(t, ">count") // acked: nothing more to draw until the first delta
	words := strings.SplitAfter(story, " ")
	var totalData, totalChanged int
	for i, w := range words {
		st0 := r.settled(t)
		before := r.bus.Codes()
		r.send(t, &link.Delta{MessageID: m.MessageID, Seq: int64(i + 1), Text: w})
		r.waitShows(t, strings.TrimSpace(w)+string(device.StreamMark))
		st1 := r.settled(t)
		after := r.bus.Codes()
		changed, joins := changedCells(before, after)
		data, instr := st1.DataWrites-st0.DataWrites, st1.Instructions-st0.Instructions
		// The driver rewrites a lone unchanged cell between two changed
		// ones to join the runs (cheaper than moving the cursor); nothing
		// else unchanged is written.
		if data != changed+joins {
			t.Errorf("delta %d (%q): %d cells written (%d address sets), for %d cells changed and %d joining cells", i+1, w, data, instr, changed, joins)
		}
		totalData += data
		totalChanged += changed
	}
	t.Logf("%d deltas: %d cells written for %d cells changed (a full redraw per delta: %d)", len(words), totalData, totalChanged, 80*len(words))
	if totalData >= 80*len(words)/2 {
		t.Errorf("%d cells written for %d deltas: the screen is being redrawn", totalData, len(words))
	}
}

// changedCells counts the cells of a 20x4 glass that differ, and the
// unchanged cells with a changed one on either side in DDRAM order (rows
// 0 and 2 are one DDRAM line, rows 1 and 3 the other): those the driver
// writes to join two runs.
func changedCells(before, after [][]byte) (changed, joins int) {
	for _, line := range [][2]int{{0, 2}, {1, 3}} {
		var diff []bool
		for _, row := range line {
			for col := range after[row] {
				diff = append(diff, after[row][col] != before[row][col])
			}
		}
		for i, d := range diff {
			switch {
			case d:
				changed++
			case i > 0 && i < len(diff)-1 && diff[i-1] && diff[i+1]:
				joins++
			}
		}
	}
	return changed, joins
}

// A reconnect mid-stream: the new connection's first delta (seq 1, all
// the text so far) replaces what the glass showed; the stream goes on.
func TestStreamReconnectOnTheGlass(t *testing.T) {
	t.Parallel()
	r := startStream(t, 4, 20, true)
	m := r.ask(t, "story")
	r.send(t, linktest.Deltas(m.MessageID, []string{"Once ", "upon"})...)
	r.waitShows(t, "Once upon"+string(device.StreamMark))
	r.srv.Drop()
	select {
	case <-r.msgs: // resent on the new connection
	case <-time.After(testwait.Deadline):
		t.Fatal("the message was not resent after the reconnect")
	}
	r.send(t, linktest.Deltas(m.MessageID, []string{"Once upon a time", " there"})...)
	g := r.waitGlass(t, "the new connection's text", func(g string) bool {
		return strings.Contains(normalize(g), "time there"+string(device.StreamMark))
	})
	if strings.Count(g, "Once") != 1 {
		t.Fatalf("the text was appended, not replaced:\n%s", g)
	}
}

// glassScreen is a display.Screen on ROM A00 that keeps the last frame.
type glassScreen struct {
	rows, cols int
	last       *display.Frame
}

func (g *glassScreen) Shows(r rune) bool      { return display.A00.Shows(r) }
func (g *glassScreen) Size() (rows, cols int) { return g.rows, g.cols }
func (g *glassScreen) Draw(_ context.Context, f *display.Frame) error {
	g.last = f.Clone()
	return nil
}

// A view that drew every step of a growing answer (its lines kept and
// only the new end folded each time) shows what a fresh view draws of
// the same text, whatever the pieces split: a "\r\n" cut in two, accents
// folded, a word growing past the line's end.
func TestStreamIncrementalLayoutMatchesFresh(t *testing.T) {
	t.Parallel()
	pieces := []string{"Caf", "é crème\r", "\nnext line", " with a verylongwordthatbreaks", " the end  ", "\r", "\r\nlast"}
	grown := &glassScreen{rows: 4, cols: 20}
	gv := &device.LCDView{Screen: grown}
	m := &device.Model{Link: link.StateConnected}
	m.Sent("m-1", "q")
	text := ""
	now := time.Now()
	for i, p := range pieces {
		text += p
		m.Apply(link.Event{Kind: link.EventDelta, MessageID: "m-1", Seq: int64(i + 1), Text: text})
		if err := gv.Render(context.Background(), m, now); err != nil {
			t.Fatal(err)
		}
		for _, page := range []int{0, 1, 2, 3} { // every page of it, as the user may read it
			fresh := &glassScreen{rows: 4, cols: 20}
			fm := &device.Model{Link: link.StateConnected}
			fm.Sent("m-1", "q")
			fm.Apply(link.Event{Kind: link.EventDelta, MessageID: "m-1", Seq: 1, Text: text})
			for range page {
				fm.PageUp()
				m.PageUp()
			}
			if err := (&device.LCDView{Screen: fresh}).Render(context.Background(), fm, now); err != nil {
				t.Fatal(err)
			}
			if err := gv.Render(context.Background(), m, now); err != nil {
				t.Fatal(err)
			}
			if got, want := grown.last.String(), fresh.last.String(); got != want {
				t.Fatalf("after %q, page -%d: the view drew\n%s\nwant\n%s", text, page, got, want)
			}
			for range page {
				m.PageDown()
			}
		}
	}
}

// Paging back through a streamed answer, while it is written and after
// its final reply, keeps the '+' (more below) in the status field on
// every page with more below it, and only the last page is without it.
func TestStreamPagingBackKeepsMoreMark(t *testing.T) {
	t.Parallel()
	r := startStream(t, 4, 20, true)
	m := r.ask(t, "tell me a story")
	mark := func() rune { // the status field's first cell
		rows := r.bus.Text()
		return []rune(rows[len(rows)-1])[20-3]
	}
	words := strings.SplitAfter(story, " ")
	half := len(words) / 2
	sofar := ""
	for i, w := range words[:half] {
		sofar += w
		r.send(t, &link.Delta{MessageID: m.MessageID, Seq: int64(i + 1), Text: w})
	}
	r.waitShows(t, strings.TrimSpace(words[half-1])+string(device.StreamMark))
	r.inputDrawn(t, device.Input{Kind: device.InputScrollUp})
	if mark() != '+' {
		t.Fatalf("a page back while the answer is written has no '+':\n%s", r.glass())
	}
	for i, w := range words[half:] {
		r.send(t, &link.Delta{MessageID: m.MessageID, Seq: int64(half + i + 1), Text: w})
	}
	r.send(t, linktest.Reply(m.MessageID, story, link.FinishStop))
	// Drawn once the answer is confirmed (it leaves the outbox).
	testwait.Until(t, "the final reply drawn", func() bool { return r.client.Status().Pending == 0 })
	r.settled(t)
	if mark() != '+' {
		t.Fatalf("the final reply, paged back, has no '+':\n%s", r.glass())
	}
	// Down to the end: '+' on every page but the last.
	for i := 0; i < 20 && !strings.Contains(r.glass(), "read."); i++ {
		if mark() != '+' {
			t.Fatalf("page %d down has no '+' though the end is below:\n%s", i, r.glass())
		}
		r.inputDrawn(t, device.Input{Kind: device.InputScrollDown})
	}
	if !strings.Contains(r.glass(), "read.") || mark() == '+' {
		t.Fatalf("the last page:\n%s", r.glass())
	}
	// Back up to the question: '+' on every page.
	for i := 0; i < 20 && !strings.Contains(r.glass(), "tell me"); i++ {
		r.inputDrawn(t, device.Input{Kind: device.InputScrollUp})
		if mark() != '+' {
			t.Fatalf("page %d up has no '+' though more is below:\n%s", i+1, r.glass())
		}
	}
	if !strings.Contains(r.glass(), "tell me") {
		t.Fatalf("paging up never reached the question:\n%s", r.glass())
	}
}
