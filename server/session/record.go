package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"termlink/internal/jsonstr"
)

// TimeLayout is nanobot's timestamp format: local time, no zone,
// microseconds.
const TimeLayout = "2006-01-02T15:04:05.000000"

// Now returns the current local time in [TimeLayout].
func Now() string {
	var buf [len(TimeLayout)]byte
	return string(appendTimestamp(buf[:0], time.Now()))
}

// appendTimestamp appends t in [TimeLayout], as t.AppendFormat does (the
// microseconds truncated, not rounded), without parsing the layout: two
// to three times faster, and every record the server writes without a
// timestamp gets one.
func appendTimestamp(dst []byte, t time.Time) []byte {
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(dst, TimeLayout)
	}
	hour, minute, sec := t.Clock()
	var b [len(TimeLayout)]byte
	put := func(at, v, digits int) {
		for i := at + digits - 1; i >= at; i-- {
			b[i] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, year, 4)
	b[4] = '-'
	put(5, int(month), 2)
	b[7] = '-'
	put(8, day, 2)
	b[10] = 'T'
	put(11, hour, 2)
	b[13] = ':'
	put(14, minute, 2)
	b[16] = ':'
	put(17, sec, 2)
	b[19] = '.'
	put(20, t.Nanosecond()/1000, 6)
	return append(dst, b[:]...)
}

// Record is one message line of a session file.
//
// Fields of a loaded line that Record does not know, and known fields whose
// value has another JSON type than the Go field (content:null, content as a
// list of parts), are kept in Extra and written back as they were: when a
// known field is empty and Extra holds a value under its name, that value is
// written instead. Numbers in Extra are [json.Number] so they round-trip
// exactly.
type Record struct {
	Role         string         `json:"role"`
	Content      string         `json:"content"`
	Timestamp    string         `json:"timestamp,omitempty"` // filled by Append if empty
	MessageID    string         `json:"message_id,omitempty"`
	RunID        string         `json:"run_id,omitempty"`
	FinishReason string         `json:"finish_reason,omitempty"`
	Media        []string       `json:"media,omitempty"`
	Extra        map[string]any `json:"-"` // unknown fields of a loaded line, written back inline
}

// Metadata is the first line of a session file. Its JSON form carries
// "_type":"metadata" first and then the fields in the order below. Numbers
// in Metadata and Extra are [json.Number] when loaded.
type Metadata struct {
	Key              string         `json:"key"`
	CreatedAt        string         `json:"created_at"`
	UpdatedAt        string         `json:"updated_at"`
	Metadata         map[string]any `json:"metadata"`
	LastConsolidated int            `json:"last_consolidated"`
	Extra            map[string]any `json:"-"` // unknown fields of a loaded line, written back inline
}

// Session is one loaded session file.
type Session struct {
	Meta    Metadata
	Records []Record
	// Warnings lists what was skipped or guessed while loading, each as
	// "file:line: what".
	Warnings []string
	// Partial is set by [Store.Tail], [Store.TailMessages] and
	// [Store.ScanTails] when the walk stopped before the first record:
	// the file holds older records than Records.
	Partial bool
}

// field is one known field in its output order.
type field struct {
	name      string
	zero      bool
	omitEmpty bool
	value     any
}

// MarshalJSON writes the record as one line of nanobot's format, without the
// trailing newline: known fields in the order above, then Extra sorted by
// name. Non-ASCII text is written as UTF-8 and <>& unescaped, as in the
// session file (json.Marshal escapes <>& again).
func (r Record) MarshalJSON() ([]byte, error) {
	return r.appendJSON(nil)
}

func (r Record) appendJSON(dst []byte) ([]byte, error) {
	return r.appendJSONAt(dst, nil)
}

// appendJSONAt is appendJSON writing now (a timestamp in [TimeLayout])
// as the timestamp if r has none; nil: none.
func (r Record) appendJSONAt(dst, now []byte) ([]byte, error) {
	if len(r.Extra) == 0 {
		return r.appendPlain(dst, now), nil
	}
	if len(r.Extra) == 1 {
		// A run's start or interruption (one per message): "event" sorts
		// after every known field, so it goes last.
		if ev, ok := r.Extra["event"].(string); ok {
			dst = r.appendPlain(dst, now)
			dst = append(dst[:len(dst)-1], `,"event":`...)
			return append(appendString(dst, ev), '}'), nil
		}
	}
	if t, ok := r.Extra["_type"].(string); ok && t == "metadata" {
		return nil, errors.New(`record has "_type":"metadata" in Extra`)
	}
	if r.Timestamp == "" && now != nil {
		r.Timestamp = string(now)
	}
	return appendObject(dst, r.fields(), r.Extra)
}

// fields are r's known fields in their output order.
func (r Record) fields() []field {
	return []field{
		{"role", r.Role == "", false, r.Role},
		{"content", r.Content == "", false, r.Content},
		{"timestamp", r.Timestamp == "", true, r.Timestamp},
		{"message_id", r.MessageID == "", true, r.MessageID},
		{"run_id", r.RunID == "", true, r.RunID},
		{"finish_reason", r.FinishReason == "", true, r.FinishReason},
		{"media", len(r.Media) == 0, true, r.Media},
	}
}

// appendPlain is appendJSONAt for a record without Extra (every record
// the server writes): the same bytes, written field by field without
// reflection or an encoder.
func (r Record) appendPlain(dst, now []byte) []byte {
	dst = append(dst, `{"role":`...)
	dst = appendString(dst, r.Role)
	dst = append(dst, `,"content":`...)
	dst = appendString(dst, r.Content)
	if r.Timestamp == "" && now != nil {
		// Digits, '-', ':', '.' and 'T': nothing to escape.
		dst = append(append(append(dst, `,"timestamp":"`...), now...), '"')
	} else {
		dst = optString(dst, `,"timestamp":`, r.Timestamp)
	}
	dst = optString(dst, `,"message_id":`, r.MessageID)
	dst = optString(dst, `,"run_id":`, r.RunID)
	dst = optString(dst, `,"finish_reason":`, r.FinishReason)
	if len(r.Media) > 0 {
		dst = append(dst, `,"media":[`...)
		for i, m := range r.Media {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, m)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// optString appends key (`,"name":`) and v unless v is empty.
func optString(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	return appendString(append(dst, key...), v)
}

// appendString appends s as a JSON string literal, as encoding/json
// writes it with HTML left unescaped (jsonstr.Append). Most text needs
// no escape: printable ASCII without '"' or '\\' is copied as it is,
// found eight bytes at a time.
func appendString(dst []byte, s string) []byte {
	if !plainASCII(s) {
		return jsonstr.Append(dst, s, false)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

const (
	lows  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainASCII reports whether every byte of s is in 0x20..0x7f and is not
// '"' or '\\': the bytes a JSON string holds as they are.
func plainASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// A byte with its high bit set, one below 0x20, and one equal
		// to '"' or '\\' (a zero byte after the xor): each test sets
		// the high bit of some byte exactly when such a byte exists.
		q := x ^ (lows * '"')
		b := x ^ (lows * '\\')
		if (x|(x-lows*0x20)&^x|(q-lows)&^q|(b-lows)&^b)&highs != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// MarshalJSON writes the metadata line, "_type":"metadata" first, without the
// trailing newline. A nil Metadata map is written as {}.
func (m Metadata) MarshalJSON() ([]byte, error) {
	return m.appendJSON(nil)
}

func (m Metadata) appendJSON(dst []byte) ([]byte, error) {
	var meta any = m.Metadata
	if m.Metadata == nil {
		meta = map[string]any{}
	}
	return appendObject(dst, []field{
		{"_type", false, false, "metadata"},
		{"key", m.Key == "", false, m.Key},
		{"created_at", m.CreatedAt == "", false, m.CreatedAt},
		{"updated_at", m.UpdatedAt == "", false, m.UpdatedAt},
		{"metadata", m.Metadata == nil, false, meta},
		{"last_consolidated", m.LastConsolidated == 0, false, m.LastConsolidated},
	}, m.Extra)
}

// appendObject writes one JSON object: the known fields in order (a zero
// known field is replaced by extra's value of the same name if there is one,
// else written as zero unless omitEmpty), then the other extra fields sorted
// by name.
func appendObject(dst []byte, fields []field, extra map[string]any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	put := func(name string, v any) error {
		if buf.Len() > len(dst)+1 {
			buf.WriteByte(',')
		}
		if err := enc.Encode(name); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
		buf.WriteByte(':')
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("field %q: %w", name, err)
		}
		buf.Truncate(buf.Len() - 1)
		return nil
	}
	buf.WriteByte('{')
	known := make(map[string]bool, len(fields))
	for _, f := range fields {
		known[f.name] = true
		v := f.value
		if f.zero {
			if x, ok := extra[f.name]; ok {
				v = x
			} else if f.omitEmpty {
				continue
			}
		}
		if err := put(f.name, v); err != nil {
			return nil, err
		}
	}
	if len(extra) > 0 {
		names := make([]string, 0, len(extra))
		for k := range extra {
			if !known[k] {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		for _, k := range names {
			if err := put(k, extra[k]); err != nil {
				return nil, err
			}
		}
	}
	buf.WriteByte('}')
	out := buf.Bytes()
	if bytes.IndexByte(out[len(dst):], '\n') >= 0 { // cannot happen with encoding/json; guard the line format
		return nil, errors.New("encoded record contains a newline")
	}
	return out, nil
}

// UnmarshalJSON reads one record line. It fails only if b is not a JSON
// object; fields of unexpected type go to Extra.
func (r *Record) UnmarshalJSON(b []byte) error {
	obj, err := decodeObject(b)
	if err != nil {
		return err
	}
	r.fromObject(obj)
	return nil
}

func (r *Record) fromObject(obj map[string]json.RawMessage) {
	*r = Record{}
	for k, raw := range obj {
		ok := true
		switch k {
		case "role":
			ok = decodeString(raw, &r.Role)
		case "content":
			ok = decodeString(raw, &r.Content)
		case "timestamp":
			ok = decodeString(raw, &r.Timestamp)
		case "message_id":
			ok = decodeString(raw, &r.MessageID)
		case "run_id":
			ok = decodeString(raw, &r.RunID)
		case "finish_reason":
			ok = decodeString(raw, &r.FinishReason)
		case "media":
			ok = decodeStrings(raw, &r.Media)
		default:
			ok = false
		}
		if !ok {
			if r.Extra == nil {
				r.Extra = make(map[string]any)
			}
			r.Extra[k] = decodeAny(raw)
		}
	}
}

// UnmarshalJSON reads a metadata line. It fails only if b is not a JSON
// object; "_type" is dropped and fields of unexpected type go to Extra.
func (m *Metadata) UnmarshalJSON(b []byte) error {
	obj, err := decodeObject(b)
	if err != nil {
		return err
	}
	m.fromObject(obj)
	return nil
}

func (m *Metadata) fromObject(obj map[string]json.RawMessage) {
	*m = Metadata{}
	for k, raw := range obj {
		ok := true
		switch k {
		case "_type":
			continue
		case "key":
			ok = decodeString(raw, &m.Key)
		case "created_at":
			ok = decodeString(raw, &m.CreatedAt)
		case "updated_at":
			ok = decodeString(raw, &m.UpdatedAt)
		case "metadata":
			if mm, isMap := decodeAny(raw).(map[string]any); isMap {
				m.Metadata = mm
			} else {
				ok = false
			}
		case "last_consolidated":
			ok = decodeInt(raw, &m.LastConsolidated)
		default:
			ok = false
		}
		if !ok {
			if m.Extra == nil {
				m.Extra = make(map[string]any)
			}
			m.Extra[k] = decodeAny(raw)
		}
	}
}

// decodeObject splits a JSON object into its raw fields.
func decodeObject(b []byte) (map[string]json.RawMessage, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

func decodeString(raw json.RawMessage, dst *string) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	// Fast path: no escapes, valid UTF-8 (raw is valid JSON already).
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		*dst = string(body)
		return true
	}
	return json.Unmarshal(raw, dst) == nil
}

func decodeStrings(raw json.RawMessage, dst *[]string) bool {
	if len(raw) == 0 || raw[0] != '[' {
		return false
	}
	return json.Unmarshal(raw, dst) == nil
}

func decodeInt(raw json.RawMessage, dst *int) bool {
	n, err := strconv.Atoi(string(raw))
	if err != nil {
		return false
	}
	*dst = n
	return true
}

// decodeAny decodes a valid JSON value with numbers as json.Number.
func decodeAny(raw json.RawMessage) any {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return raw // unreachable for a value json.Unmarshal accepted
	}
	return v
}

// isMetadataLine reports whether obj is a metadata record.
func isMetadataLine(obj map[string]json.RawMessage) bool {
	var t string
	return decodeString(obj["_type"], &t) && t == "metadata"
}

// fastRecord decodes a record line of the shape this package writes: one
// flat object whose keys are known Record string fields, each once. It
// reports false for anything else (metadata, media, unknown or repeated
// keys, non-string values, invalid JSON), which the caller then decodes
// the general way. It exists for start-up, which reads many large lines:
// it finds a string's end with a byte search instead of a full JSON scan.
func fastRecord(line []byte) (Record, bool) {
	var r Record
	var seen [6]bool
	p := skipSpace(line, 0)
	if p >= len(line) || line[p] != '{' {
		return r, false
	}
	p = skipSpace(line, p+1)
	if p < len(line) && line[p] == '}' {
		return r, skipSpace(line, p+1) == len(line)
	}
	for {
		key, next, ok := fastString(line, p)
		if !ok {
			return r, false
		}
		p = skipSpace(line, next)
		if p >= len(line) || line[p] != ':' {
			return r, false
		}
		val, next, ok := fastString(line, skipSpace(line, p+1))
		if !ok {
			return r, false
		}
		var dst *string
		var i int
		switch key {
		case "role":
			dst, i = &r.Role, 0
		case "content":
			dst, i = &r.Content, 1
		case "timestamp":
			dst, i = &r.Timestamp, 2
		case "message_id":
			dst, i = &r.MessageID, 3
		case "run_id":
			dst, i = &r.RunID, 4
		case "finish_reason":
			dst, i = &r.FinishReason, 5
		default:
			return r, false
		}
		if seen[i] {
			return r, false
		}
		seen[i], *dst = true, val
		p = skipSpace(line, next)
		if p >= len(line) {
			return r, false
		}
		switch line[p] {
		case ',':
			p = skipSpace(line, p+1)
		case '}':
			return r, skipSpace(line, p+1) == len(line)
		default:
			return r, false
		}
	}
}

func skipSpace(b []byte, p int) int {
	for p < len(b) && (b[p] == ' ' || b[p] == '\t' || b[p] == '\r' || b[p] == '\n') {
		p++
	}
	return p
}

// fastString decodes the JSON string starting at b[p] and returns the
// index after it. A string with escapes is decoded by encoding/json; one
// with control or invalid UTF-8 bytes is refused (ok false).
func fastString(b []byte, p int) (s string, next int, ok bool) {
	if p >= len(b) || b[p] != '"' {
		return "", 0, false
	}
	escaped := false
	end := p + 1
	for {
		i := bytes.IndexByte(b[end:], '"')
		if i < 0 {
			return "", 0, false
		}
		end += i
		// The quote ends the string unless an odd run of backslashes
		// precedes it.
		n := 0
		for j := end - 1; j > p && b[j] == '\\'; j-- {
			n++
		}
		if n > 0 {
			escaped = true
		}
		if n%2 == 0 {
			break
		}
		end++
	}
	body := b[p+1 : end]
	if !escaped && bytes.IndexByte(body, '\\') >= 0 {
		escaped = true
	}
	if escaped {
		if err := json.Unmarshal(b[p:end+1], &s); err != nil {
			return "", 0, false
		}
		return s, end + 1, true
	}
	for _, c := range body {
		if c < 0x20 {
			return "", 0, false
		}
	}
	if !utf8.Valid(body) {
		return "", 0, false
	}
	return string(body), end + 1, true
}
