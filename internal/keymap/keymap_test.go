package keymap

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	km, err := Parse([]string{"123A", "456B", "789C", "*0#D"})
	if err != nil {
		t.Fatal(err)
	}
	if r, c := km.Size(); r != 4 || c != 4 || !km.Has('#') || km.Has('E') || km.String() != "123A/456B/789C/*0#D" {
		t.Fatalf("%v", km)
	}
	for _, tt := range []struct {
		rows []string
		want string
	}{
		{nil, "no rows"},
		{[]string{"12", "3"}, "row 1 has 1 keys, row 0 has 2"},
		{[]string{"1 "}, "is not a printable label"},
		{[]string{"11"}, "key '1' is at row 0 column 0 and row 0 column 1"},
		{[]string{""}, "no columns"},
		{[]string{"\xff"}, "not UTF-8"},
	} {
		if _, err := Parse(tt.rows); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.rows, err, tt.want)
		}
	}
}

func TestParseBinding(t *testing.T) {
	for in, want := range map[string]Binding{"": {}, "#": {Key: '#'}, "hold:*": {Key: '*', Hold: true}, "é": {Key: 'é'}} {
		b, err := ParseBinding(in)
		if err != nil || b != want || b.String() != in {
			t.Errorf("ParseBinding(%q) = %+v %v", in, b, err)
		}
	}
	for _, in := range []string{"ab", "hold:", "hold:ab", "\xff"} {
		if _, err := ParseBinding(in); err == nil {
			t.Errorf("ParseBinding(%q) accepted", in)
		}
	}
}

func FuzzParseBinding(f *testing.F) {
	for _, s := range []string{"#", "hold:*", "", "hold:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBinding(s)
		if err == nil && b.String() != s {
			t.Fatalf("ParseBinding(%q) = %+v, which prints as %q", s, b, b.String())
		}
	})
}
