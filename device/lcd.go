package device

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"termlink/display"
	"termlink/link"

	pdisplay "periph.io/x/conn/v3/display"
)

// View draws the model.
type View interface {
	Render(ctx context.Context, m *Model, now time.Time) error
}

// LCDView draws the model on a character display: the conversation above,
// and a bottom line with the text being typed (or the link state, or the
// agent's progress, or a storage problem such as "disk full", or why the
// link is offline: "unknown CA", "token refused", "no server" ...) and a
// 3-cell status field at the right:
//
//	cell 1: '+' more (of an answer, of the conversation) is below the
//	        page shown,
//	        ':' waiting for an answer, '!' the state dir cannot be
//	        written (messages are kept in memory until it can)
//	cells 2-3: "ok" online, ".." connecting, "--" offline, or the seconds
//	to the next try while waiting (" 7", "29")
//
// In the conversation a user's message starts with '>' once the server has
// it, '^' while it is queued (offline or not yet acknowledged) and '!' when
// it was refused; termd's own notices start with '-'. An answer still being
// written (capability stream) grows as it arrives, wrapped, ending in a
// block (StreamMark) that says more is coming, and the bottom line says
// "writing..."; the page follows its newest line unless the user pages
// back. When the final reply lands it replaces the text in place: the
// page stays where it is (a reply that was not streamed opens at its
// first line instead). Only the cells that change are sent to the glass
// (the driver diffs each frame against what the glass shows).
//
// A notice (Model.Overlay) takes the whole screen, an alert starting with
// "!", one page after the other when it is longer than the screen, and so
// does the full offline reason the user opened (the send key with nothing
// typed); the idle screen shows its text or a clock, and while the device
// is not online the link's line on its bottom row. Model.Dark turns the
// backlight off when the screen has one (hd44780.Dev does).
type LCDView struct {
	Screen display.Screen
	// NoticePage is how long each page of a long notice stays (0:
	// NoticePage).
	NoticePage time.Duration
	frame      *display.Frame
	light      *bool                   // the backlight as last set; nil: not yet
	wrapped    map[uint64]wrappedEntry // the entries' lines, by Seq (conversation)
}

// backlighter is a screen with a backlight switch (hd44780.Dev).
type backlighter interface {
	Backlight(pdisplay.Intensity) error
}

// StreamMark ends the text of an answer still being written (A00's full
// block, 0xFF); StreamMarkPlain is the mark on a screen without it.
const (
	StreamMark      = '█'
	StreamMarkPlain = '_'
)

func (v *LCDView) streamMark() rune {
	if v.Screen.Shows(StreamMark) {
		return StreamMark
	}
	return StreamMarkPlain
}

// statusCells is the width of the status field.
const statusCells = 3

// Render implements View.
func (v *LCDView) Render(ctx context.Context, m *Model, now time.Time) error {
	rows, cols := v.Screen.Size()
	if v.frame == nil || v.frame.Rows() != rows || v.frame.Cols() != cols {
		v.frame = display.NewFrame(rows, cols)
	}
	f := v.frame
	f.Clear()
	if m.Asking() {
		v.question(m, rows, cols, now) // lcdquestion.go
		if err := v.Screen.Draw(ctx, f); err != nil {
			return err
		}
		return v.backlight(m)
	}
	if m.Overlay.Kind != OverlayNone {
		v.overlay(m, rows, cols, now)
		if err := v.Screen.Draw(ctx, f); err != nil {
			return err
		}
		return v.backlight(m)
	}
	page := rows - 1
	if page < 1 {
		page = 1
	}
	lines, seqs := v.conversation(m, cols)
	start := m.Window(seqs, page)
	end := min(start+page, len(lines))
	if rows > 1 {
		for i, l := range lines[start:end] {
			f.SetLine(i, l)
		}
	}
	f.SetLine(rows-1, v.bottom(m, cols, now))
	if err := v.Screen.Draw(ctx, f); err != nil {
		return err
	}
	return v.backlight(m)
}

// overlay lays out a notice or the idle screen on the whole frame. The
// idle screen never hides that the device is offline: while it is not
// online its bottom row is the link's line, as on the conversation
// screen ("no server" and the seconds to the next try).
func (v *LCDView) overlay(m *Model, rows, cols int, now time.Time) {
	o := m.Overlay
	if o.Kind == OverlayIdle && rows > 1 && (m.Stopping || m.Link != link.StateConnected) {
		rows--
		v.frame.SetLine(rows, v.line(m, v.linkText(m, now), cols, now))
	}
	text := o.Text
	if o.Kind == OverlayIdle && text == "" {
		clock := []string{now.Format("15:04"), now.Format("Mon 2 Jan")}
		top := max((rows-len(clock))/2, 0)
		for i, l := range clock {
			if top+i < rows {
				pad := max((cols-utf8.RuneCountInString(l))/2, 0)
				v.frame.SetLine(top+i, fmt.Sprintf("%*s%s", pad, "", l))
			}
		}
		return
	}
	if o.Alert {
		text = "! " + text
	}
	pages := display.Layout(v.Screen, text, rows, cols)
	if len(pages) == 0 {
		return
	}
	// A text longer than the screen turns its pages every NoticePage.
	every := v.NoticePage
	if every <= 0 {
		every = NoticePage
	}
	page := 0
	if !o.Since.IsZero() && now.After(o.Since) {
		page = int(now.Sub(o.Since)/every) % len(pages)
	}
	for r := range rows {
		l := ""
		if r < len(pages[page]) {
			l = pages[page][r]
		}
		v.frame.SetLine(r, l)
	}
}

// NoticePage is how long each page of a notice (or idle text) longer
// than the screen stays before the next one.
const NoticePage = 3 * time.Second

// backlight switches the backlight to !m.Dark when it changed (screens
// without one are left alone).
func (v *LCDView) backlight(m *Model) error {
	on := !m.Dark
	b, ok := v.Screen.(backlighter)
	if !ok || (v.light != nil && *v.light == on) {
		return nil
	}
	level := pdisplay.Intensity(0)
	if on {
		level = 255
	}
	if err := b.Backlight(level); err != nil {
		if errors.Is(err, pdisplay.ErrNotImplemented) {
			v.light = &on // no backlight pin: nothing to switch
			return nil
		}
		return fmt.Errorf("switching the backlight: %w", err)
	}
	v.light = &on
	return nil
}

// Mirror implements Mirror: the rows last drawn, and the backlight.
func (v *LCDView) Mirror() link.Screen {
	s := link.Screen{Backlight: v.light == nil || *v.light}
	if v.frame != nil {
		s.Rows = v.frame.Lines()
	}
	if g, ok := v.Screen.(interface{ ROM() display.ROM }); ok { // an HD44780: the console draws its glyphs
		s.ROM = g.ROM().String()
	}
	return s
}

// conversation wraps the entries into lines, and gives the Seq of the
// entry of each line. An entry's lines are kept from the last draw while
// its text, mark and the width are the same: while an answer streams in
// (a draw per delta) only that one is wrapped again.
func (v *LCDView) conversation(m *Model, cols int) (lines []string, seqs []uint64) {
	if v.wrapped == nil {
		v.wrapped = map[uint64]wrappedEntry{}
	}
	for seq := range v.wrapped { // entries gone from the model
		if len(m.Entries) == 0 || seq < m.Entries[0].Seq {
			delete(v.wrapped, seq)
		}
	}
	for _, e := range m.Entries {
		var mark byte
		switch e.Role {
		case User:
			mark = '>'
			switch e.Delivery {
			case Queued:
				mark = '^'
			case Failed:
				mark = '!'
			}
		case System:
			mark = '-'
		}
		w, ok := v.wrapped[e.Seq]
		if !ok || w.text != e.Text || w.mark != mark || w.streaming != e.Streaming || w.cols != cols {
			var folded string
			if ok && w.mark == mark && strings.HasPrefix(e.Text, w.text) && !strings.HasSuffix(w.text, "\r") {
				// The text grew (an answer streaming in): Fold works rune
				// by rune (but for "\r\n"), so only the new end is folded.
				folded = w.folded + display.Fold(v.Screen, e.Text[len(w.text):])
			} else {
				text := e.Text
				if mark != 0 {
					text = string(mark) + text
				}
				folded = display.Fold(v.Screen, text)
			}
			text := folded
			if e.Streaming {
				text += string(v.streamMark()) // more is coming
			}
			w = wrappedEntry{text: e.Text, folded: folded, mark: mark, streaming: e.Streaming, cols: cols, lines: display.Wrap(text, cols)}
			v.wrapped[e.Seq] = w
		}
		lines = append(lines, w.lines...)
		for range w.lines {
			seqs = append(seqs, e.Seq)
		}
	}
	return lines, seqs
}

// wrappedEntry is an entry's lines as last wrapped, and what they were
// wrapped from.
type wrappedEntry struct {
	text      string
	folded    string // the mark and text, folded
	mark      byte
	streaming bool
	cols      int
	lines     []string
}

func (v *LCDView) bottom(m *Model, cols int, now time.Time) string {
	width := cols - statusCells
	if width < 1 {
		width = cols
	}
	var left string
	switch {
	case m.Compose != "":
		left = display.Fold(v.Screen, m.Compose)
		if !m.ComposePending {
			left += "_" // where the next letter goes
		}
		if n := utf8.RuneCountInString(left); n > width {
			left = string([]rune(left)[n-width:]) // keep the end in view
		}
	case m.Stopping || m.Link != link.StateConnected:
		left = v.linkText(m, now)
	case m.Busy() && m.Progress != "":
		left = m.Progress
	case m.Streaming():
		left = "writing..."
	case m.Busy():
		left = "waiting..."
	case m.Storage != "":
		left = m.Storage
	case m.Mode != "":
		left = "[" + m.Mode + "]"
	}
	return v.line(m, left, cols, now)
}

// linkText is where the link is, for the bottom line while it is not
// online: the short reason it is offline (the countdown is in the status
// field), else "connecting", "offline: stopped" ...
func (v *LCDView) linkText(m *Model, now time.Time) string {
	if !m.Stopping && m.Link != link.StateConnected && m.Reason != "" {
		return m.ShortReason()
	}
	return m.LinkText(now)
}

// line is a bottom line: left, cut to fit, and the status field.
func (v *LCDView) line(m *Model, left string, cols int, now time.Time) string {
	width := cols - statusCells
	if width < 1 {
		width = cols
	}
	left = display.Fold(v.Screen, left)
	if n := utf8.RuneCountInString(left); n > width {
		left = string([]rune(left)[:width])
	}
	if width == cols {
		return left
	}
	return fmt.Sprintf("%-*s%s", width, left, v.status(m, now))
}

func (v *LCDView) status(m *Model, now time.Time) string {
	mark := " "
	switch {
	case m.Unread:
		mark = "+"
	case m.Busy():
		mark = ":"
	case m.Storage != "":
		mark = "!"
	}
	var link2 string
	switch {
	case m.Stopping:
		link2 = "--"
	case m.Link == link.StateConnected:
		link2 = "ok"
	case m.Link == link.StateWaiting:
		s := secondsUntil(now, m.NextTry)
		if s > 99 {
			s = 99
		}
		link2 = fmt.Sprintf("%2d", s)
	case m.Link == link.StateClosed:
		link2 = "--"
	default:
		link2 = ".."
	}
	return mark + link2
}
