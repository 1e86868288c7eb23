package display

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestWrap(t *testing.T) {
	tests := []struct {
		name string
		in   string
		cols int
		want []string
	}{
		{"empty", "", 16, nil},
		{"zero width", "abc", 0, nil},
		{"short", "hello", 16, []string{"hello"}},
		{"exact width", "abcd", 4, []string{"abcd"}},
		{"exact width two words", "ab cd", 5, []string{"ab cd"}},
		{"one over", "ab cde", 5, []string{"ab", "cde"}},
		{"greedy", "the quick brown fox jumps", 10, []string{"the quick", "brown fox", "jumps"}},
		{"long word", "abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"long word exact multiple", "abcdefgh", 4, []string{"abcd", "efgh"}},
		{"long word after short", "hi abcdefghij", 4, []string{"hi", "abcd", "efgh", "ij"}},
		{"word after long word tail", "abcdef g", 4, []string{"abcd", "ef g"}},
		{"spaces collapse", "  a   b  ", 16, []string{"a b"}},
		{"only spaces", "    ", 4, []string{""}},
		{"newlines", "a\nb", 16, []string{"a", "b"}},
		{"blank line kept", "a\n\nb", 16, []string{"a", "", "b"}},
		{"trailing newline", "a\n", 16, []string{"a"}},
		{"only newline", "\n", 16, []string{""}},
		{"two trailing newlines", "a\n\n", 16, []string{"a", ""}},
		{"nbsp does not break", "a\u00a0b c", 3, []string{"a\u00a0b", "c"}},
		{"runes not bytes", "ﾃｽﾄ ｶﾞ", 3, []string{"ﾃｽﾄ", "ｶﾞ"}},
		{"width one", "ab c", 1, []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Wrap(tt.in, tt.cols)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Wrap(%q, %d) = %q, want %q", tt.in, tt.cols, got, tt.want)
			}
			for _, l := range got {
				if utf8.RuneCountInString(l) > tt.cols {
					t.Errorf("line %q wider than %d", l, tt.cols)
				}
			}
		})
	}
}

func TestPaginate(t *testing.T) {
	lines := []string{"1", "2", "3", "4", "5"}
	tests := []struct {
		lines []string
		rows  int
		want  [][]string
	}{
		{nil, 2, nil},
		{lines, 0, nil},
		{lines[:2], 2, [][]string{{"1", "2"}}},
		{lines[:4], 2, [][]string{{"1", "2"}, {"3", "4"}}},
		{lines, 2, [][]string{{"1", "2"}, {"3", "4"}, {"5"}}},
		{lines, 4, [][]string{{"1", "2", "3", "4"}, {"5"}}},
		{lines, 9, [][]string{lines}},
	}
	for _, tt := range tests {
		if got := Paginate(tt.lines, tt.rows); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Paginate(%q, %d) = %q, want %q", tt.lines, tt.rows, got, tt.want)
		}
	}
	// Appending to a page must not clobber the next one.
	pages := Paginate(lines, 2)
	_ = append(pages[0], "x")
	if pages[1][0] != "3" {
		t.Error("pages share capacity")
	}
}

func TestLayout(t *testing.T) {
	pages := Layout(A00, "Grüße aus Köln — bis später…", 2, 16)
	want := [][]string{{"Grüsse aus Köln", "- bis später..."}}
	if !reflect.DeepEqual(pages, want) {
		t.Errorf("Layout = %q, want %q", pages, want)
	}
	pages = Layout(A02, strings.Repeat("word ", 20), 2, 16)
	if len(pages) != 4 || !reflect.DeepEqual(pages[3], []string{"word word"}) {
		t.Errorf("Layout pages = %q", pages)
	}
}
