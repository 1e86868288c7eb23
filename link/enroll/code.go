// Package enroll is a device's side of enrollment by pairing code (the
// shape of RFC 8628's device grant): ask the server's enroll endpoint for
// a short code, show it, wait for an operator to approve it, keep the
// device token it yields in the state dir (0600, dir 0700). The code
// format is shared with the server, which parses what operators type.
package enroll

import (
	"crypto/rand"
	"fmt"
	"strings"
)

// Alphabet is the pairing codes' characters: digits and capitals without
// 0, O, 1 and I, which people misread. 32 of them: each character is 5
// bits, a code 30.
const Alphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"

// CodeLen is the characters in a code, shown as two groups of three.
const CodeLen = 6

// NewCode returns a random code in its display form, e.g. "K7Q-4MX".
func NewCode() (string, error) {
	var b [CodeLen]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a pairing code: %w", err)
	}
	for i := range b {
		b[i] = Alphabet[int(b[i])%len(Alphabet)] // 256 is a multiple of 32: uniform
	}
	return string(b[:3]) + "-" + string(b[3:]), nil
}

// ParseCode reads a code as a person types it: case, spaces and the
// dash do not matter. It returns the display form ("K7Q-4MX") or an
// error saying what is wrong with it.
func ParseCode(s string) (string, error) {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '-' || r == ' ' || r == '\t':
			continue
		case r >= 'a' && r <= 'z':
			r -= 'a' - 'A'
		}
		if b.Len() >= CodeLen {
			return "", fmt.Errorf("a pairing code has %d characters (like K7Q-4MX); this one has more", CodeLen)
		}
		if r > 0x7f || !strings.ContainsRune(Alphabet, r) {
			hint := ""
			if strings.ContainsRune("0O1I", r) {
				hint = " (codes never use 0, O, 1 or I)"
			}
			return "", fmt.Errorf("a pairing code cannot hold %q%s; it is %d of %s, like K7Q-4MX", r, hint, CodeLen, Alphabet)
		}
		b.WriteRune(r)
	}
	if b.Len() != CodeLen {
		return "", fmt.Errorf("a pairing code has %d characters (like K7Q-4MX); this one has %d", CodeLen, b.Len())
	}
	c := b.String()
	return c[:3] + "-" + c[3:], nil
}
