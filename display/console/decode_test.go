package console

import (
	"slices"
	"testing"
	"unicode/utf8"
)

func r(c rune) Key       { return Key{Kind: KeyRune, Rune: c} }
func k(kind KeyKind) Key { return Key{Kind: kind} }
func runes(s string) []Key {
	var out []Key
	for _, c := range s {
		out = append(out, r(c))
	}
	return out
}
func cat(parts ...[]Key) []Key { return slices.Concat(parts...) }

func TestDecoder(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Key
	}{
		{"ascii", "hi", runes("hi")},
		{"CR", "a\r", cat(runes("a"), []Key{k(KeyEnter)})},
		{"LF", "a\n", cat(runes("a"), []Key{k(KeyEnter)})},
		{"CRLF once", "a\r\nb", cat(runes("a"), []Key{k(KeyEnter)}, runes("b"))},
		{"CR CR twice", "\r\r", []Key{k(KeyEnter), k(KeyEnter)}},
		{"LF LF twice", "\n\n", []Key{k(KeyEnter), k(KeyEnter)}},
		{"LF CR twice", "\n\r", []Key{k(KeyEnter), k(KeyEnter)}},
		{"CR x LF", "\rx\n", []Key{k(KeyEnter), r('x'), k(KeyEnter)}},
		{"DEL", "\x7f", []Key{k(KeyBackspace)}},
		{"BS", "\x08", []Key{k(KeyBackspace)}},
		{"ctrl keys", "\x01\x02\x03\x04\x05\x06\x0b\x0c\x0e\x10\x15\x17", []Key{
			k(KeyHome), k(KeyLeft), k(KeyInterrupt), k(KeyEOF), k(KeyEnd), k(KeyRight),
			k(KeyKillToEnd), k(KeyRedraw), k(KeyDown), k(KeyUp), k(KeyKillLine), k(KeyKillWord)}},
		{"ignored controls", "\x00\x07\x1a", nil},
		{"tab is a space", "\t", runes(" ")},
		{"CSI arrows", "\x1b[A\x1b[B\x1b[C\x1b[D", []Key{k(KeyUp), k(KeyDown), k(KeyRight), k(KeyLeft)}},
		{"SS3 arrows", "\x1bOA\x1bOB\x1bOC\x1bOD", []Key{k(KeyUp), k(KeyDown), k(KeyRight), k(KeyLeft)}},
		{"home end", "\x1b[H\x1b[F\x1bOH\x1bOF\x1b[1~\x1b[4~\x1b[7~\x1b[8~", []Key{
			k(KeyHome), k(KeyEnd), k(KeyHome), k(KeyEnd), k(KeyHome), k(KeyEnd), k(KeyHome), k(KeyEnd)}},
		{"delete pgup pgdn", "\x1b[3~\x1b[5~\x1b[6~", []Key{k(KeyDelete), k(KeyPageUp), k(KeyPageDown)}},
		{"modified arrow", "\x1b[1;5C", []Key{k(KeyRight)}},
		{"unknown CSI dropped", "\x1b[99zq", runes("q")},
		{"private CSI dropped", "\x1b[?1;2cq", runes("q")},
		{"cursor report", "\x1b[24;80R", []Key{{Kind: KeyCursorReport, Row: 24, Col: 80}}},
		{"bad cursor report", "\x1b[24R", nil},
		{"lone ESC then letter", "\x1bx", []Key{k(KeyEscape), r('x')}},
		{"ESC ESC [A", "\x1b\x1b[A", []Key{k(KeyEscape), k(KeyUp)}},
		{"CSI aborted by control", "\x1b[1\ra", []Key{k(KeyEnter), r('a')}},
		{"overlong CSI skipped", "\x1b[" + string(make([]byte, 0)) + "11111111111111111111111111111111111111111111Ab", runes("b")},
		{"utf8 2-byte", "é", runes("é")},
		{"utf8 3-byte", "€", runes("€")},
		{"utf8 4-byte", "😀", runes("😀")},
		{"stray continuation", "\x80a", []Key{r(utf8.RuneError), r('a')}},
		{"truncated sequence", "\xe2\x82a", []Key{r(utf8.RuneError), r('a')}},
		{"invalid lead", "\xff\xc0", []Key{r(utf8.RuneError), r(utf8.RuneError)}},
		{"surrogate", "\xed\xa0\x80", []Key{r(utf8.RuneError)}},
		{"overlong", "\xe0\x80\x80", []Key{r(utf8.RuneError)}},
		{"C1 control dropped", "\xc2\x85x", runes("x")},
		{"utf8 cut by ESC", "\xc3\x1b[A", []Key{r(utf8.RuneError), k(KeyUp)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Decoder
			got := d.Decode(nil, []byte(tt.in))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Decode(%q) = %v, want %v", tt.in, got, tt.want)
			}
			// Byte by byte must give the same keys.
			var d2 Decoder
			var got2 []Key
			for i := range len(tt.in) {
				got2 = d2.Decode(got2, []byte{tt.in[i]})
			}
			if !slices.Equal(got2, tt.want) {
				t.Errorf("byte by byte %q = %v, want %v", tt.in, got2, tt.want)
			}
		})
	}
}

func TestDecoderFlush(t *testing.T) {
	var d Decoder
	got := d.Decode(nil, []byte("a\xe2\x82"))
	if !d.Pending() {
		t.Fatal("Pending() = false with half a character held")
	}
	got = d.Flush(got)
	want := []Key{r('a'), r(utf8.RuneError)}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	got = d.Flush(d.Decode(nil, []byte("\x1b")))
	if !slices.Equal(got, []Key{k(KeyEscape)}) {
		t.Fatalf("lone ESC flushed = %v", got)
	}
	got = d.Flush(d.Decode(nil, []byte("\x1b[12")))
	if len(got) != 0 || d.Pending() {
		t.Fatalf("partial CSI flushed = %v, pending %v", got, d.Pending())
	}
}

func TestKeyString(t *testing.T) {
	for _, tt := range []struct {
		k    Key
		want string
	}{
		{r('x'), "'x'"},
		{k(KeyEnter), "Enter"},
		{Key{Kind: KeyCursorReport, Row: 2, Col: 3}, "CursorReport(2;3)"},
		{Key{Kind: KeyKind(200)}, "KeyKind(200)"},
	} {
		if got := tt.k.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}
