package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Role says who wrote a conversation message; each role is drawn
// differently so the reader can tell them apart.
type Role string

// Roles of conversation messages.
const (
	RoleUser      Role = "user"      // bold, after Opts.UserPrefix
	RoleAssistant Role = "assistant" // plain, after Opts.AssistantPrefix
	RoleSystem    Role = "system"    // dim, after Opts.SystemPrefix (notices, errors)
)

// EventKind is the kind of an Event.
type EventKind uint8

// Events the Console reports.
const (
	Submit    EventKind = iota + 1 // Enter on a non-blank line; Event.Text holds it
	Interrupt                      // Ctrl-C
	EOF                            // Ctrl-D on an empty line, or the input ended
	Resize                         // the terminal size changed; Event.Width/Height
	Blank                          // Enter on a blank line (termd: why the link is offline)
)

func (k EventKind) String() string {
	switch k {
	case Submit:
		return "Submit"
	case Interrupt:
		return "Interrupt"
	case EOF:
		return "EOF"
	case Resize:
		return "Resize"
	case Blank:
		return "Blank"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is something the user did.
type Event struct {
	Kind   EventKind
	Text   string // Submit: the line as typed
	Width  int    // Resize: columns
	Height int    // Resize: rows
}

// Opts configures a Console. The zero value is usable.
type Opts struct {
	// Width and Height are the terminal size in columns and rows. Zero asks
	// the terminal: TIOCGWINSZ when the ReadWriter is a TTY (or has a
	// Size method), else a cursor position report (ESC [ 6 n) answered within
	// ProbeTimeout; 80x24 when nothing answers.
	Width, Height int
	// Prompt starts the input line; default "> ".
	Prompt string
	// UserPrefix, AssistantPrefix and SystemPrefix start the first line of
	// a message of that role; continuation lines are indented to match.
	// Defaults "> ", "" and "-- ".
	UserPrefix, AssistantPrefix, SystemPrefix string
	// MaxInput is the longest input line in characters; default 2000.
	MaxInput int
	// History is how many submitted lines Up/Down can recall; default 100.
	History int
	// Scrollback is how many messages are kept for redraws; default 200.
	Scrollback int
	// MaxMessage is the longest message kept, in bytes; longer ones are cut.
	// Default 64 KiB.
	MaxMessage int
	// NoScrollRegion repaints the conversation area instead of scrolling it
	// with DECSTBM, for terminals without scroll regions.
	NoScrollRegion bool
	// WriteTimeout bounds each write when the ReadWriter has
	// SetWriteDeadline (an *os.File TTY, a Serial); default 2s.
	WriteTimeout time.Duration
	// ProbeTimeout bounds the wait for the cursor position report; default
	// 500ms.
	ProbeTimeout time.Duration
	// MaxPending bounds the bytes queued for a slow terminal; beyond it the
	// queue is dropped and the screen redrawn once the terminal catches up.
	// Default 64 KiB.
	MaxPending int
	// Logger receives write errors; default slog.Default().
	Logger *slog.Logger
}

func (o *Opts) defaults() {
	if o.Prompt == "" {
		o.Prompt = "> "
	}
	if o.UserPrefix == "" {
		o.UserPrefix = "> "
	}
	if o.SystemPrefix == "" {
		o.SystemPrefix = "-- "
	}
	if o.MaxInput <= 0 {
		o.MaxInput = 2000
	}
	if o.History <= 0 {
		o.History = 100
	}
	if o.Scrollback <= 0 {
		o.Scrollback = 200
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = 64 << 10
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 2 * time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 500 * time.Millisecond
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 64 << 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Default terminal size when nothing better is known.
const (
	DefaultWidth  = 80
	DefaultHeight = 24
)

// maxUnanswered bounds the size queries sent on input after earlier ones
// went unanswered (a terminal without cursor position reports).
const maxUnanswered = 3

// Smallest layout the console draws: one conversation row, the status row
// and the input row.
const (
	minWidth  = 8
	minHeight = 3
)

// Sizer is implemented by ReadWriters that know their terminal size, such
// as *TTY.
type Sizer interface {
	Size() (cols, rows int, err error)
}

// Resizer is implemented by ReadWriters that report size changes (SIGWINCH
// for a *TTY).
type Resizer interface {
	Resized() <-chan struct{}
}

// Reopener is implemented by ReadWriters that reconnect, such as *Serial;
// the terminal on the other side may be a new one, so the Console probes its
// size again and redraws.
type Reopener interface {
	Reopened() <-chan struct{}
}

type message struct {
	role Role
	text string
	key  string // Stream's key; "" for AddMessage
}

type style uint8

const (
	stylePlain style = iota
	styleBold
	styleDim
)

type line struct {
	text  string
	style style
}

// Console is a VT100/ANSI chat screen: a scrolling conversation, a status
// line and an input line. Its methods are safe for concurrent use and never
// block on the terminal: output is queued for one writer goroutine.
type Console struct {
	rw     io.ReadWriter
	o      Opts
	events chan Event
	wake   chan struct{}
	done   chan struct{}
	wdone  chan struct{}
	ran    atomic.Bool
	closed atomic.Bool

	mu         sync.Mutex
	choices    int // SetChoices: the arrows pick 1..choices
	w, h       int
	fixed      bool // size given by Opts or Resize; never probed
	probing    bool
	probeSent  bool // a size query was queued; Run arms its timeout
	sizeKnown  bool // the size came from the terminal (or is fixed)
	unanswered int  // size queries that timed out
	msgs       []message
	status     string
	activity   string
	ed         *editor
	hoff       int // first input rune shown (horizontal scroll)
	lastCol    int // column the cursor was parked at on the input line
	live       bool
	full       bool   // a full redraw is due
	raw        []byte // bytes that must reach the terminal (queries, resets)
	out        []byte // incremental output
	writing    bool
	idle       chan struct{} // closed when the writer has nothing left to do
	lastWrErr  error
}

// New returns a Console drawing on rw. Nothing is written before Run
// starts. Call Close when done to stop its writer goroutine.
func New(rw io.ReadWriter, opts Opts) *Console {
	opts.defaults()
	c := &Console{
		rw:     rw,
		o:      opts,
		events: make(chan Event, 16),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		wdone:  make(chan struct{}),
		w:      DefaultWidth,
		h:      DefaultHeight,
		ed:     newEditor(opts.MaxInput, opts.History),
		full:   true,
		idle:   make(chan struct{}),
	}
	if opts.Width > 0 && opts.Height > 0 {
		c.w, c.h, c.fixed = opts.Width, opts.Height, true
	}
	go c.writer()
	return c
}

// Events returns the channel of user events. It is closed when Run returns.
func (c *Console) Events() <-chan Event { return c.events }

// Size returns the size the console draws for.
func (c *Console) Size() (cols, rows int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w, c.h
}

// Line returns the text being edited on the input line.
func (c *Console) Line() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.ed.buf)
}

// AddMessage appends a message to the conversation. Escape sequences and
// control characters in text are removed; it is wrapped to the width.
func (c *Console) AddMessage(role Role, text string) {
	text = sanitize(text)
	if len(text) > c.o.MaxMessage {
		text = strings.ToValidUTF8(text[:c.o.MaxMessage], "") + "…"
	}
	c.addMessage(message{role: role, text: text})
}

func (c *Console) addMessage(m message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	if n := len(c.msgs) - c.o.Scrollback; n > 0 {
		c.msgs = append(c.msgs[:0], c.msgs[n:]...)
	}
	if c.drawable() {
		var b []byte
		b = c.appendLines(b, c.wrapMessage(m))
		b = c.park(b)
		c.queue(b)
	}
	c.mu.Unlock()
	c.kick()
}

// Stream shows text as the message added under key, which is still being
// written: the first call adds it at the bottom of the conversation, the
// next ones replace its text. When it is the newest message only the
// lines that changed are drawn again (and new ones scroll in); otherwise
// the conversation is repainted. key must not be empty; text is cleaned
// and capped as in AddMessage.
func (c *Console) Stream(key string, role Role, text string) {
	if key == "" {
		c.AddMessage(role, text)
		return
	}
	text = sanitize(text)
	if len(text) > c.o.MaxMessage {
		text = strings.ToValidUTF8(text[:c.o.MaxMessage], "") + "…"
	}
	c.mu.Lock()
	i := len(c.msgs) - 1
	for i >= 0 && c.msgs[i].key != key {
		i--
	}
	if i < 0 {
		c.mu.Unlock()
		c.addMessage(message{role: role, text: text, key: key})
		return
	}
	old := c.msgs[i]
	if old.text == text && old.role == role {
		c.mu.Unlock()
		return
	}
	m := message{role: role, text: text, key: key}
	c.msgs[i] = m
	if c.drawable() {
		var b []byte
		if i == len(c.msgs)-1 {
			b = c.appendChanged(b, c.wrapMessage(old), c.wrapMessage(m))
		} else {
			b = c.appendConversation(b)
		}
		c.queue(c.park(b))
	}
	c.mu.Unlock()
	c.kick()
}

// SetStatus sets the left part of the status line: the link state, such as
// "connected" or "offline: retry in 7s".
func (c *Console) SetStatus(text string) {
	c.setStatus(&c.status, text)
}

// SetChoices makes the up and down arrows pick one of n numbered
// options (a question open, 1-9): they put an option's number in the
// input line (down from 1, up from n, wrapping) and Enter submits it;
// n = 0 gives the arrows back to the history.
func (c *Console) SetChoices(n int) {
	c.mu.Lock()
	c.choices = min(max(n, 0), 9)
	c.mu.Unlock()
}

// SetActivity sets the right part of the status line: what is going on
// with the last message, such as "sending", "delivered" or "thinking".
func (c *Console) SetActivity(text string) {
	c.setStatus(&c.activity, text)
}

func (c *Console) setStatus(field *string, text string) {
	text = strings.ReplaceAll(sanitize(text), "\n", " ")
	c.mu.Lock()
	if *field != text {
		*field = text
		if c.drawable() {
			b := c.park(c.appendStatus(nil))
			c.queue(b)
		}
	}
	c.mu.Unlock()
	c.kick()
}

// Redraw repaints the whole screen (after the terminal was cleared or reset
// by someone else).
func (c *Console) Redraw() {
	c.mu.Lock()
	c.full = true
	c.mu.Unlock()
	c.kick()
}

// Resize sets the terminal size and redraws; the size is then kept fixed.
func (c *Console) Resize(cols, rows int) {
	c.mu.Lock()
	c.w, c.h, c.fixed, c.probing = cols, rows, true, false
	c.full = true
	c.mu.Unlock()
	c.kick()
}

// Flush waits until everything drawn so far has been written to the
// terminal.
func (c *Console) Flush(ctx context.Context) error {
	for {
		c.mu.Lock()
		busy := c.writing || len(c.raw) > 0 || len(c.out) > 0 || (c.full && c.live)
		ch := c.idle
		c.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return errors.New("console: closed")
		}
	}
}

// Close restores the terminal's scroll region and attributes, moves the
// cursor below the screen, and stops the writer goroutine. It waits at most
// Opts.WriteTimeout for the terminal; it does not close the ReadWriter.
func (c *Console) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.mu.Lock()
	wasLive := c.live
	if wasLive {
		c.raw = fmt.Appendf(c.raw, "\x1b[0m\x1b[r\x1b[%d;1H\r\n", c.h)
	}
	c.live = false
	c.out = c.out[:0]
	c.mu.Unlock()
	c.kick()
	var err error
	if wasLive {
		ctx, cancel := context.WithTimeout(context.Background(), c.o.WriteTimeout)
		err = c.Flush(ctx)
		cancel()
	}
	close(c.done)
	select {
	case <-c.wdone:
	case <-time.After(c.o.WriteTimeout):
		err = errors.New("console: close: the terminal write is still blocked")
	}
	if err != nil {
		return fmt.Errorf("console: close: %w", err)
	}
	return nil
}

// Run reads and edits input until ctx is done or the input ends, sending
// events on Events. It starts the drawing: the first thing written is a full
// screen (and, when the size is unknown, a size query). Run returns ctx.Err()
// when cancelled, nil when the input ended, or the read error. It can be
// called once.
//
// Input is read with ReadKeys (a lone ESC counts as Escape after EscDelay
// of quiet). Its reader goroutine is stopped by a read deadline when the
// ReadWriter has SetReadDeadline (an *os.File TTY or PTY, a Serial); with a
// plain io.Reader it ends at the next read that returns.
func (c *Console) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return errors.New("console: Run called twice")
	}
	defer close(c.events)

	// The keys, read and decoded by ReadKeys (which flushes a lone ESC
	// when the input goes quiet), arrive here in order, then its end.
	keyc := make(chan []Key)
	rerr := make(chan error, 1)
	rctx, stopReading := context.WithCancel(context.Background())
	rdone := make(chan struct{})
	go func() {
		defer close(rdone)
		rerr <- ReadKeys(rctx, c.rw, func(keys []Key) error {
			select {
			case keyc <- keys:
				return nil
			case <-rctx.Done():
				return rctx.Err()
			}
		})
	}()
	defer func() {
		stopReading()
		<-rdone
	}()

	var resized, reopened <-chan struct{}
	if r, ok := c.rw.(Resizer); ok {
		resized = r.Resized()
	}
	if r, ok := c.rw.(Reopener); ok {
		reopened = r.Reopened()
	}

	probe := time.NewTimer(time.Hour)
	probe.Stop()
	defer probe.Stop()

	c.mu.Lock()
	c.live = true
	c.full = true
	c.startSizing()
	c.mu.Unlock()

	var evs []Event
	for {
		c.mu.Lock()
		if c.probeSent {
			c.probeSent = false
			probe.Reset(c.o.ProbeTimeout)
		}
		c.mu.Unlock()
		c.kick()

		select {
		case <-ctx.Done():
			return ctx.Err()
		case keys := <-keyc:
			evs = c.handle(keys, evs)
			c.mu.Lock()
			if !c.fixed && !c.sizeKnown && !c.probing && c.unanswered < maxUnanswered {
				// Someone is typing but the size query went unanswered:
				// the terminal was probably not there yet (picocom started
				// after us), so what was drawn is lost too. Ask again and
				// repaint.
				c.startSizing()
				c.full = true
			}
			c.mu.Unlock()
		case err := <-rerr:
			if errors.Is(err, io.EOF) { // the keys held were flushed before
				evs = append(evs, Event{Kind: EOF})
				if err := c.emit(ctx, evs); err != nil {
					return err
				}
				return nil
			}
			return fmt.Errorf("console: read: %w", err)
		case <-resized:
			evs = c.resizeFromTerminal(evs)
		case <-reopened:
			c.mu.Lock()
			c.full = true
			c.sizeKnown, c.unanswered = false, 0
			c.startSizing()
			c.mu.Unlock()
		case <-probe.C:
			c.mu.Lock()
			if c.probing {
				c.probing = false
				c.unanswered++
				c.o.Logger.Debug("console: no answer to the size query; keeping the size", "cols", c.w, "rows", c.h)
			}
			c.mu.Unlock()
		}
		if err := c.emit(ctx, evs); err != nil {
			return err
		}
		evs = evs[:0]
	}
}

func (c *Console) emit(ctx context.Context, evs []Event) error {
	for _, ev := range evs {
		select {
		case c.events <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

type writeDeadliner interface {
	SetWriteDeadline(t time.Time) error
}

// startSizing finds the terminal size when it was not given. It returns
// true when a size query was sent and its answer is awaited. c.mu is held.
func (c *Console) startSizing() bool {
	if c.fixed {
		return false
	}
	if w, h, ok := c.terminalSize(); ok {
		c.w, c.h, c.sizeKnown = w, h, true
		return false
	}
	// Save the cursor, go far down-right (CUP clamps to the screen), ask
	// where we are, restore.
	c.raw = append(c.raw, "\x1b7\x1b[999;999H\x1b[6n\x1b8"...)
	c.probing = true
	c.probeSent = true
	return true
}

func (c *Console) terminalSize() (w, h int, ok bool) {
	var err error
	switch t := c.rw.(type) {
	case Sizer:
		w, h, err = t.Size()
	case *os.File:
		w, h, err = TerminalSize(t)
	default:
		return 0, 0, false
	}
	if err != nil || w <= 0 || h <= 0 {
		return 0, 0, false
	}
	return w, h, true
}

func (c *Console) resizeFromTerminal(evs []Event) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fixed {
		return evs
	}
	w, h, ok := c.terminalSize()
	if !ok || (w == c.w && h == c.h) {
		return evs
	}
	c.w, c.h, c.full = w, h, true
	return append(evs, Event{Kind: Resize, Width: w, Height: h})
}

// handle applies keys to the editor and the screen; it returns the events
// to send.
func (c *Console) handle(keys []Key, evs []Event) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	ed := c.ed
	for _, k := range keys {
		changed := false
		switch k.Kind {
		case KeyRune:
			atEnd := ed.cur == len(ed.buf)
			if ed.insert(k.Rune) {
				if atEnd && c.drawable() && c.typeFast(k.Rune) {
					continue
				}
				changed = true
			}
		case KeyEnter:
			text := ed.submit()
			changed = true
			if !isBlank(text) {
				evs = append(evs, Event{Kind: Submit, Text: text})
			} else {
				evs = append(evs, Event{Kind: Blank})
			}
		case KeyBackspace:
			changed = ed.backspace()
		case KeyDelete:
			changed = ed.deleteForward()
		case KeyLeft:
			changed = ed.left()
		case KeyRight:
			changed = ed.right()
		case KeyHome:
			changed = ed.home()
		case KeyEnd:
			changed = ed.end()
		case KeyUp:
			if c.choices > 0 {
				changed = ed.choose(-1, c.choices)
			} else {
				changed = ed.up()
			}
		case KeyDown:
			if c.choices > 0 {
				changed = ed.choose(1, c.choices)
			} else {
				changed = ed.down()
			}
		case KeyKillLine:
			changed = ed.killLine()
		case KeyKillWord:
			changed = ed.killWord()
		case KeyKillToEnd:
			changed = ed.killToEnd()
		case KeyInterrupt:
			evs = append(evs, Event{Kind: Interrupt})
		case KeyEOF:
			if len(ed.buf) == 0 {
				evs = append(evs, Event{Kind: EOF})
			} else {
				changed = ed.deleteForward()
			}
		case KeyRedraw:
			c.full = true
			if !c.fixed && !c.probing {
				c.startSizing()
			}
		case KeyCursorReport:
			if !c.probing {
				continue
			}
			c.probing = false
			c.sizeKnown = true
			if k.Col >= minWidth && k.Row >= minHeight && k.Col < 1000 && k.Row < 1000 &&
				(k.Col != c.w || k.Row != c.h) {
				c.w, c.h, c.full = k.Col, k.Row, true
				evs = append(evs, Event{Kind: Resize, Width: c.w, Height: c.h})
			}
		}
		if changed && c.drawable() {
			c.queue(c.appendInput(nil))
		}
	}
	return evs
}

// drawable reports whether incremental output makes sense now: drawing has
// started and no full redraw is pending (it would include the change).
func (c *Console) drawable() bool { return c.live && !c.full }

// typeFast echoes a rune typed at the end of the line when the input line
// needs nothing else redrawn. c.mu is held.
func (c *Console) typeFast(r rune) bool {
	hoff := c.hoff
	col := c.inputCursorCol()
	if c.hoff != hoff || col != c.lastCol+runeWidth(r) || runeWidth(r) == 0 {
		return false
	}
	c.lastCol = col
	c.queue([]byte(string(r)))
	return true
}

// queue adds incremental output. c.mu is held.
func (c *Console) queue(b []byte) {
	if !c.drawable() || len(b) == 0 {
		return
	}
	if len(c.out)+len(b) > c.o.MaxPending {
		// The terminal is not keeping up: repaint it once it does.
		c.out = c.out[:0]
		c.full = true
		return
	}
	c.out = append(c.out, b...)
}

func (c *Console) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writer is the only goroutine writing to the terminal.
func (c *Console) writer() {
	defer close(c.wdone)
	var buf []byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			buf = append(buf[:0], c.raw...)
			c.raw = c.raw[:0]
			if c.full && c.live {
				c.full = false
				c.out = c.out[:0]
				buf = c.appendFull(buf)
			}
			buf = append(buf, c.out...)
			c.out = c.out[:0]
			if len(buf) == 0 {
				c.writing = false
				close(c.idle)
				c.idle = make(chan struct{})
				c.mu.Unlock()
				break
			}
			c.writing = true
			c.mu.Unlock()

			if err := c.write(buf); err != nil {
				c.mu.Lock()
				if c.closed.Load() {
					// Closing: the terminal is gone, drop the rest.
					c.raw, c.out, c.full = c.raw[:0], c.out[:0], false
					c.mu.Unlock()
					continue
				}
				if c.lastWrErr == nil || c.lastWrErr.Error() != err.Error() {
					c.o.Logger.Warn("console: write failed; will redraw", "err", err)
				}
				c.lastWrErr = err
				c.full = true
				c.writing = false
				c.mu.Unlock()
				// Try again on new output or a reopened port, at most ten
				// times a second, and at least every half second.
				if !c.pause(100*time.Millisecond, nil) || !c.pause(400*time.Millisecond, c.wake) {
					return
				}
				continue
			}
			c.mu.Lock()
			c.lastWrErr = nil
			c.mu.Unlock()
		}
	}
}

// pause waits for d or a value on wake; it returns false when the Console
// is closed.
func (c *Console) pause(d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}

func (c *Console) write(b []byte) error {
	if d, ok := c.rw.(writeDeadliner); ok {
		if d.SetWriteDeadline(time.Now().Add(c.o.WriteTimeout)) == nil {
			defer d.SetWriteDeadline(time.Time{})
		}
	}
	for len(b) > 0 {
		n, err := c.rw.Write(b)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b = b[n:]
	}
	return nil
}
