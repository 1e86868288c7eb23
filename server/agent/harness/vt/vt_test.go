package vt

import (
	"strings"
	"testing"
)

func TestScreen(t *testing.T) {
	tests := []struct {
		name       string
		cols, rows int
		in         []string // written one after the other
		want       string
		x, y       int // cursor; -1 to skip
	}{
		{"plain", 20, 5, []string{"hello\r\nworld"}, "hello\nworld", 5, 1},
		{"carriage return overwrites", 20, 5, []string{"abc\rX"}, "Xbc", 1, 0},
		{"backspace", 20, 5, []string{"abc\b\bX"}, "aXc", 2, 0},
		{"backspace at column 0", 20, 5, []string{"\b\bX"}, "X", 1, 0},
		{"erase to end of line", 20, 5, []string{"abcdef\r\x1b[3C\x1b[K"}, "abc", 3, 0},
		{"erase to start of line", 20, 5, []string{"abcdef\x1b[3D\x1b[1K"}, "    ef", 3, 0},
		{"erase line", 20, 5, []string{"abcdef\x1b[2K"}, "", 6, 0},
		{"clear screen and home", 20, 5, []string{"junk\r\nmore\x1b[2J\x1b[Htop"}, "top", 3, 0},
		{"erase below", 20, 5, []string{"a\r\nb\r\nc\x1b[2;1H\x1b[J"}, "a", 0, 1},
		{"erase above", 20, 5, []string{"a\r\nb\r\nc\x1b[2;1H\x1b[1J"}, "\n\nc", 0, 1},
		{"cursor position", 20, 5, []string{"\x1b[3;5Hx"}, "\n\n    x", 5, 2},
		{"cursor position clamps", 20, 5, []string{"\x1b[99;99Hx"}, "\n\n\n\n                   x", 19, 4},
		{"cursor moves", 20, 5, []string{"\x1b[2B\x1b[4Cx\x1b[A\x1b[2Dy"}, "\n   y\n    x", 4, 1},
		{"column and row absolute", 20, 5, []string{"\x1b[3dx\x1b[10Gy"}, "\n\nx        y", 10, 2},
		{"next and previous line", 20, 5, []string{"ab\x1b[2Ecd\x1b[Fef"}, "ab\nef\ncd", 2, 1},
		{"autowrap", 5, 3, []string{"abcdefg"}, "abcde\nfg", 2, 1},
		{"pending wrap then CRLF", 5, 3, []string{"abcde\r\nx"}, "abcde\nx", 1, 1},
		{"pending wrap then backspace", 5, 3, []string{"abcde\bX"}, "abcXe", 4, 0},
		{"no autowrap", 5, 3, []string{"\x1b[?7labcdefg"}, "abcdg", 4, 0},
		{"scroll at bottom", 5, 2, []string{"1\r\n2\r\n3"}, "2\n3", 1, 1},
		{"scroll region", 10, 4, []string{"top\x1b[2;3r\x1b[2;1Ha\r\nb\r\nc\x1b[4;1Hbottom"}, "top\nb\nc\nbottom", 6, 3},
		{"reverse index scrolls down", 10, 3, []string{"a\r\nb\x1b[H\x1bMz"}, "z\na\nb", 1, 0},
		{"index and next line", 10, 3, []string{"a\x1bDb\x1bEc"}, "a\n b\nc", 1, 2},
		{"scroll up and down", 10, 3, []string{"a\r\nb\r\nc\x1b[S"}, "b\nc", 1, 2},
		{"scroll down", 10, 3, []string{"a\r\nb\x1b[T"}, "\na\nb", 1, 1},
		{"insert lines", 10, 4, []string{"a\r\nb\r\nc\x1b[2;1H\x1b[2L"}, "a\n\n\nb", 0, 1},
		{"delete lines", 10, 4, []string{"a\r\nb\r\nc\r\nd\x1b[2;1H\x1b[2M"}, "a\nd", 0, 1},
		{"insert chars", 10, 2, []string{"abc\r\x1b[2@"}, "  abc", 0, 0},
		{"delete chars", 10, 2, []string{"abcdef\r\x1b[2P"}, "cdef", 0, 0},
		{"erase chars", 10, 2, []string{"abcdef\r\x1b[2X"}, "  cdef", 0, 0},
		{"insert mode", 10, 2, []string{"abc\r\x1b[4hXY\x1b[4lZ"}, "XYZbc", 3, 0},
		{"tab", 20, 2, []string{"a\tb\tc"}, "a       b       c", 17, 0},
		{"tab at the edge", 10, 2, []string{"\t\t\tx"}, "         x", 9, 0},
		{"back tab", 20, 2, []string{"\t\tx\x1b[2Zy"}, "        y       x", 9, 0},
		{"save and restore cursor", 20, 3, []string{"ab\x1b7\r\nxyz\x1b8c"}, "abc\nxyz", 3, 0},
		{"SCO save and restore", 20, 3, []string{"ab\x1b[s\r\nxyz\x1b[uc"}, "abc\nxyz", 3, 0},
		{"alternate screen", 20, 3, []string{"main\x1b[?1049hALT\x1b[2;2Hx"}, "    ALT\n x", 2, 1},
		{"alternate screen left", 20, 3, []string{"main\x1b[?1049hALT\x1b[?1049l!"}, "main!", 5, 0},
		{"alternate screen 47", 20, 3, []string{"main\x1b[?47hALT\x1b[?47l"}, "main", 7, 0},
		{"colours dropped", 20, 2, []string{"\x1b[1;31mred\x1b[0m \x1b[38;5;196mx\x1b[m"}, "red x", 5, 0},
		{"OSC with BEL", 20, 2, []string{"\x1b]0;title\x07hi"}, "hi", 2, 0},
		{"OSC with ST", 20, 2, []string{"\x1b]0;title\x1b\\hi"}, "hi", 2, 0},
		{"DCS ignored", 20, 2, []string{"\x1bPq#0;2;0;0;0\x1b\\ok"}, "ok", 2, 0},
		{"unknown private modes", 20, 2, []string{"\x1b[?2004h\x1b[?1h\x1b=\x1b[?25lx"}, "x", 1, 0},
		{"charset designation", 20, 2, []string{"\x1b(Bx\x1b)0y"}, "xy", 2, 0},
		{"CAN aborts a sequence", 20, 2, []string{"\x1b[3\x18x"}, "x", 1, 0},
		{"control inside a sequence", 20, 2, []string{"ab\x1b[\r2Cx"}, "abx", 3, 0},
		{"utf-8", 20, 2, []string{"héllo ✓"}, "héllo ✓", 7, 0},
		{"utf-8 split across writes", 20, 2, []string{"h\xc3", "\xa9llo"}, "héllo", 5, 0},
		{"invalid utf-8", 20, 2, []string{"a\xffb\xc3c"}, "a\ufffdb\ufffdc", 5, 0},
		{"wide characters", 10, 2, []string{"你好x"}, "你好x", 5, 0},
		{"wide character wraps", 5, 2, []string{"abcd你"}, "abcd\n你", 2, 1},
		{"overwrite half a wide character", 10, 2, []string{"你好\r\x1b[Cx"}, " x好", 2, 0},
		{"combining mark dropped", 10, 2, []string{"e\u0301x"}, "ex", 2, 0},
		{"repeat", 10, 2, []string{"a\x1b[3b"}, "aaaa", 4, 0},
		{"new line mode", 10, 3, []string{"\x1b[20ha\nb"}, "a\nb", 1, 1},
		{"readline redraw", 20, 2, []string{"$ ls\b\b\x1b[Kcd"}, "$ cd", 4, 0},
		{"reset", 10, 2, []string{"junk\x1bcok"}, "ok", 2, 0},
		{"alignment test", 3, 2, []string{"\x1b#8"}, "EEE\nEEE", 0, 0},
		{"origin mode", 10, 4, []string{"\x1b[2;3r\x1b[?6h\x1b[1;1Hx\x1b[6nq"}, "\nxq", 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.cols, tt.rows)
			for _, in := range tt.in {
				if _, err := s.Write([]byte(in)); err != nil {
					t.Fatal(err)
				}
			}
			if got := s.String(); got != tt.want {
				t.Errorf("screen =\n%q\nwant\n%q", got, tt.want)
			}
			if x, y := s.Cursor(); tt.x >= 0 && (x != tt.x || y != tt.y) {
				t.Errorf("cursor = %d,%d, want %d,%d", x, y, tt.x, tt.y)
			}
		})
	}
}

func TestReplies(t *testing.T) {
	s := New(20, 5)
	s.WriteString("ab\r\ncd\x1b[6n\x1b[5n\x1b[c\x1b[>c")
	want := "\x1b[2;3R\x1b[0n\x1b[?1;2c\x1b[>0;10;1c"
	if got := string(s.Replies()); got != want {
		t.Errorf("replies = %q, want %q", got, want)
	}
	if got := s.Replies(); got != nil {
		t.Errorf("replies again = %q, want none", got)
	}
}

func TestLinesAndSize(t *testing.T) {
	s := New(0, -3)
	if c, r := s.Size(); c != 1 || r != 1 {
		t.Fatalf("size = %dx%d, want 1x1", c, r)
	}
	s = New(8, 3)
	s.WriteString("x  \r\n\r\n")
	if got := s.Lines(); len(got) != 3 || got[0] != "x" || got[1] != "" {
		t.Errorf("lines = %q", got)
	}
	if s.AltScreen() {
		t.Error("alt screen at start")
	}
	s.WriteString("\x1b[?1049h")
	if !s.AltScreen() {
		t.Error("no alt screen after ?1049h")
	}
}

// A session as bash and less draw it.
func TestShellSession(t *testing.T) {
	s := New(40, 6)
	s.WriteString("\x1b[?2004hroot@host:~# ")
	s.WriteString("ls\r\n\x1b[?2004l\ra.txt  b.txt\r\n")
	s.WriteString("\x1b[?2004hroot@host:~# ")
	s.WriteString("less a.txt\r\n\x1b[?2004l\r\x1b[?1049h\x1b[H\x1b[2J\x1b[22;0;0t\x1b[?1h\x1b=\rline one\r\nline two\r\n\x1b[7m(END)\x1b[27m\x1b[K")
	if got, want := s.String(), "line one\nline two\n(END)"; got != want {
		t.Errorf("in less: %q, want %q", got, want)
	}
	s.WriteString("\r\x1b[K\x1b[?1l\x1b>\x1b[?1049l\x1b[23;0;0t\x1b[?2004hroot@host:~# ")
	want := "root@host:~# ls\na.txt  b.txt\nroot@host:~# less a.txt\nroot@host:~#"
	if got := s.String(); got != want {
		t.Errorf("after less: %q, want %q", got, want)
	}
	s.WriteString("echo " + strings.Repeat("x", 40))
	if x, y := s.Cursor(); y != 4 || x != 18 {
		t.Errorf("cursor after a long line = %d,%d", x, y)
	}
}

func FuzzScreen(f *testing.F) {
	f.Add([]byte("hello\r\n\x1b[2J\x1b[H\x1b[?1049h你好\x1b[3;4r\x1b[5L"), uint8(10), uint8(4))
	f.Add([]byte("\x1b[99;99H\x1b[@\x1b[P\x1b[9999b\x1bM\x1b[?6h\x1b[6n"), uint8(1), uint8(1))
	f.Add([]byte("\x1b]0;\xe4\xbd\x1b\\\xe4\xbd\xa0\t\b\x1b[Z"), uint8(3), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, cols, rows uint8) {
		s := New(int(cols%100), int(rows%50))
		// Write in two parts to cross sequence boundaries.
		half := len(data) / 2
		s.Write(data[:half])
		s.Write(data[half:])
		c, r := s.Size()
		x, y := s.Cursor()
		if x < 0 || x >= c || y < 0 || y >= r {
			t.Fatalf("cursor %d,%d outside %dx%d", x, y, c, r)
		}
		if s.top < 0 || s.bottom >= r || s.top > s.bottom {
			t.Fatalf("scroll region %d..%d in %d rows", s.top, s.bottom, r)
		}
		if n := len(s.Lines()); n != r {
			t.Fatalf("%d lines, want %d", n, r)
		}
		_ = s.String()
	})
}
