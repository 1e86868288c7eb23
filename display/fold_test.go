package display

import (
	"strings"
	"testing"
)

func TestFold(t *testing.T) {
	tests := []struct {
		name string
		cs   Charset
		in   string
		want string
	}{
		{"ascii", A00, "Hello, world!", "Hello, world!"},
		{"accent A00", A00, "café crème", "cafe creme"},
		{"accent A02", A02, "café crème", "café crème"},
		{"umlaut A00 has lower only", A00, "Äpfel über Öl", "Apfel über Ol"},
		{"umlaut A02", A02, "Äpfel über Öl", "Äpfel über Öl"},
		{"sharp s A00", A00, "Straße", "Strasse"},
		{"sharp s A02", A02, "Straße", "Straße"},
		{"ligatures", A00, "Æsir œuvre", "AEsir oeuvre"},
		{"latin ext-A", A00, "Łódź Dvořák", "Lodz Dvorak"},
		{"curly quotes A00", A00, "“quoted” ‘single’", `"quoted" 'single'`},
		{"curly quotes A02 native", A02, "“quoted”", "“quoted”"},
		{"dashes", A00, "a–b—c‐d−e", "a-b-c-d-e"},
		{"ellipsis", A00, "wait…", "wait..."},
		{"degree A00", A00, "21°C", "21°C"},
		{"degree A02", A02, "21°C", "21°C"},
		{"yen", A00, "¥500", "¥500"},
		{"euro", A00, "5 €", "5 EUR"},
		{"backslash A00", A00, `C:\tmp`, "C:/tmp"},
		{"backslash A02", A02, `C:\tmp`, `C:\tmp`},
		{"tilde A00 placeholder", A00, "~", "?"},
		{"emoji placeholder", A00, "ok 👍", "ok ?"},
		{"emoji placeholder A02", A02, "ok 🙂!", "ok ?!"},
		{"cjk placeholder", A02, "漢字", "??"},
		{"cjk in A00", A00, "千円", "千円"},
		{"katakana full to half", A00, "カタカナ", "ｶﾀｶﾅ"},
		{"voiced katakana", A00, "ガイド", "ｶﾞｲﾄﾞ"},
		{"hiragana", A00, "ありがとう。", "ｱﾘｶﾞﾄｳ｡"},
		{"katakana on A02", A02, "カ", "?"},
		{"fullwidth ascii", A00, "ＡＢＣ１２３", "ABC123"},
		{"cyrillic A00 translit", A00, "Привет, Жора", "Privet, Zhora"},
		{"cyrillic A02 capitals", A02, "Привет", "ПPИBET"},
		{"greek native", A00, "αβπ", "αβπ"},
		{"tabs and spaces", A00, "a\tb\u2003c\u00a0d", "a b c\u00a0d"},
		{"crlf", A00, "a\r\nb\rc\n", "a\nb\nc\n"},
		{"controls dropped", A00, "a\x00b\x07c\x1bd\u200be\ufeff", "abcde"},
		{"combining marks dropped", A00, "e\u0301", "e"},
		{"invalid utf8", A00, "a\xffb", "a?b"},
		{"arrows", A00, "→←↑↓", "→←^v"},
		{"arrows A02", A02, "→←↑↓", "→←↑↓"},
		{"fractions", A00, "½", "1/2"},
		{"bullet A00", A00, "• item", "･ item"},
		{"bullet A02", A02, "• item", "· item"},
		{"micro", A02, "µs", "µs"},
		{"empty", A00, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Fold(tt.cs, tt.in); got != tt.want {
				t.Errorf("Fold(%v, %q) = %q, want %q", tt.cs, tt.in, got, tt.want)
			}
		})
	}
}

func TestFoldOutputIsShown(t *testing.T) {
	in := "Ünïcödé ŧëxŧ — “with” … 🙂 ß Ж ｶ カ ﬁ ™ ©\t€ ½ ≠ \u2028 end"
	for _, rom := range []ROM{A00, A02} {
		for _, r := range Fold(rom, in) {
			if r != '\n' && !rom.Shows(r) {
				t.Errorf("%v: Fold output has %q, which the ROM cannot show", rom, r)
			}
		}
	}
}

func TestFoldRune(t *testing.T) {
	if got := FoldRune(A00, '\n'); got != " " {
		t.Errorf("FoldRune(newline) = %q", got)
	}
	if got := FoldRune(A00, '\u200d'); got != "" {
		t.Errorf("FoldRune(ZWJ) = %q", got)
	}
	if got := FoldRune(A00, '\u3099'); got != "ﾞ" {
		t.Errorf("FoldRune(combining dakuten) = %q", got)
	}
	if got := FoldRune(A02, '\u3099'); got != "" {
		t.Errorf("FoldRune(A02, combining dakuten) = %q", got)
	}
}

// set is a Charset of the runes of a string.
type set string

func (s set) Shows(r rune) bool { return strings.ContainsRune(string(s), r) }

func TestFoldCustomCharset(t *testing.T) {
	cs := set("abc-?")
	if got := Fold(cs, "a—b😀c"); got != "a-b?c" {
		t.Errorf("Fold = %q", got)
	}
	// A transliteration the charset cannot show falls back to the placeholder.
	if got := Fold(cs, "…"); got != "?" {
		t.Errorf("Fold(ellipsis) = %q", got)
	}
}

func TestKanaTable(t *testing.T) {
	if n := len(kanaHalfTable); n != 0x30FC-0x30A1+1 {
		t.Fatalf("kanaHalfTable has %d entries, want %d", n, 0x30FC-0x30A1+1)
	}
	for i, s := range kanaHalfTable {
		if !showsAll(A00, s) {
			t.Errorf("U+%04X -> %q not in A00", 0x30A1+i, s)
		}
	}
	if len(cyrLatin) != 32 {
		t.Fatalf("cyrLatin has %d entries", len(cyrLatin))
	}
	if len(latin1Base) != 64 || len(latinABase) != 128 {
		t.Fatalf("latin tables: %d %d", len(latin1Base), len(latinABase))
	}
}
