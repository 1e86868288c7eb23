package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseTag(t *testing.T) {
	for _, tc := range []struct {
		in, key, value, err string
	}{
		{in: "site=lobby", key: "site", value: "lobby"},
		{in: "floor=2=b", key: "floor", value: "2=b"},
		{in: "note=", key: "note", value: ""},
		{in: "site.name=Main hall", key: "site.name", value: "Main hall"},
		{in: "lobby", err: "want key=value"},
		{in: "=lobby", err: "the key must be"},
		{in: "-x=1", err: "the key must be"},
		{in: "si te=1", err: "the key must be"},
		{in: "site=a\nb", err: "control character"},
		{in: "site=" + strings.Repeat("x", 129), err: "longer than 128"},
		{in: "site=\xff", err: "not UTF-8"},
	} {
		k, v, err := parseTag(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseTag(%q) error %v, want one saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || k != tc.key || v != tc.value {
			t.Errorf("parseTag(%q) = %q, %q, %v", tc.in, k, v, err)
		}
	}
	f := tagFlag{}
	if err := f.Set("site=lobby"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("site=shop"); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Fatalf("a repeated key: %v", err)
	}
	if f.String() != "site=lobby" {
		t.Fatal(f.String())
	}
}

func FuzzParseTag(f *testing.F) {
	for _, s := range []string{"site=lobby", "a=", "=", "x", "k=\x00", "k.k-k_k=v=v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, v, err := parseTag(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if k+"="+v != s || !tagKeyRE.MatchString(k) || !utf8.ValidString(v) || strings.ContainsAny(v, "\n\r\x00") {
			t.Fatalf("parseTag(%q) accepted %q, %q", s, k, v)
		}
	})
}
