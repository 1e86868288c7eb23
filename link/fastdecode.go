package link

import (
	"unicode/utf8"
)

// decodeFast decodes in one pass, without reflection, the frames a server
// reads on its hot path — message, ping, pong, cancel, notice_ack — when
// they are written the plain way: one flat JSON object whose keys are the
// frame's own fields, each once, exactly spelled, with string values
// (escapes allowed except \u). Anything else (another frame type, an
// unknown or misspelled key, a duplicate, a null, a number, \u, bad JSON)
// returns ok false, and Decode takes its general path, which decides and
// words every error: so decodeFast never accepts what Decode would refuse
// and never decodes a frame differently (FuzzDecodeFast checks both).
// data is valid UTF-8 (Decode checked it).
func decodeFast(data []byte) (f Frame, ok bool) {
	d := fastDecoder{data: data}
	d.ws()
	if !d.byte('{') {
		return nil, false
	}
	var (
		typ  []byte
		vals [fastFields][]byte // raw string contents, by field
		seen uint32             // fields and "type" seen (bit fastFields is "type")
	)
	d.ws()
	if d.peek() == '}' {
		return nil, false // no type: Decode words it
	}
	for {
		d.ws()
		key, esc, okk := d.str()
		if !okk || esc {
			return nil, false
		}
		d.ws()
		if !d.byte(':') {
			return nil, false
		}
		d.ws()
		val, esc, okv := d.str()
		if !okv {
			return nil, false
		}
		if string(key) == "type" {
			if seen&(1<<fastFields) != 0 || esc {
				return nil, false
			}
			seen |= 1 << fastFields
			typ = val
		} else {
			i := fastField(key)
			if i < 0 || seen&(1<<i) != 0 {
				return nil, false
			}
			seen |= 1 << i
			if esc {
				var u bool
				if val, u = unescapeSimple(val); !u {
					return nil, false
				}
			}
			vals[i] = val
		}
		d.ws()
		switch d.next() {
		case ',':
			continue
		case '}':
		default:
			return nil, false
		}
		break
	}
	d.ws()
	if d.i != len(d.data) || typ == nil {
		return nil, false
	}
	str := func(i int) string { return string(vals[i]) }
	switch Type(typ) {
	case TypeMessage:
		if seen&^(1<<fastFields|messageFields) != 0 || len(vals[fMessageID]) == 0 {
			return nil, false
		}
		return &Message{Role: str(fRole), MessageID: str(fMessageID), RunID: str(fRunID), Text: str(fText),
			FinishReason: str(fFinishReason), ThreadID: str(fThreadID), UserID: str(fUserID)}, true
	case TypeCancel:
		if seen&^(1<<fastFields|cancelFields) != 0 || len(vals[fMessageID]) == 0 {
			return nil, false
		}
		return &Cancel{MessageID: str(fMessageID), ThreadID: str(fThreadID)}, true
	case TypeNoticeAck:
		if seen&^(1<<fastFields|1<<fNoticeID) != 0 || len(vals[fNoticeID]) == 0 {
			return nil, false
		}
		return &NoticeAck{NoticeID: str(fNoticeID)}, true
	case TypePing:
		if seen != 1<<fastFields {
			return nil, false
		}
		return &Ping{}, true
	case TypePong:
		if seen != 1<<fastFields {
			return nil, false
		}
		return &Pong{}, true
	}
	return nil, false
}

// The fields decodeFast knows, as bit positions.
const (
	fRole = iota
	fMessageID
	fRunID
	fText
	fFinishReason
	fThreadID
	fUserID
	fNoticeID
	fastFields
)

const (
	messageFields = 1<<fRole | 1<<fMessageID | 1<<fRunID | 1<<fText | 1<<fFinishReason | 1<<fThreadID | 1<<fUserID
	cancelFields  = 1<<fMessageID | 1<<fThreadID
)

func fastField(key []byte) int {
	switch string(key) {
	case "role":
		return fRole
	case "message_id":
		return fMessageID
	case "run_id":
		return fRunID
	case "text":
		return fText
	case "finish_reason":
		return fFinishReason
	case "thread_id":
		return fThreadID
	case "user_id":
		return fUserID
	case "notice_id":
		return fNoticeID
	}
	return -1
}

type fastDecoder struct {
	data []byte
	i    int
}

func (d *fastDecoder) ws() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDecoder) peek() byte {
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

func (d *fastDecoder) next() byte {
	if d.i < len(d.data) {
		d.i++
		return d.data[d.i-1]
	}
	return 0
}

func (d *fastDecoder) byte(c byte) bool {
	if d.peek() == c {
		d.i++
		return true
	}
	return false
}

// str reads a string token and returns its raw contents (between the
// quotes) and whether it has escapes; ok is false for anything but a
// well-formed string (a control character inside, an escape that is not
// one of JSON's, \u, or no closing quote).
func (d *fastDecoder) str() (raw []byte, esc, ok bool) {
	if !d.byte('"') {
		return nil, false, false
	}
	start := d.i
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			raw = d.data[start:d.i]
			d.i++
			return raw, esc, true
		case c == '\\':
			if d.i+1 >= len(d.data) {
				return nil, false, false
			}
			switch d.data[d.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			default:
				return nil, false, false // \u (or invalid): the general path
			}
			esc = true
			d.i += 2
		case c < 0x20:
			return nil, false, false
		default:
			d.i++
		}
	}
	return nil, false, false
}

// unescapeSimple resolves the escapes str let through.
func unescapeSimple(raw []byte) ([]byte, bool) {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default:
			return nil, false
		}
	}
	return out, utf8.Valid(out)
}
