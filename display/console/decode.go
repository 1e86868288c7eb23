package console

import (
	"strconv"
	"unicode/utf8"
)

// KeyKind is what a decoded key does.
type KeyKind uint8

// Keys the Decoder reports. KeyRune carries a printable (or at least
// non-control) rune; the others are editing or control keys.
const (
	KeyRune         KeyKind = iota // Key.Rune holds the character
	KeyEnter                       // CR, LF or CRLF (each once)
	KeyBackspace                   // DEL (0x7f) or BS (0x08)
	KeyDelete                      // ESC [ 3 ~
	KeyLeft                        // ESC [ D, ESC O D, Ctrl-B
	KeyRight                       // ESC [ C, ESC O C, Ctrl-F
	KeyUp                          // ESC [ A, ESC O A, Ctrl-P
	KeyDown                        // ESC [ B, ESC O B, Ctrl-N
	KeyHome                        // ESC [ H, ESC O H, ESC [ 1 ~, ESC [ 7 ~, Ctrl-A
	KeyEnd                         // ESC [ F, ESC O F, ESC [ 4 ~, ESC [ 8 ~, Ctrl-E
	KeyPageUp                      // ESC [ 5 ~
	KeyPageDown                    // ESC [ 6 ~
	KeyKillLine                    // Ctrl-U
	KeyKillWord                    // Ctrl-W
	KeyKillToEnd                   // Ctrl-K
	KeyInterrupt                   // Ctrl-C
	KeyEOF                         // Ctrl-D
	KeyRedraw                      // Ctrl-L
	KeyEscape                      // a lone ESC (or ESC followed by a non-sequence byte)
	KeyCursorReport                // ESC [ row ; col R, the answer to ESC [ 6 n
)

var keyNames = [...]string{
	KeyRune: "Rune", KeyEnter: "Enter", KeyBackspace: "Backspace", KeyDelete: "Delete",
	KeyLeft: "Left", KeyRight: "Right", KeyUp: "Up", KeyDown: "Down", KeyHome: "Home",
	KeyEnd: "End", KeyPageUp: "PageUp", KeyPageDown: "PageDown", KeyKillLine: "KillLine",
	KeyKillWord: "KillWord", KeyKillToEnd: "KillToEnd", KeyInterrupt: "Interrupt",
	KeyEOF: "EOF", KeyRedraw: "Redraw", KeyEscape: "Escape", KeyCursorReport: "CursorReport",
}

func (k KeyKind) String() string {
	if int(k) < len(keyNames) {
		return keyNames[k]
	}
	return "KeyKind(" + strconv.Itoa(int(k)) + ")"
}

// Key is one decoded input key.
type Key struct {
	Kind KeyKind
	Rune rune // KeyRune: the character (utf8.RuneError for malformed input)
	Row  int  // KeyCursorReport: 1-based row
	Col  int  // KeyCursorReport: 1-based column
}

func (k Key) String() string {
	switch k.Kind {
	case KeyRune:
		return strconv.QuoteRune(k.Rune)
	case KeyCursorReport:
		return "CursorReport(" + strconv.Itoa(k.Row) + ";" + strconv.Itoa(k.Col) + ")"
	}
	return k.Kind.String()
}

// maxSeq bounds the parameter bytes of one control sequence; longer
// sequences are consumed up to their final byte and dropped.
const maxSeq = 32

type decState uint8

const (
	stGround  decState = iota
	stEsc              // got ESC
	stCSI              // got ESC [
	stCSISkip          // CSI too long: skip to its final byte
	stSS3              // got ESC O
)

// Decoder turns terminal input bytes into Keys. It keeps state between
// calls, so a UTF-8 character, an escape sequence or a CRLF split across two
// reads decodes exactly as if it had arrived in one read. The zero value is
// ready to use; a Decoder is not safe for concurrent use.
type Decoder struct {
	state  decState
	lastCR bool // the previous byte was CR: a following LF is part of the same Enter
	u8     [utf8.UTFMax]byte
	u8n    int // bytes of an incomplete UTF-8 sequence held in u8
	u8want int // total length of that sequence
	seq    []byte
}

// Decode appends the keys decoded from p to dst and returns it.
func (d *Decoder) Decode(dst []Key, p []byte) []Key {
	for _, b := range p {
		dst = d.byte(dst, b)
	}
	return dst
}

// Pending reports whether the decoder holds an incomplete sequence (a
// partial UTF-8 character or escape sequence).
func (d *Decoder) Pending() bool {
	return d.state != stGround || d.u8n > 0
}

// loneEsc reports whether the decoder holds an ESC that may start a
// sequence or be the Escape key on its own.
func (d *Decoder) loneEsc() bool { return d.state == stEsc }

// Flush ends any incomplete sequence: a partial UTF-8 character becomes
// utf8.RuneError, a lone ESC becomes KeyEscape, a partial control sequence is
// dropped. Use it when input has been quiet for a while or has ended.
func (d *Decoder) Flush(dst []Key) []Key {
	if d.u8n > 0 {
		dst = append(dst, Key{Kind: KeyRune, Rune: utf8.RuneError})
		d.u8n = 0
	}
	if d.state == stEsc {
		dst = append(dst, Key{Kind: KeyEscape})
	}
	d.state = stGround
	d.seq = d.seq[:0]
	return dst
}

func (d *Decoder) byte(dst []Key, b byte) []Key {
	wasCR := d.lastCR
	d.lastCR = false
	switch d.state {
	case stEsc:
		switch b {
		case '[':
			d.state = stCSI
			d.seq = d.seq[:0]
			return dst
		case 'O':
			d.state = stSS3
			return dst
		}
		// Not a sequence: the ESC was a key of its own (or Alt+key).
		d.state = stGround
		dst = append(dst, Key{Kind: KeyEscape})
		return d.ground(dst, b, false)
	case stCSI:
		switch {
		case b >= 0x40 && b <= 0x7e:
			d.state = stGround
			return d.csi(dst, b)
		case b >= 0x20 && b <= 0x3f:
			if len(d.seq) >= maxSeq {
				d.state = stCSISkip
				return dst
			}
			d.seq = append(d.seq, b)
			return dst
		}
		// A control or non-ASCII byte aborts the sequence.
		d.state = stGround
		return d.ground(dst, b, false)
	case stCSISkip:
		switch {
		case b >= 0x40 && b <= 0x7e:
			d.state = stGround
		case b >= 0x20 && b <= 0x3f:
		default:
			d.state = stGround
			return d.ground(dst, b, false)
		}
		return dst
	case stSS3:
		d.state = stGround
		if b >= 0x40 && b <= 0x7e {
			if k, ok := ss3Keys[b]; ok {
				dst = append(dst, Key{Kind: k})
			}
			return dst
		}
		return d.ground(dst, b, false)
	}
	return d.ground(dst, b, wasCR)
}

var ss3Keys = map[byte]KeyKind{
	'A': KeyUp, 'B': KeyDown, 'C': KeyRight, 'D': KeyLeft, 'H': KeyHome, 'F': KeyEnd,
}

var ctrlKeys = [0x20]KeyKind{
	0x01: KeyHome, 0x02: KeyLeft, 0x03: KeyInterrupt, 0x04: KeyEOF, 0x05: KeyEnd,
	0x06: KeyRight, 0x08: KeyBackspace, 0x0b: KeyKillToEnd, 0x0c: KeyRedraw,
	0x0e: KeyDown, 0x10: KeyUp, 0x15: KeyKillLine, 0x17: KeyKillWord,
}

func (d *Decoder) ground(dst []Key, b byte, wasCR bool) []Key {
	if d.u8n > 0 {
		if b&0xc0 == 0x80 {
			d.u8[d.u8n] = b
			d.u8n++
			if d.u8n < d.u8want {
				return dst
			}
			r, size := utf8.DecodeRune(d.u8[:d.u8n])
			if size != d.u8n {
				r = utf8.RuneError
			}
			d.u8n = 0
			return appendRune(dst, r)
		}
		// The sequence was cut short: report it and handle b afresh.
		d.u8n = 0
		dst = append(dst, Key{Kind: KeyRune, Rune: utf8.RuneError})
	}
	switch {
	case b == 0x1b:
		d.state = stEsc
	case b == '\r':
		d.lastCR = true
		dst = append(dst, Key{Kind: KeyEnter})
	case b == '\n':
		if !wasCR {
			dst = append(dst, Key{Kind: KeyEnter})
		}
	case b == 0x7f:
		dst = append(dst, Key{Kind: KeyBackspace})
	case b == '\t':
		dst = append(dst, Key{Kind: KeyRune, Rune: ' '})
	case b < 0x20:
		if k := ctrlKeys[b]; k != KeyRune {
			dst = append(dst, Key{Kind: k})
		}
	case b < 0x80:
		dst = append(dst, Key{Kind: KeyRune, Rune: rune(b)})
	case b >= 0xc2 && b <= 0xf4:
		d.u8[0] = b
		d.u8n = 1
		switch {
		case b < 0xe0:
			d.u8want = 2
		case b < 0xf0:
			d.u8want = 3
		default:
			d.u8want = 4
		}
	default: // stray continuation byte or a byte never valid in UTF-8
		dst = append(dst, Key{Kind: KeyRune, Rune: utf8.RuneError})
	}
	return dst
}

// appendRune drops C1 control characters (U+0080-U+009F), which have no
// business in typed text.
func appendRune(dst []Key, r rune) []Key {
	if r >= 0x80 && r < 0xa0 {
		return dst
	}
	return append(dst, Key{Kind: KeyRune, Rune: r})
}

func (d *Decoder) csi(dst []Key, final byte) []Key {
	params := d.params()
	p1 := 0
	if len(params) > 0 {
		p1 = params[0]
	}
	switch final {
	case 'A':
		return append(dst, Key{Kind: KeyUp})
	case 'B':
		return append(dst, Key{Kind: KeyDown})
	case 'C':
		return append(dst, Key{Kind: KeyRight})
	case 'D':
		return append(dst, Key{Kind: KeyLeft})
	case 'H':
		return append(dst, Key{Kind: KeyHome})
	case 'F':
		return append(dst, Key{Kind: KeyEnd})
	case 'R':
		if len(params) == 2 && params[0] > 0 && params[1] > 0 {
			return append(dst, Key{Kind: KeyCursorReport, Row: params[0], Col: params[1]})
		}
	case '~':
		switch p1 {
		case 1, 7:
			return append(dst, Key{Kind: KeyHome})
		case 3:
			return append(dst, Key{Kind: KeyDelete})
		case 4, 8:
			return append(dst, Key{Kind: KeyEnd})
		case 5:
			return append(dst, Key{Kind: KeyPageUp})
		case 6:
			return append(dst, Key{Kind: KeyPageDown})
		}
	}
	return dst
}

// params parses "n;m" decimal parameters; anything else yields nil.
func (d *Decoder) params() []int {
	if len(d.seq) == 0 {
		return nil
	}
	var out []int
	n := 0
	for _, b := range d.seq {
		switch {
		case b >= '0' && b <= '9':
			if n < 1<<20 {
				n = n*10 + int(b-'0')
			}
		case b == ';':
			out = append(out, n)
			n = 0
		default: // private markers (?, >, =) and intermediates: not ours
			return nil
		}
	}
	return append(out, n)
}
