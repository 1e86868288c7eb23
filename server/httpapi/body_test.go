package httpapi

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckJSONBody(t *testing.T) {
	for _, tc := range []struct {
		body, want string // want "" = accepted
	}{
		{``, ""},
		{" \n", ""},
		{`{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}`, ""},
		{`[1,"x",null]`, ""},
		{`{"a":"\ud800"}`, ""}, // an escaped lone surrogate is valid JSON (U+FFFD), as on the wire
		{`{"a":1,"a":1}`, `key "a" twice: each`},
		{`{"c":[{"x":1},{"y":1,"y":2}]}`, `key "y" twice in c[1]:`},
		{`{"é":1,"\u00e9":2}`, `key "é" twice: each`}, // the same key spelt two ways
		{"{\"a\":\"\xc3\"}", "not valid UTF-8 (first bad byte at offset 6)"},
		{"{\"a\":\"\xed\xa0\x80\"}", "not valid UTF-8"}, // a raw surrogate
		{`{"a":1} {"b":2}`, "must be one JSON object; something follows it (line 1, column 9)"},
		{`{"a":`, "must be a JSON object: line 1, column 6"},
		{strings.Repeat("[", 100) + strings.Repeat("]", 100), "nested deeper than 64"},
	} {
		err := CheckBody([]byte(tc.body))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q refused: %v", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
}

func TestDecode(t *testing.T) {
	type body struct {
		Name string `json:"name"`
		N    int    `json:"n"`
	}
	for _, tc := range []struct {
		body, want string // want "" = decoded
		tooLarge   bool
	}{
		{``, "", false},
		{`{"name":"a","n":2}`, "", false},
		{`{"name":"a","name":"b"}`, `key "name" twice`, false},
		{`{"nam":"a"}`, `unknown field "nam"`, false},
		{`{"n":"x"}`, "not the JSON object expected", false},
		{"{\"name\":\"\xff\"}", "not valid UTF-8", false},
		{`{"name":"` + strings.Repeat("x", 100) + `"}`, "longer than 64 bytes", true},
	} {
		var v body
		r := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
		err := Decode(r, 64, &v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q refused: %v", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		case tc.want != "" && errors.Is(err, ErrTooLarge) != tc.tooLarge:
			t.Errorf("%q: ErrTooLarge %v, want %v", tc.body, errors.Is(err, ErrTooLarge), tc.tooLarge)
		}
		if tc.body == `{"name":"a","n":2}` && (v.Name != "a" || v.N != 2) {
			t.Errorf("decoded %+v", v)
		}
	}
}
