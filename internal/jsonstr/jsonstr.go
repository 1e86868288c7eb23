// Package jsonstr appends JSON string literals exactly as encoding/json
// writes them, for the hand-written encoders of the hot path (wire frames,
// session records): no reflection, no intermediate buffers.
package jsonstr

import "unicode/utf8"

const hex = "0123456789abcdef"

// safe[b] is true for the ASCII bytes written as they are (not '"', '\\'
// or a control character); html additionally escapes '<', '>' and '&'.
var safe, htmlSafe [utf8.RuneSelf]bool

func init() {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		safe[b] = b != '"' && b != '\\'
		htmlSafe[b] = safe[b] && b != '<' && b != '>' && b != '&'
	}
}

// Append appends s as a quoted JSON string, byte for byte what
// encoding/json writes: invalid UTF-8 becomes \ufffd, U+2028 and U+2029
// are escaped, and with escapeHTML so are '<', '>' and '&' (json.Marshal's
// default; an Encoder with SetEscapeHTML(false) leaves them).
func Append(dst []byte, s string, escapeHTML bool) []byte {
	table := &safe
	if escapeHTML {
		table = &htmlSafe
	}
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if table[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendArray appends ss as a JSON array of strings, escaped as by Append.
func AppendArray(dst []byte, ss []string, escapeHTML bool) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = Append(dst, s, escapeHTML)
	}
	return append(dst, ']')
}
