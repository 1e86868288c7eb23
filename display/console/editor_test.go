package console

import (
	"slices"
	"strings"
	"testing"
)

// edit decodes keys into a fresh editor and returns the submitted lines
// and the line left over.
func edit(ed *editor, input string) (submitted []string, line string, cur int) {
	var d Decoder
	for _, k := range d.Decode(nil, []byte(input)) {
		switch k.Kind {
		case KeyRune:
			ed.insert(k.Rune)
		case KeyEnter:
			submitted = append(submitted, ed.submit())
		case KeyEOF:
			ed.deleteForward()
		default:
			applyKey(ed, k)
		}
	}
	return submitted, string(ed.buf), ed.cur
}

func TestEditor(t *testing.T) {
	tests := []struct {
		name string
		in   string
		line string
		cur  int
	}{
		{"type", "hello", "hello", 5},
		{"backspace DEL", "abc\x7f", "ab", 2},
		{"backspace BS", "abc\x08\x08", "a", 1},
		{"backspace at start", "\x7f\x7fa", "a", 1},
		{"left insert", "ac\x1b[Db", "abc", 2},
		{"left SS3", "ac\x1bODb", "abc", 2},
		{"right", "ab\x1b[D\x1b[D\x1b[Cx", "axb", 2},
		{"right at end", "ab\x1b[C\x1bOC", "ab", 2},
		{"left at start", "\x1b[Da", "a", 1},
		{"home end", "bc\x01a\x05d", "abcd", 4},
		{"delete", "abc\x1b[D\x1b[D\x1b[3~", "ac", 1},
		{"ctrl-d deletes under cursor", "abc\x1b[D\x04", "ab", 2},
		{"ctrl-u kills line", "hello world\x15", "", 0},
		{"ctrl-u kills before cursor", "hello world\x1b[D\x1b[D\x15", "ld", 0},
		{"ctrl-w kills word", "hello big world\x17", "hello big ", 10},
		{"ctrl-w trailing blanks", "hello world  \x17", "hello ", 6},
		{"ctrl-w twice", "a b c\x17\x17", "a ", 2},
		{"ctrl-w at start", "\x17x", "x", 1},
		{"ctrl-k", "hello\x01\x1b[C\x0b", "h", 1},
		{"utf8 editing", "héllo\x7f\x7f\x7f\x7f", "h", 1},
		{"wide", "日本\x1b[Dx", "日x本", 2},
		{"controls refused", "a\x00\x1fb", "ab", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, line, cur := edit(newEditor(100, 10), tt.in)
			if line != tt.line || cur != tt.cur {
				t.Errorf("%q -> %q cursor %d, want %q cursor %d", tt.in, line, cur, tt.line, tt.cur)
			}
		})
	}
}

func TestEditorMax(t *testing.T) {
	_, line, _ := edit(newEditor(5, 10), "abcdefgh")
	if line != "abcde" {
		t.Fatalf("line = %q, want it cut at 5 runes", line)
	}
}

func TestEditorHistory(t *testing.T) {
	ed := newEditor(100, 3)
	sub, _, _ := edit(ed, "one\rtwo\r\r  \rtwo\rthree\r")
	if want := []string{"one", "two", "", "  ", "two", "three"}; !slices.Equal(sub, want) {
		t.Fatalf("submitted %q, want %q", sub, want)
	}
	// Blank lines and repeats are not recorded.
	if want := []string{"one", "two", "three"}; !slices.Equal(ed.hist, want) {
		t.Fatalf("history %q, want %q", ed.hist, want)
	}
	up, down := "\x1b[A", "\x1b[B"
	tests := []struct {
		keys, line string
	}{
		{up, "three"},
		{up + up, "two"},
		{up + up + up, "one"},
		{up + up + up + up, "one"},
		{up + up + down, "three"},
		{up + down, "draft"},
		{up + down + down, "draft"},
		// An edit to a recalled entry is dropped when browsing away from
		// it (readline without history rewriting).
		{up + "!" + up + down, "three"},
	}
	for _, tt := range tests {
		e := newEditor(100, 3)
		e.hist = slices.Clone(ed.hist)
		e.hidx = len(e.hist)
		_, line, _ := edit(e, "draft"+tt.keys)
		if line != tt.line {
			t.Errorf("draft+%q -> %q, want %q", tt.keys, line, tt.line)
		}
	}
	// The history is bounded.
	e := newEditor(100, 3)
	edit(e, "a\rb\rc\rd\r")
	if want := []string{"b", "c", "d"}; !slices.Equal(e.hist, want) {
		t.Fatalf("bounded history %q, want %q", e.hist, want)
	}
	_, line, _ := edit(e, strings.Repeat(up, 5))
	if line != "b" {
		t.Fatalf("oldest = %q", line)
	}
}

// choose steps an option's number in the line (SetChoices' arrows):
// down from a line that is not a number starts at 1, up at n; both wrap;
// the history is untouched.
func TestEditorChoose(t *testing.T) {
	ed := newEditor(100, 10)
	ed.insert('x')
	ed.submit()
	ed.insert('h')
	steps := []struct {
		dir  int
		want string
	}{{1, "1"}, {1, "2"}, {1, "3"}, {1, "1"}, {-1, "3"}, {-1, "2"}}
	for i, s := range steps {
		if !ed.choose(s.dir, 3) || string(ed.buf) != s.want || ed.cur != 1 {
			t.Fatalf("step %d: line %q cursor %d, want %q", i, string(ed.buf), ed.cur, s.want)
		}
	}
	ed.set([]rune("hello"))
	if ed.choose(-1, 3); string(ed.buf) != "3" {
		t.Fatalf("up from text: %q, want the last option", string(ed.buf))
	}
	if ed.choose(1, 0) || ed.choose(1, 10) {
		t.Fatal("choose with no options or more than 9 changed the line")
	}
	if !slices.Equal(ed.hist, []string{"x"}) {
		t.Fatalf("history %q", ed.hist)
	}
}
