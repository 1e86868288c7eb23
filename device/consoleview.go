package device

import (
	"context"
	"fmt"
	"slices"
	"time"

	"termlink/display/console"
	"termlink/link"
)

// ConsoleView draws the model on a VT100 console (display/console): each
// new conversation entry once, the link state in the status line and the
// agent's progress (or the queue) beside it. A server notice shows in the
// status line ("NOTICE: ..." or "ALERT: ...") while it is on. Offline, the
// status line has the short reason ("offline (unknown CA): retry in 14s");
// the full one, with the next try, is added to the conversation when the
// user opens it (Enter on a blank line). The console edits the input line
// itself. An answer still being written (capability stream) grows in
// place as it arrives (console.Stream: only what changed is drawn), ending
// in ConsoleStreamMark, with "writing..." beside the status; the final
// reply replaces it there. A question (capability choice) is added to the
// conversation with its options ("[1] Allow once [2] Deny"); the activity
// line keeps the options and the time left in view until it is answered
// (its number and Enter, or the arrows to pick and Enter), then says what
// became of it.
type ConsoleView struct {
	Console *console.Console
	live    map[uint64]string // Seq of streamed entries on the console -> the text drawn
	shown   uint64            // Seq of the last entry added to the console
	why     time.Time         // Since of the last offline reason added to the console
	status  string
	act     string
	choices int      // the options the arrows pick from (Console.SetChoices)
	rows    []string // what Mirror reports: the conversation's last lines, the status line and the activity
	said    []string // the conversation's last mirrorLines entries as the mirror shows them
}

// Render implements View.
func (v *ConsoleView) Render(_ context.Context, m *Model, now time.Time) error {
	if len(v.live) > 0 && len(m.Entries) > 0 { // entries dropped from the model's front
		for seq := range v.live {
			if seq < m.Entries[0].Seq {
				delete(v.live, seq)
			}
		}
	}
	tail := "" // the end of the answer being written, for the mirror
	for _, e := range m.Entries {
		if e.Streaming {
			tail = e.Text
		}
		if drawn, ok := v.live[e.Seq]; ok {
			v.stream(e, drawn)
			continue
		}
		if e.Seq <= v.shown {
			continue
		}
		v.shown = e.Seq
		if e.Streaming {
			v.stream(e, "")
			continue
		}
		switch e.Role {
		case User:
			v.Console.AddMessage(console.RoleUser, e.Text)
		case Assistant:
			v.Console.AddMessage(console.RoleAssistant, e.Text)
		default:
			v.Console.AddMessage(console.RoleSystem, e.Text)
		}
		v.remember(e)
	}
	if o := m.Overlay; o.Kind == OverlayReason && !o.Since.Equal(v.why) {
		v.why = o.Since
		text := o.Text
		if m.Link == link.StateWaiting {
			text += " (next try at " + m.NextTry.Format("15:04:05") + ")"
		}
		v.Console.AddMessage(console.RoleSystem, text)
	}
	status := m.LinkText(now)
	if m.ShortReason() != "" {
		status += " | Enter: why"
	}
	if o := m.Overlay; o.Kind == OverlayNotice {
		label := "NOTICE: "
		if o.Alert {
			label = "ALERT: "
		}
		status = label + o.Text + " | " + status
	}
	if n := m.Queued(); n > 0 {
		status += fmt.Sprintf(" | %d queued", n)
	}
	if m.Storage != "" {
		status += " | " + m.Storage + ": messages in memory"
	}
	act := ""
	switch {
	case m.Said.Text != "" && m.Ask == nil:
		act = m.Said.Text
	case m.Ask != nil:
		// The question is in the conversation; its options, the keys and
		// the time left stay in view here.
		act = fmt.Sprintf("%s | its number (or arrows) and Enter (%s left)", OptionsLine(m.Ask.Q.Options), TimeLeft(now, m.Ask.Deadline))
	case m.Busy() && m.Progress != "":
		act = m.Progress
	case m.Streaming():
		act = "writing..."
	case m.Busy():
		act = "waiting for the answer..."
	}
	if status != v.status {
		v.status = status
		v.Console.SetStatus(status)
	}
	if act != v.act {
		v.act = act
		v.Console.SetActivity(act)
	}
	choices := 0
	if m.Ask != nil {
		choices = len(m.Ask.Q.Options)
	}
	if choices != v.choices {
		v.choices = choices
		v.Console.SetChoices(choices) // the arrows pick an option, Enter answers
	}
	// The mirror is what the person at the console sees, top to bottom:
	// the conversation's last lines, the answer being written, then the
	// status and the activity.
	v.rows = append(v.rows[:0], v.said...)
	if tail != "" {
		if r := []rune(tail); len(r) > mirrorTail {
			tail = "…" + string(r[len(r)-mirrorTail:])
		}
		v.rows = append(v.rows, tail+ConsoleStreamMark)
	}
	v.rows = append(v.rows, status)
	if act != "" {
		v.rows = append(v.rows, act)
	}
	return nil
}

// remember keeps e, drawn whole on the console, among the mirror's last
// lines: "> " before what the user sent, "* " before the device's own
// lines, each cut to mirrorTail characters (its start kept, "…" after).
func (v *ConsoleView) remember(e Entry) {
	line := e.Text
	if r := []rune(line); len(r) > mirrorTail {
		line = string(r[:mirrorTail-1]) + "…"
	}
	switch e.Role {
	case User:
		line = "> " + line
	case Assistant:
	default:
		line = "* " + line
	}
	if len(v.said) == mirrorLines {
		v.said = append(v.said[:0], v.said[1:]...)
	}
	v.said = append(v.said, line)
}

// ConsoleStreamMark ends an answer on the console while it is written.
const ConsoleStreamMark = " ▌"

// stream draws a streamed entry (drawn: the text on the console now) and
// forgets it once its final text is drawn.
func (v *ConsoleView) stream(e Entry, drawn string) {
	text := e.Text
	if e.Streaming {
		text += ConsoleStreamMark
	}
	if text != drawn {
		v.Console.Stream(fmt.Sprint("answer-", e.Seq), console.RoleAssistant, text)
	}
	if v.live == nil {
		v.live = map[uint64]string{}
	}
	if e.Streaming {
		v.live[e.Seq] = text
	} else {
		delete(v.live, e.Seq)
		v.remember(e)
	}
}

// mirrorTail is how much of an answer being written, or of a line of the
// conversation, the mirror carries; mirrorLines how many of the
// conversation's last lines.
const (
	mirrorTail  = 80
	mirrorLines = 8
)

// Mirror implements Mirror: what the console shows, top to bottom (the
// conversation's last lines, the end of an answer being written, the
// status line and the activity line).
func (v *ConsoleView) Mirror() link.Screen {
	return link.Screen{Rows: slices.Clone(v.rows), Backlight: true}
}
