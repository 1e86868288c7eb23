package lcdproc

import (
	"strings"
	"testing"
)

func TestParseResponse(t *testing.T) {
	tests := []struct {
		line string
		want Response
		err  string
	}{
		{"connect LCDproc 0.5.9 protocol 0.3 lcd wid 20 hgt 4 cellwid 5 cellhgt 8",
			Response{Kind: Connect, Server: "LCDproc", Version: "0.5.9", Protocol: "0.3", Cols: 20, Rows: 4}, ""},
		{"connect LCDproc 0.5.9 protocol 0.3 lcd wid 16 hgt 2 cellwid 5 cellhgt 8\r",
			Response{Kind: Connect, Server: "LCDproc", Version: "0.5.9", Protocol: "0.3", Cols: 16, Rows: 2}, ""},
		{"connect LCDproc 0.5.9 protocol 0.3 lcd", Response{}, "no display size"},
		{"connect LCDproc 0.5.9 lcd wid twenty hgt 4", Response{}, `wid "twenty" is not a size`},
		{"connect LCDproc 0.5.9 lcd wid 20 hgt 0", Response{}, `hgt "0" is not a size`},
		{"success", Response{Kind: Success}, ""},
		{"huh? Invalid command \"fnord\"", Response{Kind: Huh, Text: `Invalid command "fnord"`}, ""},
		{"listen termd", Response{Kind: Listen, Screen: "termd"}, ""},
		{"ignore termd", Response{Kind: Ignore, Screen: "termd"}, ""},
		{"listen", Response{}, "want one screen id"},
		{"key Enter", Response{Kind: Key, Text: "Enter"}, ""},
		{"key Up termd", Response{Kind: Key, Text: "Up", Screen: "termd"}, ""},
		{"key", Response{}, `want "key <name>"`},
		{"key a b c", Response{}, `want "key <name>"`},
		{"noop complete", Response{Kind: Noop}, ""},
		{"noop", Response{}, "want \"noop complete\""},
		{"menuevent select m1", Response{Kind: Menu, Text: "select m1"}, ""},
		{"bye", Response{Kind: Bye}, ""},
		{"", Response{}, "empty line"},
		{"hello there", Response{}, "unknown line from LCDd"},
		{strings.Repeat("x", maxLine+1), Response{}, "limit 8192"},
	}
	for _, tt := range tests {
		got, err := ParseResponse(tt.line)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseResponse(%.40q) = %v, want an error with %q", tt.line, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseResponse(%q) = %+v, %v; want %+v", tt.line, got, err, tt.want)
		}
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"hello", `"hello"`},
		{`say "hi"`, `"say \"hi\""`},
		{`C:\dir`, `"C:\\dir"`},
		{"{braces}", `"{braces}"`},
		{"tab\there\nnl", `"tab here nl"`},
		{"café €", `"caf? ?"`},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzParseResponse: any line gets a Response or an error, never a panic,
// and a Connect always has a usable size.
func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{"connect LCDproc 0.5.9 protocol 0.3 lcd wid 20 hgt 4 cellwid 5 cellhgt 8",
		"success", "huh? x", "listen termd", "ignore termd", "key Enter", "key 1 termd", "noop complete",
		"menuevent enter x", "bye", "", "connect wid -1 hgt 99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseResponse(line)
		if err != nil {
			if r != (Response{}) {
				t.Fatalf("error %v with a response %+v", err, r)
			}
			return
		}
		if r.Kind < Connect || r.Kind > Bye {
			t.Fatalf("kind %d", r.Kind)
		}
		if r.Kind == Connect && (r.Rows < 1 || r.Cols < 1 || r.Rows > 256 || r.Cols > 256) {
			t.Fatalf("connect with size %dx%d", r.Cols, r.Rows)
		}
	})
}

// FuzzQuote: what Quote makes is one argument LCDd's parser reads back as
// the text (control characters as spaces, non-ASCII as '?'), never a
// second argument or the end of the command.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", `a "b" \c`, "x\ny", "{}", `\`, `"`, "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		if strings.ContainsAny(q, "\n\r\x00") {
			t.Fatalf("Quote(%q) = %q holds a line end", s, q)
		}
		got, err := Unquote(q)
		if err != nil {
			t.Fatalf("Unquote(Quote(%q) = %q): %v", s, q, err)
		}
		var want strings.Builder
		for _, r := range s {
			switch {
			case r < 0x20 || r == 0x7f:
				want.WriteByte(' ')
			case r > 0x7e:
				want.WriteByte('?')
			default:
				want.WriteRune(r)
			}
		}
		if got != want.String() {
			t.Fatalf("Unquote(Quote(%q)) = %q, want %q", s, got, want.String())
		}
	})
}
