package session

import (
	"bytes"
	"testing"
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
