package session

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"
)

// generalJSON is a record's line written by the general encoder (the one
// for records with Extra), which appendPlain must match byte for byte.
func generalJSON(t testing.TB, r Record) []byte {
	b, err := appendObject(nil, r.fields(), r.Extra)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func recordsOf(a, b, c string) []Record {
	return []Record{
		{Role: a, Content: b},
		{Role: "user", Content: c, Timestamp: a, MessageID: b, RunID: c, FinishReason: a, Media: []string{b, c}},
		{Role: "assistant", Content: "", MessageID: a, Media: []string{}},
		{Role: "system", Content: b, MessageID: c, RunID: a, Extra: map[string]any{"event": c}},
		{Role: "system", Content: b, Extra: map[string]any{"event": a}, Media: []string{c}},
	}
}

func checkPlainMatchesGeneral(t *testing.T, recs []Record) {
	t.Helper()
	for _, r := range recs {
		got, err := r.appendJSON([]byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if want := generalJSON(t, r); !bytes.Equal(got[1:], want) {
			t.Fatalf("record %#v\n got %s\nwant %s", r, got[1:], want)
		}
	}
}

func TestRecordPlainEncodingMatchesGeneral(t *testing.T) {
	t.Parallel()
	checkPlainMatchesGeneral(t, recordsOf("user", "hello", "m-1"))
	checkPlainMatchesGeneral(t, recordsOf("<&>", "caf\u00e9 \"q\" \\ \n\t\x01 \u2028", "bad \xff utf8"))
	checkPlainMatchesGeneral(t, recordsOf("", "", ""))
}

func FuzzRecordPlainEncoding(f *testing.F) {
	f.Add("user", "hello <b>", "\xff\u2029")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		checkPlainMatchesGeneral(t, recordsOf(a, b, c))
	})
}

func BenchmarkRecordAppendJSON(b *testing.B) {
	r := Record{Role: "assistant", Content: "You said: hello from the desk terminal", Timestamp: "2026-11-23T15:04:05.000000",
		MessageID: "m-000123", RunID: "r1a2b3c4-000042", FinishReason: "stop"}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		if buf, err = r.appendJSON(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// mirrorRecord is Record as encoding/json writes it with struct tags, the
// reference for the hand-written encoder: the same fields in the same
// order, and the one Extra field the server writes ("event").
type mirrorRecord struct {
	Role         string   `json:"role"`
	Content      string   `json:"content"`
	Timestamp    string   `json:"timestamp,omitempty"`
	MessageID    string   `json:"message_id,omitempty"`
	RunID        string   `json:"run_id,omitempty"`
	FinishReason string   `json:"finish_reason,omitempty"`
	Media        []string `json:"media,omitempty"`
	Event        *string  `json:"event,omitempty"`
}

func (m mirrorRecord) record() Record {
	r := Record{Role: m.Role, Content: m.Content, Timestamp: m.Timestamp, MessageID: m.MessageID, RunID: m.RunID,
		FinishReason: m.FinishReason, Media: m.Media}
	if m.Event != nil {
		r.Extra = map[string]any{"event": *m.Event}
	}
	return r
}

// referenceJSON is what encoding/json writes for m (HTML left unescaped,
// as in the session file), without the newline.
func referenceJSON(t testing.TB, m mirrorRecord) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// strictRecord parses line with encoding/json, refusing unknown fields
// and trailing data.
func strictRecord(t testing.TB, line []byte) Record {
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	var m mirrorRecord
	if err := d.Decode(&m); err != nil {
		t.Fatalf("strict parse of %s: %v", line, err)
	}
	if d.More() {
		t.Fatalf("strict parse of %s: data after the object", line)
	}
	if len(m.Media) == 0 {
		m.Media = nil
	}
	return m.record()
}

// checkRecordEncode: the encoder writes m as encoding/json does, as one
// line, and every parser of the package reads it back as the strict
// parser does (and as m itself when its text is valid UTF-8).
func checkRecordEncode(t *testing.T, m mirrorRecord) {
	t.Helper()
	r := m.record()
	want := referenceJSON(t, m)
	got, err := r.appendJSON([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got = got[1:]; !bytes.Equal(got, want) {
		t.Fatalf("record %#v\n got %s\nwant %s", r, got, want)
	}
	lines, err := appendRecords(nil, []Record{r}, MaxLineSize)
	if err != nil {
		t.Fatal(err)
	}
	if r.Timestamp != "" && !bytes.Equal(lines, append(want, '\n')) {
		t.Fatalf("appendRecords wrote %q, want %q", lines, want)
	}
	if r.Timestamp == "" { // now's timestamp, written straight into the line
		decoded, err := DecodeRecords(lines)
		if err != nil || len(decoded) != 1 || len(decoded[0].Timestamp) != len(TimeLayout) {
			t.Fatalf("appendRecords wrote %q: %v", lines, err)
		}
		withNow := m
		withNow.Timestamp = decoded[0].Timestamp
		if want := append(referenceJSON(t, withNow), '\n'); !bytes.Equal(lines, want) {
			t.Fatalf("appendRecords wrote %q, want %q", lines, want)
		}
	}
	strict := strictRecord(t, got)
	if len(m.Media) == 0 {
		r.Media = nil
	}
	valid := true
	for _, s := range append([]string{m.Role, m.Content, m.Timestamp, m.MessageID, m.RunID, m.FinishReason}, m.Media...) {
		valid = valid && utf8.ValidString(s)
	}
	if valid && (m.Event == nil || utf8.ValidString(*m.Event)) && !reflect.DeepEqual(strict, r) {
		t.Fatalf("strict parse\n got %#v\nwant %#v", strict, r)
	}
	var general Record
	if err := general.UnmarshalJSON(got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(general, strict) {
		t.Fatalf("UnmarshalJSON\n got %#v\nwant %#v", general, strict)
	}
	if fast, ok := fastRecord(got); ok && !reflect.DeepEqual(fast, strict) {
		t.Fatalf("fastRecord\n got %#v\nwant %#v", fast, strict)
	}
	decoded, err := DecodeRecords(append(got, '\n'))
	if err != nil || len(decoded) != 1 || !reflect.DeepEqual(decoded[0], strict) {
		t.Fatalf("DecodeRecords: %#v, %v; want %#v", decoded, err, strict)
	}
}

func TestRecordEncodeMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	ev := "run_started"
	empty := ""
	for _, m := range []mirrorRecord{
		{Role: "user", Content: "hi", Timestamp: "2026-03-15T14:30:00.123456", MessageID: "m-1"},
		{Role: "system", Content: "the run of message m-1 started", MessageID: "m-1", RunID: "r", Event: &ev},
		{Role: "assistant", Content: "You said: <b>&\"\\\n\x00\x7f\u2028\xff", FinishReason: "stop", Media: []string{"a", "<b>"}},
		{Event: &empty, Media: []string{""}},
		{},
	} {
		checkRecordEncode(t, m)
	}
}

// FuzzRecordEncode compares the record encoder with encoding/json on
// random records and parses its output with the strict parser and the
// package's own.
func FuzzRecordEncode(f *testing.F) {
	f.Add("user", "hello <b>&amp;</b>", "2026-03-15T14:30:00.123456", "m-1", "run-1", "", "", "", uint8(0), "", false)
	f.Add("system", "the run of message m-1 started", "", "m-1", "run-1", "", "", "", uint8(0), "run_started", true)
	f.Add("assistant", "\xff\u2029\x01\"\\", "t", "", "", "stop", "a.png", "\xfe", uint8(2), "", true)
	f.Fuzz(func(t *testing.T, role, content, ts, mid, rid, fr, media0, media1 string, nmedia uint8, event string, hasEvent bool) {
		m := mirrorRecord{Role: role, Content: content, Timestamp: ts, MessageID: mid, RunID: rid, FinishReason: fr}
		switch nmedia % 3 {
		case 1:
			m.Media = []string{media0}
		case 2:
			m.Media = []string{media0, media1}
		}
		if hasEvent {
			m.Event = &event
		}
		checkRecordEncode(t, m)
	})
}

// plainASCII agrees with a byte-by-byte check for every byte value at
// every position of strings of 1 to 17 bytes (both sides of the
// eight-byte loop), and appendString with encoding/json.
func TestPlainASCII(t *testing.T) {
	t.Parallel()
	slow := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				return false
			}
		}
		return true
	}
	for n := 1; n <= 17; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := bytes.Repeat([]byte{'a'}, n)
				b[pos] = byte(c)
				s := string(b)
				if got, want := plainASCII(s), slow(s); got != want {
					t.Fatalf("plainASCII(%q) = %v, want %v", s, got, want)
				}
				if got, want := appendString(nil, s), referenceJSON(t, mirrorRecord{Role: s}); !bytes.Contains(want, append([]byte(`{"role":`), got...)) {
					t.Fatalf("appendString(%q) = %s; encoding/json writes %s", s, got, want)
				}
			}
		}
	}
}

// EncodeRecordsAfter (record/local's journal, once per append on the
// message path) makes one allocation, the buffer: it once made a string
// of now's timestamp for the records without one (and set it in recs).
// Its lines are EncodeRecords' for the same records.
func TestEncodeRecordsAfterOneAllocation(t *testing.T) {
	recs := []Record{
		{Role: "user", Content: "hello", MessageID: "m-1", RunID: "run-1", Timestamp: "2026-03-15T14:30:00.123456"},
		{Role: "system", Content: "the run of message m-1 started", MessageID: "m-1", RunID: "run-1", Extra: map[string]any{"event": "run_started"}},
		{Role: "assistant", Content: "You said: hello", MessageID: "m-1", FinishReason: "stop", Media: []string{"a.png"}},
	}
	orig := slices.Clone(recs)
	payload, err := EncodeRecordsAfter("k:1\n", recs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(recs, orig) {
		t.Fatalf("EncodeRecordsAfter changed recs: %+v", recs)
	}
	lines, ok := bytes.CutPrefix(payload, []byte("k:1\n"))
	if !ok {
		t.Fatalf("payload %q", payload)
	}
	decoded, err := DecodeRecords(lines)
	if err != nil {
		t.Fatal(err)
	}
	now := decoded[1].Timestamp
	if len(now) != len(TimeLayout) || decoded[2].Timestamp != now {
		t.Fatalf("timestamps %q, %q: want now's, the same", now, decoded[2].Timestamp)
	}
	for i := range recs {
		if recs[i].Timestamp == "" {
			recs[i].Timestamp = now
		}
	}
	if want, err := EncodeRecords(recs); err != nil || !bytes.Equal(lines, want) {
		t.Fatalf("lines\n%s\nEncodeRecords writes\n%s (%v)", lines, want, err)
	}
	if testing.Short() {
		return
	}
	copy(recs, orig)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := EncodeRecordsAfter("k:1\n", recs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Fatalf("%v allocations per call, want 1", allocs)
	}
}
