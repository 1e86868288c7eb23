package display

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Fold returns s with every rune replaced by what cs can show, one cell per
// rune: the rune itself, a transliteration (é -> e, ß -> ss, “ -> ", … ->
// ...), or the Placeholder. Newlines are kept ("\r\n" and '\r' become '\n'),
// tabs and other spaces become ' ', and control characters, zero-width
// characters and combining marks are dropped. See the package documentation.
func Fold(cs Charset, s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if r == '\r' {
			if i < len(s) && s[i] == '\n' {
				continue // "\r\n": the '\n' follows
			}
			r = '\n'
		}
		if r == '\n' || r == '\u2028' || r == '\u2029' || r == '\u0085' {
			b.WriteByte('\n')
			continue
		}
		b.WriteString(FoldRune(cs, r))
	}
	return b.String()
}

// FoldRune returns what cs shows for r (see Fold): r itself, a
// transliteration of one or more runes, "" for a rune that takes no cell, or
// the Placeholder. A newline becomes a space.
func FoldRune(cs Charset, r rune) string {
	if r == utf8.RuneError {
		return string(Placeholder)
	}
	if cs.Shows(r) && r >= ' ' && r != 0x7F && !(r >= 0x80 && r < 0xA0) {
		return string(r)
	}
	switch {
	case r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f':
		return " "
	case r < ' ' || r == 0x7F || (r >= 0x80 && r < 0xA0):
		return "" // other C0 and C1 controls
	case r == '\u3099':
		return foldFirst(cs, "ﾞ")
	case r == '\u309A':
		return foldFirst(cs, "ﾟ")
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		return "" // combining marks, zero-width and format characters
	}
	if cands, ok := translit[r]; ok {
		for _, c := range cands {
			if showsAll(cs, c) {
				return c
			}
		}
	}
	if s, ok := latinBase(r); ok && showsAll(cs, s) {
		return s
	}
	switch {
	case unicode.Is(unicode.Zs, r):
		return " "
	case r >= 0xFF01 && r <= 0xFF5E: // full-width ASCII
		return FoldRune(cs, r-0xFEE0)
	case r == 0x3000: // ideographic space
		return " "
	}
	if s, ok := kanaHalf(r); ok && showsAll(cs, s) {
		return s
	}
	if s, ok := cyrillic(cs, r); ok {
		return s
	}
	return string(Placeholder)
}

func showsAll(cs Charset, s string) bool {
	for _, r := range s {
		if !cs.Shows(r) {
			return false
		}
	}
	return true
}

func foldFirst(cs Charset, s string) string {
	if showsAll(cs, s) {
		return s
	}
	return ""
}

// translit lists transliterations to try, in order, for runes a charset may
// lack. The first one whose runes are all shown wins.
var translit = map[rune][]string{
	// Quotes.
	'‘': {"'"}, '’': {"'"}, '‚': {","}, '‛': {"'"}, '′': {"'"}, '´': {"'"},
	'‹': {"<"}, '›': {">"},
	'“': {`"`}, '”': {`"`}, '„': {`"`}, '‟': {`"`}, '″': {`"`}, '«': {`"`},
	'»': {`"`}, '¨': {`"`},
	// Dashes and dots.
	'‐': {"-"}, '‑': {"-"}, '‒': {"-"}, '–': {"-"}, '—': {"-"}, '―': {"-"},
	'−': {"-"}, '﹘': {"-"}, '﹣': {"-"}, '¯': {"-"}, '¬': {"-"},
	'…': {"..."}, '‥': {".."}, '•': {"·", "･", "*"}, '·': {"･", "."},
	'∙': {"·", "･", "."}, '●': {"·", "･", "*"}, '¸': {","},
	// Letters without a base-letter form.
	'ß': {"ss"}, 'ẞ': {"SS"}, 'Æ': {"AE"}, 'æ': {"ae"}, 'Œ': {"OE"}, 'œ': {"oe"},
	'Ĳ': {"IJ"}, 'ĳ': {"ij"}, 'Þ': {"Th"}, 'þ': {"th"}, 'ƒ': {"f"},
	'ﬁ': {"fi"}, 'ﬂ': {"fl"}, 'ﬀ': {"ff"}, 'ª': {"a"}, 'º': {"o"},
	'µ': {"μ", "u"}, 'μ': {"µ", "u"},
	// Symbols.
	'€': {"EUR"}, '©': {"(c)"}, '®': {"(R)"}, '™': {"TM"}, '±': {"+-"},
	'×': {"x"}, '÷': {"/"}, '≤': {"<="}, '≥': {">="}, '≠': {"!="}, '≈': {"~", "="},
	'⇒': {"=>"}, '⇐': {"<="}, '↔': {"<->"}, '→': {"->"}, '←': {"<-"},
	'↑': {"^"}, '↓': {"v"}, '½': {"1/2"}, '¼': {"1/4"}, '¾': {"3/4"},
	'¹': {"1"}, '²': {"2"}, '³': {"3"}, '¡': {"!"}, '¿': {"?"}, '¦': {"|"},
	'‖': {"||"}, '˜': {"~"}, 'ˆ': {"^"}, '‰': {"%."}, '°': {"o"},
	'¥': {"Y"}, '£': {"L"}, '¢': {"c"}, '⌂': {"^"}, '▶': {">"}, '◀': {"<"},
	'▲': {"^"}, '▼': {"v"}, '█': {"#"}, '■': {"#"}, '✓': {"v"}, '✔': {"v"},
	'✗': {"x"}, '✘': {"x"}, '♥': {"<3"}, '∞': {"oo"}, '√': {"V"},
	'\\': {"/"}, // A00 has no backslash; a driver may add a glyph for it
	// Punctuation of CJK text.
	'。': {"｡", "."}, '、': {"､", ","}, '「': {"｢", `"`}, '」': {"｣", `"`},
	'・': {"･", "."}, 'ー': {"ｰ", "-"}, '゛': {"ﾞ"}, '゜': {"ﾟ"},
}

// latin1Base and latinABase give the base letter of U+00C0-U+00FF and
// U+0100-U+017F; runes with a translit entry (Æ, ß, …) are listed there.
const (
	latin1Base = "AAAAAAACEEEEIIII" + "DNOOOOOxOUUUUYTs" +
		"aaaaaaaceeeeiiii" + "dnooooo/ouuuuyty"
	latinABase = "AaAaAaCcCcCcCcDd" + "DdEeEeEeEeEeGgGg" + "GgGgHhHhIiIiIiIi" +
		"IiIiJjKkkLlLlLlL" + "lLlNnNnNnnNnOoOo" + "OoOoRrRrRrSsSsSs" +
		"SsTtTtTtUuUuUuUu" + "UuUuWwYyYZzZzZzs"
)

// latinBase returns r without its accent.
func latinBase(r rune) (string, bool) {
	switch {
	case r >= 0xC0 && r <= 0xFF:
		return latin1Base[r-0xC0 : r-0xC0+1], true
	case r >= 0x100 && r <= 0x17F:
		return latinABase[r-0x100 : r-0x100+1], true
	}
	return "", false
}

// kanaHalfTable is the half-width form of U+30A1-U+30FC, one entry each.
var kanaHalfTable = strings.Fields("ｧ ｱ ｨ ｲ ｩ ｳ ｪ ｴ ｫ ｵ " +
	"ｶ ｶﾞ ｷ ｷﾞ ｸ ｸﾞ ｹ ｹﾞ ｺ ｺﾞ ｻ ｻﾞ ｼ ｼﾞ ｽ ｽﾞ ｾ ｾﾞ ｿ ｿﾞ " +
	"ﾀ ﾀﾞ ﾁ ﾁﾞ ｯ ﾂ ﾂﾞ ﾃ ﾃﾞ ﾄ ﾄﾞ ﾅ ﾆ ﾇ ﾈ ﾉ " +
	"ﾊ ﾊﾞ ﾊﾟ ﾋ ﾋﾞ ﾋﾟ ﾌ ﾌﾞ ﾌﾟ ﾍ ﾍﾞ ﾍﾟ ﾎ ﾎﾞ ﾎﾟ ﾏ ﾐ ﾑ ﾒ ﾓ " +
	"ｬ ﾔ ｭ ﾕ ｮ ﾖ ﾗ ﾘ ﾙ ﾚ ﾛ ﾜ ﾜ ｲ ｴ ｦ ﾝ ｳﾞ ｶ ｹ ﾜﾞ ｲﾞ ｴﾞ ｦﾞ ･ ｰ")

// kanaHalf returns the half-width katakana for a full-width katakana or a
// hiragana.
func kanaHalf(r rune) (string, bool) {
	if r >= 0x3041 && r <= 0x3096 { // hiragana -> katakana
		r += 0x60
	}
	if r >= 0x30A1 && int(r-0x30A1) < len(kanaHalfTable) {
		return kanaHalfTable[r-0x30A1], true
	}
	return "", false
}

// cyrLatin transliterates Russian and Ukrainian Cyrillic to Latin letters,
// indexed from U+0430 (а) to U+044F (я).
var cyrLatin = strings.Fields("a b v g d e zh z i y k l m n o p " +
	"r s t u f kh ts ch sh shch \" y ' e yu ya")

// cyrHomoglyph is the look-alike of a Cyrillic capital among Latin-1 and
// Greek letters, for ROMs that have some Cyrillic capitals (A02): there a
// Russian word reads best in capitals, native or look-alike.
var cyrHomoglyph = map[rune]rune{
	'А': 'A', 'В': 'B', 'Г': 'Γ', 'Е': 'E', 'Ё': 'Ë', 'К': 'K', 'М': 'M',
	'Н': 'H', 'О': 'O', 'Р': 'P', 'С': 'C', 'Т': 'T', 'Ф': 'Φ', 'Х': 'X',
	'Ь': 'b', 'І': 'I', 'Ї': 'Ï', 'Є': 'E', 'Ґ': 'Γ',
}

func cyrillic(cs Charset, r rune) (string, bool) {
	if r < 0x0400 || r > 0x04FF {
		return "", false
	}
	if cs.Shows('Б') { // the charset has Cyrillic capitals
		u := unicode.ToUpper(r)
		if cs.Shows(u) {
			return string(u), true
		}
		if h, ok := cyrHomoglyph[u]; ok && cs.Shows(h) {
			return string(h), true
		}
	}
	lower := unicode.ToLower(r)
	var s string
	switch {
	case lower >= 0x0430 && lower <= 0x044F:
		s = cyrLatin[lower-0x0430]
	case lower == 'ё':
		s = "e"
	case lower == 'і':
		s = "i"
	case lower == 'ї':
		s = "yi"
	case lower == 'є':
		s = "ye"
	case lower == 'ґ':
		s = "g"
	default:
		return "", false
	}
	if lower != r && s != "" { // capital
		first, n := utf8.DecodeRuneInString(s)
		s = string(unicode.ToUpper(first)) + s[n:]
	}
	if !showsAll(cs, s) {
		return "", false
	}
	return s, true
}
