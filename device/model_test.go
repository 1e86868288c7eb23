package device_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"termlink/device"
	"termlink/display/hd44780"
	"termlink/link"
	"termlink/testrig/lcdemu"
)

// A step of a paging test: send a message of n lines, get an answer of n
// lines, or page up/down.
type step struct {
	op string // "send", "answer", "up", "down"
	n  int
}

// layout is a stand-in for the LCD's wrapping: entry i (its Seq) has
// lines[i] lines, named "<seq>.<line>".
type layout map[uint64]int

func (l layout) lines(m *device.Model) (names []string, seqs []uint64) {
	for _, e := range m.Entries {
		for i := range l[e.Seq] {
			names = append(names, fmt.Sprintf("%d.%d", e.Seq, i))
			seqs = append(seqs, e.Seq)
		}
	}
	return names, seqs
}

// The page shown after each step (3 rows, as on a 20x4 LCD): full at the
// top and the bottom, a new long answer opens at its first line, '+'
// (Unread) wherever more is below the page.
func TestModelPaging(t *testing.T) {
	tests := []struct {
		name   string
		steps  []step
		want   string // the page after the last step
		unread bool
	}{
		{"short talk follows the newest", []step{{"send", 1}, {"answer", 1}}, "1.0 2.0", false},
		{"answer that fits shows whole at the bottom", []step{{"send", 2}, {"answer", 2}, {"send", 1}, {"answer", 2}}, "3.0 4.0 4.1", false},
		{"long answer opens at its first line", []step{{"send", 1}, {"answer", 7}}, "2.0 2.1 2.2", true},
		{"page down through a long answer", []step{{"send", 1}, {"answer", 7}, {"down", 0}}, "2.3 2.4 2.5", true},
		{"page down to its end", []step{{"send", 1}, {"answer", 7}, {"down", 0}, {"down", 0}}, "2.4 2.5 2.6", false},
		{"past the end stays at the end", []step{{"send", 1}, {"answer", 7}, {"down", 0}, {"down", 0}, {"down", 0}}, "2.4 2.5 2.6", false},
		{"page up from an opened answer", []step{{"send", 2}, {"answer", 7}, {"up", 0}}, "1.0 1.1 2.0", true},
		// 1 + 6 + 1 lines = 8; the old pages from the bottom left one line
		// on the top page.
		{"top page is full", []step{{"send", 1}, {"answer", 6}, {"down", 0}, {"down", 0}, {"send", 1}, {"up", 0}, {"up", 0}, {"up", 0}}, "1.0 2.0 2.1", true},
		{"top page is full, far up", []step{{"send", 1}, {"answer", 6}, {"send", 1}, {"up", 0}, {"up", 0}, {"up", 0}, {"up", 0}, {"up", 0}}, "1.0 2.0 2.1", true},
		{"answer while reading back keeps the page", []step{{"send", 4}, {"answer", 1}, {"send", 1}, {"up", 0}, {"answer", 5}}, "1.0 1.1 1.2", true},
		{"sending goes back to the newest", []step{{"send", 1}, {"answer", 9}, {"send", 1}}, "2.7 2.8 3.0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m device.Model
			l := layout{}
			id := ""
			var got string
			for _, s := range tt.steps {
				switch s.op {
				case "send":
					id = fmt.Sprintf("m%d", len(m.Entries))
					m.Sent(id, "message")
				case "answer":
					m.Apply(link.Event{Kind: link.EventReply, MessageID: id, Reply: &link.Message{MessageID: id, Text: "answer", FinishReason: "stop"}})
				case "up":
					m.PageUp()
				case "down":
					m.PageDown()
				}
				if s.n > 0 {
					l[m.Entries[len(m.Entries)-1].Seq] = s.n
				}
				names, seqs := l.lines(&m)
				start := m.Window(seqs, 3)
				got = strings.Join(names[start:min(start+3, len(names))], " ")
			}
			if got != tt.want || m.Unread != tt.unread {
				t.Errorf("page %q unread %v, want %q unread %v", got, m.Unread, tt.want, tt.unread)
			}
		})
	}
}

// An entry dropped from the front, or wrapped to fewer lines, while the
// page is pinned to it: the page stays in range.
func TestModelPagingPinnedEntryGone(t *testing.T) {
	var m device.Model
	m.Sent("a", "x")
	m.Apply(link.Event{Kind: link.EventReply, MessageID: "a", Reply: &link.Message{Text: "y"}})
	seqs := []uint64{1, 2, 2, 2, 2, 2, 2}
	if start := m.Window(seqs, 3); start != 1 {
		t.Fatalf("answer opens at line %d, want 1", start)
	}
	m.PageDown()
	if start := m.Window(seqs, 3); start != 4 {
		t.Fatalf("page down: line %d, want 4", start)
	}
	// The answer now wraps to two lines: line 3 of it is gone.
	if start := m.Window([]uint64{1, 2, 2}, 3); start != 0 {
		t.Fatalf("rewrapped: line %d, want 0", start)
	}
	// Pinned to entry 2 again, which is then dropped.
	m.Sent("b", "x")
	m.Apply(link.Event{Kind: link.EventReply, MessageID: "b", Reply: &link.Message{Text: "y"}})
	seqs = []uint64{1, 2, 2, 2, 2, 2, 2, 3, 4, 4, 4, 4}
	if start := m.Window(seqs, 3); start != 8 {
		t.Fatalf("second answer opens at line %d, want 8", start)
	}
	m.PageUp()
	m.PageUp()
	if start := m.Window(seqs, 3); start != 2 {
		t.Fatalf("two pages up: line %d, want 2", start)
	}
	if start := m.Window([]uint64{3, 3, 3, 3, 3}, 3); start != 0 {
		t.Fatalf("entry dropped: line %d, want 0 (the oldest line left)", start)
	}
	if start := m.Window(nil, 3); start != 0 || m.Unread {
		t.Fatalf("no lines: start %d unread %v", start, m.Unread)
	}
}

// On the real driver and the emulated 20x4 glass: a long answer opens at
// its first line with '+' in the status, pages down to its end, and the
// top page is full.
func TestLCDPaging(t *testing.T) {
	bus, err := lcdemu.New(&lcdemu.Opts{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	lcd, err := hd44780.New(bus, 0x27, &hd44780.Opts{Rows: 4, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	v := &device.LCDView{Screen: lcd}
	m := &device.Model{Link: link.StateConnected}
	expect := func(what string, want ...string) {
		t.Helper()
		if err := v.Render(context.Background(), m, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := bus.Text(); !slices.Equal(got, want) {
			t.Fatalf("%s:\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	m.Sent("q1", "count")
	m.Apply(link.Event{Kind: link.EventReply, MessageID: "q1", Reply: &link.Message{
		Text: "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen", FinishReason: "stop"}})
	expect("the answer opens at its first line",
		"one two three four  ",
		"five six seven eight",
		"nine ten eleven     ",
		"                 +ok")
	m.PageDown()
	expect("page down",
		"nine ten eleven     ",
		"twelve thirteen     ",
		"fourteen fifteen    ",
		"                  ok")
	m.PageUp()
	m.PageUp()
	expect("the top page is full, more below",
		">count              ",
		"one two three four  ",
		"five six seven eight",
		"                 +ok")
}

// The first streamed text ends the progress shown before it (an agent
// says "thinking", then writes): the status says the answer is being
// written; a progress after that shows again.
func TestModelStreamEndsEarlierProgress(t *testing.T) {
	var m device.Model
	m.Sent("a", "x")
	m.Apply(link.Event{Kind: link.EventProgress, MessageID: "a", Text: "thinking"})
	m.Apply(link.Event{Kind: link.EventDelta, MessageID: "a", Seq: 1, Text: "Hel"})
	if m.Progress != "" || !m.Streaming() {
		t.Fatalf("progress %q streaming %v after the first delta, want none and true", m.Progress, m.Streaming())
	}
	m.Apply(link.Event{Kind: link.EventProgress, MessageID: "a", Text: "tool: search"})
	m.Apply(link.Event{Kind: link.EventDelta, MessageID: "a", Seq: 2, Text: "Hello"})
	if m.Progress != "tool: search" {
		t.Fatalf("progress %q, want the later one kept", m.Progress)
	}
}
