package fleet

import (
	"strings"
	"testing"
)

// FuzzPeerCursor: any cursor is taken or refused with a message naming
// it; a cursor the server gives reads back as its peer id.
func FuzzPeerCursor(f *testing.F) {
	for _, s := range []string{"", "a", "kiosk-1", "!!", "YQ", "YQ==", strings.Repeat("x", 400), "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, err := parsePeerCursor(s); err != nil {
			if !strings.Contains(err.Error(), "cursor") {
				t.Fatalf("error %q does not name the cursor", err)
			}
		} else if s != "" && (got == "" || len(got) > 256) {
			t.Fatalf("%q read as %q", s, got)
		}
		if s == "" || len(s) > 256 {
			return
		}
		if got, err := parsePeerCursor(peerCursor(s)); err != nil || got != s {
			t.Fatalf("cursor of %q reads back as %q, %v", s, got, err)
		}
	})
}
