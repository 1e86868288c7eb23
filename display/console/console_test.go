package console

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

type harness struct {
	t      *testing.T
	c      *Console
	v      *vt
	inW    *io.PipeWriter
	gate   chan struct{}
	cancel context.CancelFunc
	runErr chan error
}

type pipeRW struct {
	io.Reader
	io.Writer
}

// gatedWriter feeds the vt synchronously (so that after Flush the screen is
// up to date) once its gate is open; until then writes block, like a
// terminal that stopped reading.
type gatedWriter struct {
	v    *vt
	gate chan struct{}
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.gate
	return g.v.Write(p)
}

// startPipe runs a Console reading typed input from an io.Pipe and
// drawing on a vt of w x h. answer makes the vt answer size queries.
// open=false leaves the output blocked until h.open is called.
func startPipe(t *testing.T, opts Opts, w, h int, answer, open bool) *harness {
	t.Helper()
	inR, inW := io.Pipe()
	v := newVT(w, h)
	if answer {
		v.respond = func(b []byte) { go inW.Write(b) }
	}
	gate := make(chan struct{})
	c := New(pipeRW{inR, &gatedWriter{v: v, gate: gate}}, opts)
	ctx, cancel := context.WithCancel(context.Background())
	hs := &harness{t: t, c: c, v: v, inW: inW, gate: gate, cancel: cancel, runErr: make(chan error, 1)}
	go func() { hs.runErr <- c.Run(ctx) }()
	if open {
		hs.open()
		// Wait for Run to start drawing.
		v.waitFor(t, "the first screen", func() bool {
			v.mu.Lock()
			defer v.mu.Unlock()
			return v.bytes > 0
		})
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-hs.runErr:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
		inW.Close()
		hs.open()
		c.Close()
	})
	return hs
}

func (h *harness) open() {
	select {
	case <-h.gate:
	default:
		close(h.gate)
	}
}

func (h *harness) typ(s string) {
	h.t.Helper()
	if _, err := h.inW.Write([]byte(s)); err != nil {
		h.t.Fatalf("type %q: %v", s, err)
	}
}

func (h *harness) event() Event {
	h.t.Helper()
	select {
	case ev, ok := <-h.c.Events():
		if !ok {
			h.t.Fatal("events channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		h.t.Fatalf("no event; screen:\n%s", h.v.screen())
	}
	return Event{}
}

func (h *harness) noEvent(d time.Duration) {
	h.t.Helper()
	select {
	case ev := <-h.c.Events():
		h.t.Fatalf("unexpected event %+v", ev)
	case <-time.After(d):
	}
}

func (h *harness) flush() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.c.Flush(ctx); err != nil {
		h.t.Fatalf("Flush: %v\nscreen:\n%s", err, h.v.screen())
	}
}

// waitLine waits until the Console has processed typed input up to line.
func (h *harness) waitLine(line string) {
	h.t.Helper()
	h.v.waitFor(h.t, fmt.Sprintf("input line %q", line), func() bool { return h.c.Line() == line })
}

func (h *harness) waitRow(row int, want string) {
	h.t.Helper()
	h.v.waitFor(h.t, fmt.Sprintf("row %d = %q", row, want), func() bool { return h.v.row(row) == want })
}

func TestConsoleSubmit(t *testing.T) {
	h := startPipe(t, Opts{Width: 40, Height: 10}, 40, 10, false, true)
	h.typ("hel")
	h.waitRow(10, "> hel")
	if r, c := h.v.cursor(); r != 10 || c != 6 {
		t.Errorf("cursor at %d,%d, want 10,6", r, c)
	}
	h.typ("lo\r")
	if ev := h.event(); ev.Kind != Submit || ev.Text != "hello" {
		t.Fatalf("event %+v, want Submit hello", ev)
	}
	h.waitRow(10, ">")
	// Blank lines are not submitted: Enter on one is a Blank event.
	h.typ("   \r\r")
	for range 2 {
		if ev := h.event(); ev.Kind != Blank {
			t.Fatalf("event %+v for Enter on a blank line, want Blank", ev)
		}
	}
	h.noEvent(100 * time.Millisecond)
	if got := h.c.Line(); got != "" {
		t.Fatalf("Line() = %q after Enter", got)
	}
}

func TestConsoleEditingKeys(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc\x7f\r", "ab"},
		{"abc\x08d\r", "abd"},
		{"hello world\x17\r", "hello "},
		{"junk\x15xyz\r", "xyz"},
		{"ac\x1b[Db\r", "abc"},
		{"ac\x1bODb\r", "abc"},
		{"ab\x1b[D\x1b[D\x1b[Cx\r", "axb"},
		{"ab\x1bOD\x1bOD\x1bOCx\r", "axb"},
		{"bc\x01a\x05d\r", "abcd"},
		{"abc\x1b[D\x1b[D\x1b[3~\r", "ac"},
		{"abc\x1b[D\x04\r", "ab"},
		{"one\x1b[H0\x1b[F!\r", "0one!"},
		{"crlf\r\n", "crlf"},
		{"lf\n", "lf"},
		{"日本\x1b[D語\x7f\r", "日本"},
	}
	h := startPipe(t, Opts{Width: 40, Height: 10}, 40, 10, false, true)
	for _, tt := range tests {
		h.typ(tt.in)
		if ev := h.event(); ev.Kind != Submit || ev.Text != tt.want {
			t.Errorf("%q: event %+v, want Submit %q", tt.in, ev, tt.want)
		}
	}
	h.noEvent(50 * time.Millisecond) // CRLF and LF were one Enter each
}

func TestConsoleUTF8SplitAcrossReads(t *testing.T) {
	h := startPipe(t, Opts{Width: 40, Height: 10}, 40, 10, false, true)
	h.typ("h\xc3")
	h.waitRow(10, "> h")
	h.typ("\xa9llo ")
	for _, b := range []byte("😀") {
		h.typ(string([]byte{b}))
	}
	h.waitRow(10, "> héllo 😀")
	h.typ("\x1b[") // a lone ESC split from its sequence would count as Escape after EscDelay
	h.typ("D")
	h.typ("\r")
	if ev := h.event(); ev.Text != "héllo 😀" {
		t.Fatalf("submitted %q", ev.Text)
	}
}

func TestConsoleHistory(t *testing.T) {
	h := startPipe(t, Opts{Width: 40, Height: 10}, 40, 10, false, true)
	h.typ("one\r")
	h.event()
	h.typ("two\r")
	h.event()
	h.typ("draft\x1b[A")
	h.waitRow(10, "> two")
	h.typ("\x1b[A")
	h.waitRow(10, "> one")
	h.typ("\x1b[A") // nothing older
	h.typ("\x1b[B\x1b[B")
	h.waitRow(10, "> draft")
	h.typ("\x1b[A\x1b[A\r")
	if ev := h.event(); ev.Text != "one" {
		t.Fatalf("recalled %q, want one", ev.Text)
	}
}

func TestConsoleInterruptAndEOF(t *testing.T) {
	h := startPipe(t, Opts{Width: 40, Height: 10}, 40, 10, false, true)
	h.typ("partial\x03")
	if ev := h.event(); ev.Kind != Interrupt {
		t.Fatalf("event %+v, want Interrupt", ev)
	}
	if got := h.c.Line(); got != "partial" {
		t.Fatalf("Ctrl-C changed the line to %q", got)
	}
	h.typ("\x04") // not empty: nothing under the cursor, no event
	h.noEvent(50 * time.Millisecond)
	h.typ("\x15\x04")
	if ev := h.event(); ev.Kind != EOF {
		t.Fatalf("event %+v, want EOF", ev)
	}
}

func TestConsoleInputEnds(t *testing.T) {
	h := startPipe(t, Opts{Width: 40, Height: 10}, 40, 10, false, true)
	h.typ("x")
	h.inW.Close()
	if ev := h.event(); ev.Kind != EOF {
		t.Fatalf("event %+v, want EOF", ev)
	}
	select {
	case err := <-h.runErr:
		if err != nil {
			t.Fatalf("Run = %v, want nil at end of input", err)
		}
		h.runErr <- nil // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return at end of input")
	}
	if _, ok := <-h.c.Events(); ok {
		t.Fatal("events channel not closed after Run")
	}
}

func TestConsoleScreen(t *testing.T) {
	const W, H = 30, 8
	h := startPipe(t, Opts{Width: W, Height: H}, W, H, false, true)
	h.c.SetStatus("connected")
	h.c.SetActivity("thinking")
	h.c.AddMessage(RoleUser, "hi there")
	h.c.AddMessage(RoleAssistant, "the quick brown fox jumps over the lazy dog")
	h.c.AddMessage(RoleSystem, "note")
	h.typ("abc")
	h.waitRow(H, "> abc")
	h.flush()

	want := []string{
		"",
		"",
		"> hi there",
		"the quick brown fox jumps",
		"over the lazy dog",
		"-- note",
		"connected            thinking",
		"> abc",
	}
	for i, w := range want {
		if got := h.v.row(i + 1); got != w {
			t.Errorf("row %d = %q, want %q\nscreen:\n%s", i+1, got, w, h.v.screen())
		}
	}
	if a := h.v.attrAt(3, 1); a&attrBold == 0 {
		t.Errorf("user line attr %b, want bold", a)
	}
	if a := h.v.attrAt(4, 1); a != 0 {
		t.Errorf("assistant line attr %b, want plain", a)
	}
	if a := h.v.attrAt(6, 4); a&attrDim == 0 {
		t.Errorf("system line attr %b, want dim", a)
	}
	if a := h.v.attrAt(H-1, 1); a&attrReverse == 0 {
		t.Errorf("status attr %b, want reverse", a)
	}
	if r, c := h.v.cursor(); r != H || c != 6 {
		t.Errorf("cursor at %d,%d, want %d,6", r, c, H)
	}

	// More messages scroll the conversation; the status and input lines
	// stay where they are.
	for i := range 10 {
		h.c.AddMessage(RoleAssistant, fmt.Sprintf("line %d", i))
	}
	h.c.SetStatus("offline: retry in 7s")
	h.c.SetActivity("")
	h.flush()
	for i := 1; i <= 6; i++ {
		if got, w := h.v.row(i), fmt.Sprintf("line %d", i+3); got != w {
			t.Errorf("row %d = %q, want %q\nscreen:\n%s", i, got, w, h.v.screen())
		}
	}
	if got := h.v.row(H - 1); got != "offline: retry in 7s" {
		t.Errorf("status row = %q", got)
	}
	if got := h.v.row(H); got != "> abc" {
		t.Errorf("input row = %q", got)
	}
	for y := 1; y <= H; y++ {
		if n := len([]rune(h.v.row(y))); n >= W {
			t.Errorf("row %d uses the last column: %q", y, h.v.row(y))
		}
	}

	// A redraw paints the same screen.
	before := h.v.screen()
	h.c.Redraw()
	h.flush()
	if after := h.v.screen(); after != before {
		t.Errorf("after Redraw:\n%s\nbefore:\n%s", after, before)
	}
	// Ctrl-L too.
	h.v.mu.Lock()
	n := h.v.bytes
	h.v.mu.Unlock()
	h.typ("\x0c")
	h.v.waitFor(t, "the redraw", func() bool {
		h.v.mu.Lock()
		defer h.v.mu.Unlock()
		return h.v.bytes > n+100
	})
	h.flush()
	if after := h.v.screen(); after != before {
		t.Errorf("after Ctrl-L:\n%s\nbefore:\n%s", after, before)
	}
}

func TestConsoleNoScrollRegion(t *testing.T) {
	h := startPipe(t, Opts{Width: 20, Height: 6, NoScrollRegion: true}, 20, 6, false, true)
	for i := range 6 {
		h.c.AddMessage(RoleAssistant, fmt.Sprintf("m%d", i))
	}
	h.flush()
	for i := 1; i <= 4; i++ {
		if got, w := h.v.row(i), fmt.Sprintf("m%d", i+1); got != w {
			t.Errorf("row %d = %q, want %q\n%s", i, got, w, h.v.screen())
		}
	}
}

func TestConsoleSanitizesMessages(t *testing.T) {
	h := startPipe(t, Opts{Width: 40, Height: 8}, 40, 8, false, true)
	h.c.AddMessage(RoleAssistant, "first")
	h.c.AddMessage(RoleAssistant, "\x1b[2J\x1b[Hgot\x1b[31mcha\x07")
	h.flush()
	if h.v.find("first") == 0 || h.v.row(6) != "gotcha" {
		t.Fatalf("escape sequences reached the terminal:\n%s", h.v.screen())
	}
}

func TestConsoleLongInputScrolls(t *testing.T) {
	const W = 20
	h := startPipe(t, Opts{Width: W, Height: 5}, W, 5, false, true)
	text := "abcdefghijklmnopqrstuvwxyz0123456789"
	h.typ(text)
	h.waitLine(text)
	h.flush()
	row := h.v.row(5)
	if !strings.HasPrefix(row, "> ") || !strings.HasSuffix(text, row[2:]) || len(row) >= W {
		t.Fatalf("input row %q: want the end of the text within %d columns", row, W-1)
	}
	if r, c := h.v.cursor(); r != 5 || c >= W {
		t.Fatalf("cursor at %d,%d: must stay off the last column", r, c)
	}
	h.typ("\x01")
	h.v.waitFor(t, "Home", func() bool { return strings.HasPrefix(h.v.row(5), "> abcdefgh") })
	if _, c := h.v.cursor(); c != 3 {
		t.Fatalf("after Home cursor col %d, want 3", c)
	}
	h.typ("\x05\r")
	if ev := h.event(); ev.Text != text {
		t.Fatalf("submitted %q", ev.Text)
	}
}

func TestConsoleSizeProbe(t *testing.T) {
	h := startPipe(t, Opts{ProbeTimeout: 2 * time.Second}, 50, 12, true, true)
	ev := h.event()
	if ev.Kind != Resize || ev.Width != 50 || ev.Height != 12 {
		t.Fatalf("event %+v, want Resize 50x12", ev)
	}
	h.c.SetStatus("ok")
	h.flush()
	h.waitRow(11, "ok")
	if w, hh := h.c.Size(); w != 50 || hh != 12 {
		t.Fatalf("Size() = %dx%d", w, hh)
	}
}

func TestConsoleProbeTimeout(t *testing.T) {
	h := startPipe(t, Opts{ProbeTimeout: 50 * time.Millisecond}, DefaultWidth, DefaultHeight, false, true)
	h.c.SetStatus("ok")
	h.flush()
	h.waitRow(DefaultHeight-1, "ok")
	h.noEvent(150 * time.Millisecond)
	// A late or stray report is not a size.
	h.typ("\x1b[10;20R")
	h.noEvent(50 * time.Millisecond)
	if w, hh := h.c.Size(); w != DefaultWidth || hh != DefaultHeight {
		t.Fatalf("Size() = %dx%d", w, hh)
	}
}

// A terminal that was not there for the first size query (picocom started
// after the daemon) is asked again, and repainted, when someone types.
func TestConsoleReprobesOnInput(t *testing.T) {
	h := startPipe(t, Opts{ProbeTimeout: 50 * time.Millisecond}, 50, 12, false, true)
	h.c.SetStatus("ok")
	h.noEvent(150 * time.Millisecond) // the first query times out
	h.v.mu.Lock()
	h.v.respond = func(b []byte) { go h.inW.Write(b) }
	h.v.reset() // a fresh terminal: nothing drawn on it yet
	h.v.mu.Unlock()
	h.typ("x")
	ev := h.event()
	if ev.Kind != Resize || ev.Width != 50 || ev.Height != 12 {
		t.Fatalf("event %+v, want Resize 50x12", ev)
	}
	h.waitRow(11, "ok")
	h.waitRow(12, "> x")
}

func TestConsoleResize(t *testing.T) {
	h := startPipe(t, Opts{Width: 40, Height: 12}, 40, 12, false, true)
	h.c.SetStatus("status")
	h.waitRow(11, "status")
	h.c.Resize(30, 8)
	h.flush()
	h.waitRow(7, "status")
	if h.v.row(11) != "" {
		t.Fatalf("old status row not cleared:\n%s", h.v.screen())
	}
}

// A terminal that does not read must not block the callers; once it reads
// again it gets a consistent screen.
func TestConsoleStalledTerminal(t *testing.T) {
	h := startPipe(t, Opts{Width: 30, Height: 6, MaxPending: 2048}, 30, 6, false, false)
	start := time.Now()
	for i := range 2000 {
		h.c.AddMessage(RoleAssistant, fmt.Sprintf("message %d", i))
		h.c.SetStatus(fmt.Sprintf("status %d", i))
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("callers blocked for %v on a stalled terminal", d)
	}
	h.open()
	h.flush()
	h.waitRow(4, "message 1999")
	h.waitRow(5, "status 1999")
	h.waitRow(1, "message 1996")
	if n := h.v.bytes; n > 64<<10 {
		t.Errorf("%d bytes written to catch up; want a bounded redraw", n)
	}
}

func TestConsoleRunOnceAndClose(t *testing.T) {
	h := startPipe(t, Opts{Width: 20, Height: 5}, 20, 5, false, true)
	h.flush()
	if err := h.c.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
	h.cancel()
	select {
	case err := <-h.runErr:
		if err != context.Canceled {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		h.runErr <- err
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	if err := h.c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := h.c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Close left the terminal with the whole screen scrollable.
	h.v.waitFor(t, "the scroll region reset", func() bool {
		h.v.mu.Lock()
		defer h.v.mu.Unlock()
		return h.v.top == 0 && h.v.bot == 4
	})
	h.c.AddMessage(RoleUser, "after close") // must not panic or block
}

// A message streamed under a key grows in place: the lines that changed
// are drawn again and new ones scroll in; the final text replaces it;
// a message added after it moves it up, and its next change repaints.
func TestConsoleStream(t *testing.T) {
	const W, H = 30, 8
	h := startPipe(t, Opts{Width: W, Height: H}, W, H, false, true)
	h.c.AddMessage(RoleUser, "tell me")
	h.flush()
	h.c.Stream("m1", RoleAssistant, "the quick")
	h.waitRow(H-2, "the quick")
	h.v.mu.Lock()
	before := h.v.bytes
	h.v.mu.Unlock()
	h.c.Stream("m1", RoleAssistant, "the quick brown")
	h.waitRow(H-2, "the quick brown")
	h.flush()
	h.v.mu.Lock()
	grew := h.v.bytes - before
	h.v.mu.Unlock()
	// Moving the cursor there and " brown", then back to the input line:
	// far less than a repaint of the line.
	if grew > 30 {
		t.Errorf("growing a line by 6 characters wrote %d bytes", grew)
	}
	h.c.Stream("m1", RoleAssistant, "the quick brown fox jumps over the lazy dog")
	h.waitRow(H-2, "over the lazy dog")
	h.flush()
	for i, want := range []string{"> tell me", "the quick brown fox jumps", "over the lazy dog"} {
		if got := h.v.row(H - 4 + i); got != want {
			t.Errorf("row %d = %q, want %q\n%s", H-4+i, got, want, h.v.screen())
		}
	}
	h.c.AddMessage(RoleUser, "and then?")
	h.waitRow(H-2, "> and then?")
	h.c.Stream("m1", RoleAssistant, "the end")
	h.waitRow(H-3, "the end")
	h.flush()
	for i, want := range []string{"", "", "", "> tell me", "the end", "> and then?"} {
		if got := h.v.row(i + 1); got != want {
			t.Errorf("row %d = %q, want %q\n%s", i+1, got, want, h.v.screen())
		}
	}
}
