package console

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// runeWidth is the number of terminal columns r takes: 0 for combining and
// format characters, 2 for East Asian wide and fullwidth characters and
// emoji, 1 otherwise. It is an approximation of UAX #11 good enough for
// terminals that implement it the usual way.
func runeWidth(r rune) int {
	switch {
	case r < 0x300:
		return 1
	case unicode.Is(unicode.Mn, r), unicode.Is(unicode.Me, r), unicode.Is(unicode.Cf, r):
		return 0
	case r >= 0x1100 && r <= 0x115f,
		r >= 0x2e80 && r <= 0x303e, r >= 0x3041 && r <= 0x33ff,
		r >= 0x3400 && r <= 0x4dbf, r >= 0x4e00 && r <= 0x9fff,
		r >= 0xa000 && r <= 0xa4cf, r >= 0xac00 && r <= 0xd7a3,
		r >= 0xf900 && r <= 0xfaff, r >= 0xfe30 && r <= 0xfe4f,
		r >= 0xff00 && r <= 0xff60, r >= 0xffe0 && r <= 0xffe6,
		r >= 0x1f300 && r <= 0x1f64f, r >= 0x1f900 && r <= 0x1f9ff,
		r >= 0x20000 && r <= 0x3fffd:
		return 2
	}
	return 1
}

func stringWidth(s string) int {
	w := 0
	for _, r := range s {
		w += runeWidth(r)
	}
	return w
}

func runesWidth(rs []rune) int {
	w := 0
	for _, r := range rs {
		w += runeWidth(r)
	}
	return w
}

// sanitize makes text from elsewhere (an agent's answer) safe to print:
// escape sequences are removed, CRLF and CR become LF, a tab becomes spaces,
// other control characters are dropped and invalid UTF-8 becomes U+FFFD.
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '\n':
			b.WriteByte('\n')
		case r == '\r':
			if i < len(s) && s[i] == '\n' {
				i++
			}
			b.WriteByte('\n')
		case r == '\t':
			b.WriteString("    ")
		case r == 0x1b:
			i = skipEscape(s, i)
		case r == 0x9b: // C1 CSI
			i = skipCSI(s, i)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// skipEscape skips the rest of an escape sequence whose ESC ended before i.
func skipEscape(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '[':
		return skipCSI(s, i+1)
	case ']', 'P', '_', '^', 'X': // OSC, DCS, APC, PM, SOS: up to BEL or ST
		for j := i + 1; j < len(s); j++ {
			if s[j] == 0x07 {
				return j + 1
			}
			if s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\' {
				return j + 2
			}
		}
		return len(s)
	case '(', ')', '*', '+', '#', ' ': // charset designation etc.: one more byte
		if i+2 <= len(s) {
			return i + 2
		}
		return len(s)
	}
	return i + 1
}

func skipCSI(s string, i int) int {
	for ; i < len(s); i++ {
		c := s[i]
		if c >= 0x40 && c <= 0x7e {
			return i + 1
		}
		if c < 0x20 || c >= 0x7f {
			return i
		}
	}
	return i
}

// wrap breaks sanitized text into lines no wider than width columns, at
// spaces where it can and inside a word where it must. Each '\n' starts a
// new line; an empty text is one empty line.
func wrap(text string, width int) []string {
	if width < 1 {
		width = 1
	}
	var out []string
	for para := range strings.SplitSeq(text, "\n") {
		out = wrapPara(out, para, width)
	}
	return out
}

func wrapPara(out []string, para string, width int) []string {
	para = strings.TrimRight(para, " ")
	if para == "" {
		return append(out, "")
	}
	var line []rune
	lw := 0
	words := strings.Split(para, " ")
	for i, word := range words {
		ww := stringWidth(word)
		sep := 0
		if i > 0 {
			sep = 1
		}
		if i > 0 && lw+sep+ww <= width {
			line = append(line, ' ')
			line = append(line, []rune(word)...)
			lw += sep + ww
			continue
		}
		if i > 0 {
			out = append(out, string(line))
			line, lw = line[:0], 0
		}
		// Hard-break a word wider than the line.
		for _, r := range word {
			rw := runeWidth(r)
			if lw+rw > width && lw > 0 {
				out = append(out, string(line))
				line, lw = line[:0], 0
			}
			line = append(line, r)
			lw += rw
		}
	}
	return append(out, string(line))
}

// truncate cuts s to at most width columns.
func truncate(s string, width int) string {
	w := 0
	for i, r := range s {
		rw := runeWidth(r)
		if w+rw > width {
			return s[:i]
		}
		w += rw
	}
	return s
}
