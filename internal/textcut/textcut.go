// Package textcut cuts text to a byte budget without splitting a UTF-8
// character: what a bounded field (a reason, a version) keeps of longer
// text, still valid UTF-8 for the parsers that check it.
package textcut

import "unicode/utf8"

// Cut returns s cut to at most n bytes at a character boundary.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
