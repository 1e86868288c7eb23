package link

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"termlink/internal/jsonstr"
)

// MaxFrameBytes is the largest frame Decode is meant for; readers should set
// their WebSocket read limit from the channel's maxMessageChars instead (see
// ReadLimit).
const MaxFrameBytes = 1 << 20

// ReadLimit is the WebSocket read limit for a channel whose messages carry
// at most maxChars characters: every character may take up to 6 bytes once
// JSON-escaped (\u00e9), plus room for the other fields.
func ReadLimit(maxChars int) int64 { return int64(maxChars)*6 + 4096 }

// ErrUnknownType is matched (errors.Is) by the error Decode returns for a
// frame whose type is not one this package knows.
var ErrUnknownType = errors.New("unsupported frame type")

// DecodeError says exactly what is wrong with a frame.
type DecodeError struct {
	Type  Type   // the frame's type when it was readable
	Field string // the offending field ("" when the frame as a whole is bad)
	Msg   string // what is wrong
	err   error
}

func (e *DecodeError) Error() string {
	switch {
	case e.Field != "" && e.Type != "":
		return fmt.Sprintf("%s frame: field %q %s", e.Type, e.Field, e.Msg)
	case e.Field != "":
		return fmt.Sprintf("field %q %s", e.Field, e.Msg)
	default:
		return e.Msg
	}
}

func (e *DecodeError) Unwrap() error { return e.err }

// Decode parses one wire frame. It is strict where encoding/json is
// lenient: the frame must be valid UTF-8 (no byte is replaced by U+FFFD,
// so distinct ids stay distinct), keys match case-sensitively (a key that
// differs from a field's name only in case is refused rather than taken
// for it) and no key may appear twice in an object. Unknown fields are
// ignored (forward compatible); everything else that is wrong is a
// *DecodeError.
//
// The frames a device sends all the time (message, ping, pong, cancel,
// notice_ack), written plainly, are decoded in one pass without
// reflection (decodeFast); everything else takes the general path.
func Decode(data []byte) (Frame, error) {
	if !utf8.Valid(data) {
		return nil, &DecodeError{Msg: fmt.Sprintf("frame is not valid UTF-8 (first bad byte at offset %d)", firstInvalidUTF8(data))}
	}
	if f, ok := decodeFast(data); ok {
		return f, nil
	}
	return decodeGeneral(data)
}

// decodeGeneral is Decode's general path for valid UTF-8: encoding/json,
// after the key checks.
func decodeGeneral(data []byte) (Frame, error) {
	if !json.Valid(data) {
		var v struct{}
		return nil, jsonError("", json.Unmarshal(data, &v))
	}
	typeRaw, problem, isObject := checkKeys(data)
	if !isObject {
		return nil, notAnObject(data)
	}
	if typeRaw == nil {
		if problem != nil {
			return nil, problem
		}
		return nil, &DecodeError{Msg: `missing "type" field`}
	}
	t, ok := unquote(typeRaw)
	if !ok {
		return nil, &DecodeError{Field: "type", Msg: "must be a string, got " + jsonKind(typeRaw)}
	}
	typ := Type(t)
	if problem != nil {
		problem.Type = typ
		return nil, problem
	}
	var f Frame
	switch typ {
	case TypeConnect:
		f = new(Connect)
	case TypeConnected:
		f = new(Connected)
	case TypeMessage:
		f = new(Message)
	case TypeAck:
		f = new(Ack)
	case TypePing:
		return &Ping{}, nil
	case TypePong:
		return &Pong{}, nil
	case TypeError:
		f = new(Error)
	case TypeProgress:
		f = new(Progress)
	case TypeCancel:
		f = new(Cancel)
	case TypeNotice:
		f = new(Notice)
	case TypeNoticeAck:
		f = new(NoticeAck)
	case TypeScreen:
		f = new(Screen)
	case TypeDelta:
		f = new(Delta)
	case "":
		return nil, &DecodeError{Field: "type", Msg: "is empty"}
	default:
		if f = fleetFrame(typ); f == nil {
			return nil, &DecodeError{Type: typ, Msg: "Unsupported websocket frame type: " + t, err: ErrUnknownType}
		}
	}
	if err := json.Unmarshal(data, f); err != nil {
		return nil, jsonError(typ, err)
	}
	if field := missingField(f); field != "" {
		if d, ok := f.(*Delta); ok && field == "seq" {
			return nil, &DecodeError{Type: typ, Field: field, Msg: "must be a whole number from 1, got " + strconv.FormatInt(d.Seq, 10)}
		}
		return nil, &DecodeError{Type: typ, Field: field, Msg: "is missing or empty"}
	}
	if field, msg := fleetProblem(f); field != "" {
		return nil, &DecodeError{Type: typ, Field: field, Msg: msg}
	}
	return f, nil
}

// notAnObject describes valid JSON that is not an object.
func notAnObject(data []byte) error {
	kind := jsonKind(data)
	if kind == "null" {
		return &DecodeError{Msg: `missing "type" field`}
	}
	return &DecodeError{Msg: "frame must be a JSON object, got " + kind}
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// wireKeys are the field names of every frame, by their exact spelling.
var wireKeys = func() []string {
	var keys []string
	seen := map[string]bool{"type": true}
	keys = append(keys, "type")
	for _, v := range []any{Connect{}, Connected{}, Message{}, Ack{}, Error{}, Progress{}, Cancel{}, Delta{}, Notice{}, NoticeAck{}, Screen{},
		Update{}, UpdateStatus{}, Settings{}, SettingsAck{}, Diag{}, DiagResult{}, Health{}} {
		t := reflect.TypeOf(v)
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name != "" && !seen[name] {
				seen[name] = true
				keys = append(keys, name)
			}
		}
	}
	return keys
}()

// nestedFrames are the keys whose object values are decoded as frame
// structs too (Ack.Reply), so their keys are checked like the frame's.
const nestedFrameKey = "reply"

// checkKeys walks the top-level object of data (valid JSON) and the
// objects under nestedFrameKey: it returns the raw value of "type" and
// the first key problem (a duplicate, or a near miss of a field name in
// case). isObject is false when data is not an object.
func checkKeys(data []byte) (typeRaw []byte, problem *DecodeError, isObject bool) {
	s := keyScanner{data: data}
	s.ws()
	if s.i >= len(data) || data[s.i] != '{' {
		return nil, nil, false
	}
	typeRaw, problem = s.object("", true)
	return typeRaw, problem, true
}

// keyScanner reads JSON that json.Valid accepted.
type keyScanner struct {
	data []byte
	i    int
}

func (s *keyScanner) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str returns the string token at s.i, quotes included.
func (s *keyScanner) str() []byte {
	start := s.i
	s.i++ // opening quote
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case '\\':
			s.i += 2
		case '"':
			s.i++
			return s.data[start:s.i]
		default:
			s.i++
		}
	}
	return s.data[start:]
}

// skip moves past the value at s.i.
func (s *keyScanner) skip() {
	depth := 0
	for s.i < len(s.data) {
		switch c := s.data[s.i]; c {
		case '"':
			s.str()
			if depth == 0 {
				return
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return // end of the enclosing container
			}
			depth--
			if depth == 0 {
				s.i++
				return
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return
			}
		}
		s.i++
	}
}

// object walks the object at s.i; path prefixes field names in errors.
func (s *keyScanner) object(path string, top bool) (typeRaw []byte, problem *DecodeError) {
	s.i++ // {
	var seen keySet
	for {
		s.ws()
		if s.i >= len(s.data) || s.data[s.i] == '}' {
			s.i++
			return typeRaw, problem
		}
		key := keyBytes(s.str())
		s.ws()
		s.i++ // :
		s.ws()
		if problem == nil {
			problem = seen.check(path, key)
		}
		switch {
		case top && string(key) == "type" && typeRaw == nil:
			start := s.i
			s.skip()
			typeRaw = s.data[start:s.i]
		case string(key) == nestedFrameKey && s.data[s.i] == '{':
			if _, p := s.object(path+nestedFrameKey+".", false); problem == nil {
				problem = p
			}
		default:
			s.skip()
		}
		s.ws()
		if s.i < len(s.data) && s.data[s.i] == ',' {
			s.i++
		}
	}
}

// keyBytes is the key a string token stands for, without copying it
// unless it has escapes.
func keyBytes(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	k, _ := unquote(raw)
	return []byte(k)
}

// keySet holds the keys of one object: a few in a slice, many in a map
// (so a frame of thousands of keys stays linear).
type keySet struct {
	small [][]byte
	many  map[string]struct{}
	arr   [8][]byte // small's first backing array: no allocation for a frame's few keys
}

// check refuses a key seen before in the object, or one that differs from
// a field name only in case (encoding/json would take it for that field).
func (ks *keySet) check(path string, key []byte) *DecodeError {
	dup := false
	if ks.many != nil {
		_, dup = ks.many[string(key)]
		if !dup {
			ks.many[string(key)] = struct{}{}
		}
	} else {
		for _, k := range ks.small {
			if bytes.Equal(k, key) {
				dup = true
				break
			}
		}
		if ks.small == nil {
			ks.small = ks.arr[:0]
		}
		ks.small = append(ks.small, key)
		if len(ks.small) > 16 {
			ks.many = make(map[string]struct{}, 64)
			for _, k := range ks.small {
				ks.many[string(k)] = struct{}{}
			}
			ks.small = nil
		}
	}
	if dup {
		return &DecodeError{Field: path + string(key), Msg: "appears twice: each key may appear once in an object"}
	}
	for _, k := range wireKeys {
		if string(key) == k {
			return nil
		}
	}
	for _, k := range wireKeys {
		if strings.EqualFold(k, string(key)) {
			return &DecodeError{Field: path + string(key), Msg: fmt.Sprintf("is not known: keys are case-sensitive (did you mean %q?)", path+k)}
		}
	}
	return nil
}

// unquote returns the string a JSON string token stands for; ok is false
// when raw is not a string.
func unquote(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// missingField names the first required field f lacks. Only fields without
// which the frame means nothing are required here; the server checks the
// rest (blank text, size) and answers with its own error.
func missingField(f Frame) string {
	switch f := f.(type) {
	case *Connected:
		if f.ChannelID == "" {
			return "channel_id"
		}
		if f.SessionID == "" {
			return "session_id"
		}
	case *Message:
		if f.MessageID == "" {
			return "message_id"
		}
	case *Ack:
		if f.MessageID == "" {
			return "message_id"
		}
	case *Error:
		if f.Error == "" {
			return "error"
		}
	case *Progress:
		if f.MessageID == "" {
			return "message_id"
		}
	case *Delta:
		if f.MessageID == "" {
			return "message_id"
		}
		if f.Seq < 1 {
			return "seq"
		}
	case *Cancel:
		if f.MessageID == "" {
			return "message_id"
		}
	case *Notice:
		if f.NoticeID == "" {
			return "notice_id"
		}
	case *NoticeAck:
		if f.NoticeID == "" {
			return "notice_id"
		}
	}
	return ""
}

func jsonError(typ Type, err error) error {
	var syn *json.SyntaxError
	var ute *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &DecodeError{Type: typ, Msg: fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, err), err: err}
	case errors.As(err, &ute) && ute.Field == "":
		return &DecodeError{Type: typ, Msg: "frame must be a JSON object, got " + ute.Value, err: err}
	case errors.As(err, &ute):
		return &DecodeError{Type: typ, Field: ute.Field, Msg: fmt.Sprintf("must be %s, got %s", goKind(ute.Type.Kind().String()), ute.Value), err: err}
	default:
		return &DecodeError{Type: typ, Msg: "invalid JSON: " + err.Error(), err: err}
	}
}

func goKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "ptr", "struct", "map":
		return "an object"
	default:
		return "a number"
	}
}

func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// Encode returns the wire JSON of f with "type" as the first field, in
// one allocation of about the right size.
func Encode(f Frame) ([]byte, error) {
	if isNil(f) {
		return nil, errNilFrame
	}
	return AppendEncode(make([]byte, 0, encodedSize(f)), f)
}

var errNilFrame = errors.New("link: encode nil frame")

// isNil reports a nil frame, also a typed nil pointer.
func isNil(f Frame) bool { return f == nil || reflect.ValueOf(f).IsNil() }

// AppendEncode appends the wire JSON of f to dst: what json.Marshal writes
// for the frame's struct (same field order, omitempty and escaping), with
// "type" spliced in first, written field by field without reflection.
func AppendEncode(dst []byte, f Frame) ([]byte, error) {
	if isNil(f) {
		return dst, errNilFrame
	}
	dst = append(dst, `{"type":"`...)
	dst = append(dst, f.FrameType()...)
	dst = append(dst, '"')
	switch f := f.(type) {
	case *Connect:
		dst = str(dst, "peer_id", f.PeerID)
		dst = optStr(dst, "device_name", f.DeviceName)
		if len(f.Capabilities) > 0 {
			dst = jsonstr.AppendArray(key(dst, "capabilities"), f.Capabilities, true)
		}
		dst = optStr(dst, "thread_id", f.ThreadID)
		dst = optStr(dst, "user_id", f.UserID)
		dst = optStr(dst, "token", f.Token)
		dst = optStr(dst, "board", f.Board)
		dst = optStr(dst, "version", f.Version)
		if len(f.Tags) > 0 {
			dst = appendStringMap(key(dst, "tags"), f.Tags)
		}
		dst = optStr(dst, "platform", f.Platform)
		if f.SettingsVersion != 0 {
			dst = strconv.AppendInt(key(dst, "settings_version"), f.SettingsVersion, 10)
		}
		dst = optStr(dst, "binary_sha256", f.BinarySHA256)
	case *Connected:
		dst = str(dst, "channel_id", f.ChannelID)
		dst = str(dst, "session_id", f.SessionID)
		if f.HeartbeatSeconds != 0 {
			dst = strconv.AppendInt(key(dst, "heartbeat_seconds"), int64(f.HeartbeatSeconds), 10)
		}
	case *Message:
		dst = appendMessageFields(dst, f)
	case *Ack:
		dst = str(dst, "message_id", f.MessageID)
		dst = str(dst, "session_id", f.SessionID)
		dst = boolField(dst, "accepted", f.Accepted)
		if f.Duplicate {
			dst = boolField(dst, "duplicate", true)
		}
		if f.Pending {
			dst = boolField(dst, "pending", true)
		}
		if f.Reply != nil {
			dst = append(key(dst, "reply"), '{')
			n := len(dst)
			dst = appendMessageFields(dst, f.Reply)
			dst = append(dst[:n], dst[n+1:]...) // its first field's comma
			dst = append(dst, '}')
		}
	case *Error:
		dst = str(dst, "error", f.Error)
		dst = optStr(dst, "message_id", f.MessageID)
		dst = optStr(dst, "code", f.Code)
	case *Progress:
		dst = str(dst, "message_id", f.MessageID)
		dst = str(dst, "text", f.Text)
	case *Delta:
		dst = str(dst, "message_id", f.MessageID)
		dst = strconv.AppendInt(key(dst, "seq"), f.Seq, 10)
		dst = str(dst, "text", f.Text)
	case *Cancel:
		dst = str(dst, "message_id", f.MessageID)
		dst = optStr(dst, "thread_id", f.ThreadID)
	case *Notice:
		dst = str(dst, "notice_id", f.NoticeID)
		dst = str(dst, "text", f.Text)
		dst = str(dst, "priority", f.Priority)
		if f.DisplaySeconds != 0 {
			dst = strconv.AppendInt(key(dst, "display_seconds"), int64(f.DisplaySeconds), 10)
		}
		dst = optStr(dst, "expires_at", f.ExpiresAt)
	case *NoticeAck:
		dst = str(dst, "notice_id", f.NoticeID)
	case *Screen:
		dst = key(dst, "rows")
		if f.Rows == nil {
			dst = append(dst, "null"...)
		} else {
			dst = jsonstr.AppendArray(dst, f.Rows, true)
		}
		dst = optStr(dst, "rom", f.ROM)
		dst = strconv.AppendInt(key(dst, "cursor_row"), int64(f.CursorRow), 10)
		dst = strconv.AppendInt(key(dst, "cursor_col"), int64(f.CursorCol), 10)
		dst = boolField(dst, "cursor_on", f.CursorOn)
		dst = boolField(dst, "backlight", f.Backlight)
	case *Ping, *Pong:
	default:
		if out, ok, err := appendFleet(dst, f); ok {
			if err != nil {
				return dst, err
			}
			return append(out, '}'), nil
		}
		return dst, fmt.Errorf("link: encode %s frame: unknown frame (%T)", f.FrameType(), f)
	}
	return append(dst, '}'), nil
}

// appendStringMap appends m as a JSON object with its keys sorted, as
// encoding/json writes a map.
func appendStringMap(dst []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonstr.Append(dst, k, true)
		dst = append(dst, ':')
		dst = jsonstr.Append(dst, m[k], true)
	}
	return append(dst, '}')
}

// appendMessageFields writes m's fields, each with a leading comma.
func appendMessageFields(dst []byte, m *Message) []byte {
	dst = optStr(dst, "role", m.Role)
	dst = str(dst, "message_id", m.MessageID)
	dst = optStr(dst, "run_id", m.RunID)
	dst = str(dst, "text", m.Text)
	dst = optStr(dst, "finish_reason", m.FinishReason)
	dst = optStr(dst, "thread_id", m.ThreadID)
	return optStr(dst, "user_id", m.UserID)
}

// key appends ,"k": (k needs no escaping).
func key(dst []byte, k string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, k...)
	return append(dst, '"', ':')
}

// str appends ,"k":"v".
func str(dst []byte, k, v string) []byte { return jsonstr.Append(key(dst, k), v, true) }

// optStr is str for an omitempty field.
func optStr(dst []byte, k, v string) []byte {
	if v == "" {
		return dst
	}
	return str(dst, k, v)
}

func boolField(dst []byte, k string, v bool) []byte { return strconv.AppendBool(key(dst, k), v) }

// encodedSize is about the length of f's encoding (exact unless a string
// needs escaping), so Encode allocates once.
func encodedSize(f Frame) int {
	n := 24 // {"type":"connected"}
	switch f := f.(type) {
	case *Connect:
		n += 110 + len(f.PeerID) + len(f.DeviceName) + len(f.ThreadID) + len(f.UserID) + len(f.Token) + len(f.Board) + len(f.Version)
		for k, v := range f.Tags {
			n += len(k) + len(v) + 6
		}
		for _, c := range f.Capabilities {
			n += len(c) + 3
		}
	case *Connected:
		n += 40 + len(f.ChannelID) + len(f.SessionID)
	case *Message:
		n += messageSize(f)
	case *Ack:
		n += 40 + len(f.MessageID) + len(f.SessionID)
		if f.Reply != nil {
			n += 10 + messageSize(f.Reply)
		}
	case *Error:
		n += 30 + len(f.Error) + len(f.MessageID) + len(f.Code)
	case *Progress:
		n += 20 + len(f.MessageID) + len(f.Text)
	case *Delta:
		n += 50 + len(f.MessageID) + len(f.Text)
	case *Cancel:
		n += 20 + len(f.MessageID) + len(f.ThreadID)
	case *Notice:
		n += 90 + len(f.NoticeID) + len(f.Text) + len(f.Priority) + len(f.ExpiresAt)
	case *NoticeAck:
		n += 20 + len(f.NoticeID)
	case *Screen:
		n += 90
		for _, r := range f.Rows {
			n += len(r) + 3
		}
	}
	return n
}

func messageSize(m *Message) int {
	return 90 + len(m.Role) + len(m.MessageID) + len(m.RunID) + len(m.Text) + len(m.FinishReason) + len(m.ThreadID) + len(m.UserID)
}

// MustEncode is Encode for frames built in code, which cannot fail to
// marshal; it panics on a nil frame.
func MustEncode(f Frame) []byte {
	b, err := Encode(f)
	if err != nil {
		panic(err)
	}
	return b
}
