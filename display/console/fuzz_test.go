package console

import (
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzDecoder checks that the input decoder never panics, only reports
// valid non-control runes, and decodes the same keys however the input is
// split across reads. It also runs the keys through the editor.
func FuzzDecoder(f *testing.F) {
	for _, s := range []string{
		"hello\r", "a\r\nb\n", "\x1b[A\x1b[B\x1bOC\x1b[3~", "\x1b[24;80R", "héllo😀",
		"\xe2\x82", "\x1b[1;5C", "\x1b\x1b", "\x7f\x08\x15\x17\x03\x04", "\xc2\x85", "\x1b[?25h",
	} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		var whole Decoder
		want := whole.Decode(nil, data)
		want = whole.Flush(want)

		var parts Decoder
		var got []Key
		step := int(split)%7 + 1
		for i := 0; i < len(data); i += step {
			got = parts.Decode(got, data[i:min(len(data), i+step)])
		}
		got = parts.Flush(got)
		if !slices.Equal(got, want) {
			t.Fatalf("split by %d: %v, whole: %v", step, got, want)
		}
		ed := newEditor(64, 4)
		for _, k := range want {
			if k.Kind == KeyRune {
				if !utf8.ValidRune(k.Rune) {
					t.Fatalf("invalid rune %U", k.Rune)
				}
				if k.Rune < 0x20 || (k.Rune >= 0x7f && k.Rune < 0xa0) {
					t.Fatalf("control rune %U reported", k.Rune)
				}
				ed.insert(k.Rune)
			}
			applyKey(ed, k)
			if ed.cur < 0 || ed.cur > len(ed.buf) || len(ed.buf) > 64 {
				t.Fatalf("editor out of bounds: cur %d len %d", ed.cur, len(ed.buf))
			}
		}
	})
}

// applyKey runs an editing key on ed the way the Console does.
func applyKey(ed *editor, k Key) {
	switch k.Kind {
	case KeyEnter:
		ed.submit()
	case KeyBackspace:
		ed.backspace()
	case KeyDelete:
		ed.deleteForward()
	case KeyLeft:
		ed.left()
	case KeyRight:
		ed.right()
	case KeyHome:
		ed.home()
	case KeyEnd:
		ed.end()
	case KeyUp:
		ed.up()
	case KeyDown:
		ed.down()
	case KeyKillLine:
		ed.killLine()
	case KeyKillWord:
		ed.killWord()
	case KeyKillToEnd:
		ed.killToEnd()
	}
}
