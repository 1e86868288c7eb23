package discover

import (
	"slices"
	"strings"
	"testing"
)

func TestParseTXT(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields []string
		want   TXT
		err    string // substring of the error; "" for none
	}{
		{"full", []string{"txtvers=1", "path=/api/channels/terminal-dev/ws", "tls=1", "enroll=0"},
			TXT{Paths: []string{"/api/channels/terminal-dev/ws"}, TLS: true}, ""},
		{"several paths", []string{"path=/api/channels/a/ws,/api/channels/b/ws", "enroll=1"},
			TXT{Paths: []string{"/api/channels/a/ws", "/api/channels/b/ws"}, Enroll: true}, ""},
		{"unknown keys ignored", []string{"path=/x", "color=blue", "flag", "=odd"}, TXT{Paths: []string{"/x"}}, ""},
		{"first of a key wins", []string{"path=/first", "path=/second", "tls=0", "tls=1"}, TXT{Paths: []string{"/first"}}, ""},
		{"keys case-insensitive", []string{"PATH=/x", "TLS=1"}, TXT{Paths: []string{"/x"}, TLS: true}, ""},
		{"no path", []string{"tls=1"}, TXT{}, "no path="},
		{"empty path", []string{"path="}, TXT{}, "no path="},
		{"relative path", []string{"path=api/ws"}, TXT{}, `"api/ws": must start with /`},
		{"space in path", []string{"path=/a b"}, TXT{}, "character ' ' not allowed"},
		{"query in path", []string{"path=/a?b"}, TXT{}, "character '?' not allowed"},
		{"non-ASCII path", []string{"path=/é"}, TXT{}, "not allowed"},
		{"tls not a bit", []string{"path=/x", "tls=yes"}, TXT{}, `tls="yes": want 0 or 1`},
		{"tls without value", []string{"path=/x", "tls"}, TXT{}, `tls="": want 0 or 1`},
		{"enroll not a bit", []string{"path=/x", "enroll=2"}, TXT{}, `enroll="2": want 0 or 1`},
		{"newer version", []string{"txtvers=2", "path=/x"}, TXT{}, `txtvers="2"`},
		{"too long", []string{"path=/" + strings.Repeat("a", 300)}, TXT{}, "longer than 255"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTXT(tc.fields)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseTXT(%q) error = %v, want one containing %q", tc.fields, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTXT(%q): %v", tc.fields, err)
			}
			if !slices.Equal(got.Paths, tc.want.Paths) || got.TLS != tc.want.TLS || got.Enroll != tc.want.Enroll {
				t.Fatalf("ParseTXT(%q) = %+v, want %+v", tc.fields, got, tc.want)
			}
		})
	}
}

func TestTXTStringsRoundTrip(t *testing.T) {
	in := TXT{Paths: []string{"/api/channels/terminal-dev/ws", "/api/channels/lobby/ws"}, TLS: true, Enroll: true}
	txt, dropped := in.Strings()
	if dropped != 0 {
		t.Fatalf("dropped %d paths", dropped)
	}
	want := []string{"txtvers=1", "path=/api/channels/terminal-dev/ws,/api/channels/lobby/ws", "tls=1", "enroll=1"}
	if !slices.Equal(txt, want) {
		t.Fatalf("Strings() = %q, want %q", txt, want)
	}
	out, err := ParseTXT(txt)
	if err != nil || !slices.Equal(out.Paths, in.Paths) || out.TLS != in.TLS || out.Enroll != in.Enroll {
		t.Fatalf("ParseTXT(Strings()) = %+v, %v; want %+v", out, err, in)
	}
}

// Paths past one 255-byte TXT string are dropped, and said so.
func TestTXTStringsDropsWhatDoesNotFit(t *testing.T) {
	var in TXT
	for i := range 20 {
		in.Paths = append(in.Paths, "/api/channels/channel-number-"+strings.Repeat("x", i%3)+"/ws")
	}
	txt, dropped := in.Strings()
	if dropped == 0 {
		t.Fatal("20 long paths fit in 255 bytes?")
	}
	for _, s := range txt {
		if len(s) > 255 {
			t.Fatalf("TXT string of %d bytes", len(s))
		}
	}
	out, err := ParseTXT(txt)
	if err != nil || len(out.Paths) != len(in.Paths)-dropped {
		t.Fatalf("ParseTXT: %d paths, %v; want %d", len(out.Paths), err, len(in.Paths)-dropped)
	}
}

// FuzzParseTXT: any input is either refused with an error or parsed into
// paths that are safe to put in a URL, and what parses survives a round
// trip through Strings.
func FuzzParseTXT(f *testing.F) {
	f.Add("txtvers=1\x00path=/api/channels/terminal-dev/ws\x00tls=1\x00enroll=0")
	f.Add("path=/a,/b,,/c\x00tls=0")
	f.Add("path=a\x00=x\x00tls")
	f.Add("PATH=/x\x00path=/y\x00TLS=1")
	f.Fuzz(func(t *testing.T, joined string) {
		fields := strings.Split(joined, "\x00")
		got, err := ParseTXT(fields)
		if err != nil {
			return
		}
		if len(got.Paths) == 0 {
			t.Fatalf("parsed %q with no path", fields)
		}
		for _, p := range got.Paths {
			if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, " ?#%,\\") {
				t.Fatalf("unsafe path %q from %q", p, fields)
			}
		}
		txt, dropped := got.Strings()
		again, err := ParseTXT(txt)
		if err != nil {
			t.Fatalf("ParseTXT(Strings()) of %+v: %v", got, err)
		}
		if !slices.Equal(again.Paths, got.Paths[:len(got.Paths)-dropped]) || again.TLS != got.TLS || again.Enroll != got.Enroll {
			t.Fatalf("round trip: %+v -> %q -> %+v", got, txt, again)
		}
	})
}
