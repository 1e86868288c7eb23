package console

import (
	"slices"
	"strings"
	"testing"
)

func TestWrap(t *testing.T) {
	tests := []struct {
		text  string
		width int
		want  []string
	}{
		{"", 10, []string{""}},
		{"hello world", 20, []string{"hello world"}},
		{"hello world", 5, []string{"hello", "world"}},
		{"hello world", 8, []string{"hello", "world"}},
		{"a b c d e f", 3, []string{"a b", "c d", "e f"}},
		{"abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"hi abcdefghij", 4, []string{"hi", "abcd", "efgh", "ij"}},
		{"one\ntwo", 10, []string{"one", "two"}},
		{"one\n\ntwo", 10, []string{"one", "", "two"}},
		{"  indented", 20, []string{"  indented"}},
		{"trailing   ", 20, []string{"trailing"}},
		{"日本語テキスト", 6, []string{"日本語", "テキス", "ト"}},
		{"x", 0, []string{"x"}},
	}
	for _, tt := range tests {
		got := wrap(tt.text, tt.width)
		if !slices.Equal(got, tt.want) {
			t.Errorf("wrap(%q, %d) = %q, want %q", tt.text, tt.width, got, tt.want)
		}
		for _, l := range got {
			if stringWidth(l) > max(tt.width, 1) && !(tt.width < 2 && stringWidth(l) == 2) {
				t.Errorf("wrap(%q, %d): line %q too wide", tt.text, tt.width, l)
			}
		}
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"a\r\nb\rc\nd", "a\nb\nc\nd"},
		{"tab\there", "tab    here"},
		{"\x1b[2J\x1b[1;31mred\x1b[0m", "red"},
		{"\x1b]0;title\x07after", "after"},
		{"\x1b]8;;http://x\x1b\\link", "link"},
		{"\x1b(Bok", "ok"},
		{"bell\x07 nul\x00 del\x7f", "bell nul del"},
		{"c1\u009b31mcsi", "c1csi"},
		{"bad\xffutf8", "bad\ufffdutf8"},
		{"ünïcödé 😀", "ünïcödé 😀"},
		{"\x1b", ""},
		{"\x1b[", ""},
	}
	for _, tt := range tests {
		if got := sanitize(tt.in); got != tt.want {
			t.Errorf("sanitize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRuneWidth(t *testing.T) {
	for _, tt := range []struct {
		s string
		w int
	}{
		{"abc", 3}, {"é", 1}, {"e\u0301", 1}, {"日本", 4}, {"😀", 2}, {"\u200d", 0}, {"ｈ", 2},
	} {
		if got := stringWidth(tt.s); got != tt.w {
			t.Errorf("stringWidth(%q) = %d, want %d", tt.s, got, tt.w)
		}
	}
}

func TestStatusText(t *testing.T) {
	tests := []struct {
		left, right string
		width       int
		want        string
	}{
		{"connected", "", 12, "connected   "},
		{"connected", "busy", 16, "connected   busy"},
		{"offline: retry in 7s", "busy", 16, "offline: re busy"},
		{"x", "a very long activity", 8, "a very l"},
		{"", "", 3, "   "},
	}
	for _, tt := range tests {
		got := statusText(tt.left, tt.right, tt.width)
		if got != tt.want || stringWidth(got) != tt.width {
			t.Errorf("statusText(%q, %q, %d) = %q, want %q", tt.left, tt.right, tt.width, got, tt.want)
		}
	}
	if got := truncate(strings.Repeat("日", 5), 5); got != "日日" {
		t.Errorf("truncate wide = %q", got)
	}
}
