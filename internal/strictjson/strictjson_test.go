package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	n, err := Parse([]byte(`{"b": 1, "a": [true, null, "x", 1.50], "b": 2, "c": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	if n.Kind != Object || strings.Join(n.Keys, ",") != "b,a,c" || strings.Join(n.Dups, ",") != "b" {
		t.Fatalf("keys %q dups %q", n.Keys, n.Dups)
	}
	if n.Vals[0].Num != "1" {
		t.Errorf("first b wins: %v", n.Vals[0].Num)
	}
	a := n.Vals[1]
	if a.Kind != Array || len(a.Elems) != 4 || !a.Elems[0].Bool || a.Elems[1].Kind != Null || a.Elems[2].Str != "x" || a.Elems[3].Num != "1.50" {
		t.Errorf("array %+v", a)
	}
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		in            string
		line, col     int
		eof, trailing bool
		msg           string
	}{
		{"{\n  \"display\": {,}\n}", 2, 15, false, false, "invalid character ','"},
		{"", 1, 1, true, false, "unexpected end of JSON input"},
		{`{"a": 1`, 1, 8, true, false, "unexpected end"},
		{`{} {}`, 1, 4, false, true, "after top-level value"},
		{"{\"é\": x}", 1, 7, false, false, "invalid character 'x'"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %v, want a *SyntaxError", tt.in, err)
			continue
		}
		if se.Line != tt.line || se.Column != tt.col || se.EOF != tt.eof || se.Trailing != tt.trailing || !strings.Contains(se.Msg, tt.msg) {
			t.Errorf("Parse(%q) = %+v, want line %d column %d eof %v trailing %v %q", tt.in, se, tt.line, tt.col, tt.eof, tt.trailing, tt.msg)
		}
		var js *json.SyntaxError
		if !tt.eof && !errors.As(err, &js) {
			t.Errorf("Parse(%q): encoding/json's error is not kept: %v", tt.in, err)
		}
	}
}

func TestDepth(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2)
	if _, err := Parse([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("deep: %v", err)
	}
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := Parse([]byte(ok)); err != nil {
		t.Fatalf("%d levels: %v", MaxDepth, err)
	}
}

// FuzzParse: any input parses or gets an error, never a panic; what
// parses re-encodes to JSON encoding/json accepts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `[1,"x",null,true,{"b":[]}]`, `"x"`, `{`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := Parse(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("parsed invalid JSON %q", data)
		}
		if n.Kind == Object && len(n.Keys) != len(n.Vals) {
			t.Fatalf("keys %d vals %d", len(n.Keys), len(n.Vals))
		}
	})
}
