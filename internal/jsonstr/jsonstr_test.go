package jsonstr

import (
	"bytes"
	"encoding/json"
	"testing"
)

// marshal is what encoding/json writes for s.
func marshal(t testing.TB, s string, escapeHTML bool) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

var samples = []string{"", "plain", `q"b\s/`, "<a href='x'>&amp;</a>", "\x00\x01\x1f\x7f", "\b\f\n\r\t",
	"caf\u00e9 \u2028\u2029 \U0001F600", "bad \xff\xfe utf8 \xe2\x82", "\xed\xa0\x80 surrogate"}

func TestAppendMatchesEncodingJSON(t *testing.T) {
	for _, s := range samples {
		for _, html := range []bool{true, false} {
			if got, want := Append(nil, s, html), marshal(t, s, html); !bytes.Equal(got, want) {
				t.Errorf("Append(%q, html=%v) = %s, encoding/json writes %s", s, html, got, want)
			}
		}
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, html := range []bool{true, false} {
			if got, want := Append([]byte("x"), s, html), marshal(t, s, html); !bytes.Equal(got[1:], want) {
				t.Fatalf("Append(%q, html=%v) = %s, encoding/json writes %s", s, html, got[1:], want)
			}
		}
	})
}
