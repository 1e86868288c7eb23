package httpapi

import "testing"

// The scheme is case-insensitive (RFC 7235): "bearer" and "BEARER" are
// Bearer; another scheme or no token is not.
func TestBearer(t *testing.T) {
	for _, c := range []struct {
		h, tok string
		ok     bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER abc", "abc", true},
		{"  Bearer   abc  ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearerabc", "", false},
		{"", "", false},
	} {
		tok, ok := Bearer(c.h)
		if tok != c.tok || ok != c.ok {
			t.Errorf("Bearer(%q) = %q %v, want %q %v", c.h, tok, ok, c.tok, c.ok)
		}
	}
}
