package notices

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"termlink/server/httpapi"
)

// FuzzCheckJSONBody: an accepted body is valid UTF-8, one JSON value with
// no key twice in any object (checked here with encoding/json's token
// reader), and the notice parser refuses whatever the policy refuses.
func FuzzCheckJSONBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `[{"a":1},{"a":1}]`, "{\"a\":\"\xff\"}", `{"a":1}x`, `{"text":"hi"}`, `{"text":"hi","text":"ho"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := httpapi.CheckBody(body)
		if err != nil {
			if _, perr := parseNoticeRequest(body, true, time.Now()); perr == nil {
				t.Fatalf("the notice parser took %q, which the body policy refuses: %v", body, err)
			}
			return
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return
		}
		if !utf8.Valid(body) || !json.Valid(body) {
			t.Fatalf("accepted %q: not valid UTF-8 JSON", body)
		}
		if hasDuplicateKey(t, body) {
			t.Fatalf("accepted %q: a key appears twice", body)
		}
	})
}

// hasDuplicateKey walks body's tokens, keeping each open object's keys.
func hasDuplicateKey(t *testing.T, body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]bool
		expect bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("token reader: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				if top != nil && top.object {
					top.expect = true
				}
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, expect: true})
			case '[':
				if top != nil && top.object {
					top.expect = true
				}
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if top != nil && top.object {
			if top.expect {
				k := tok.(string)
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.expect = false
			} else {
				top.expect = true
			}
		}
	}
}

// Issue 22, row 9: the notice parser itself (agents' and the API's one entry)
// refuses what the device wire refuses, with the reason.
func TestParseNoticeRequestStrict(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct{ body, want string }{
		{`{"text":"hello","text":"bye"}`, `key "text" twice: each`},
		{`{"text":"hi","tags":{"site":"a","site":"b"}}`, `key "site" twice in tags:`},
		{"{\"text\":\"caf\xe9\"}", "not valid UTF-8 (first bad byte at offset 12)"},
	} {
		if _, err := parseNoticeRequest([]byte(tc.body), true, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
}
