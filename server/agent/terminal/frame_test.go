package terminal

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseFrame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		want Frame
		ok   bool
	}{
		{`{"type":"message","text":"hi"}`, Frame{Type: "message", Text: "hi"}, true},
		{`{"type":"message","text":"hi"}` + "\r\n", Frame{Type: "message", Text: "hi"}, true},
		{`  {"type": "message", "text": "", "media": ["/a.png", "/b.jpg"]}  `, Frame{Type: "message", Media: []string{"/a.png", "/b.jpg"}}, true},
		{`{"type":"message"}`, Frame{Type: "message"}, true},
		{`{"type":"message","text":null,"media":null}`, Frame{Type: "message"}, true},
		{`{"type":"message","text":"x","extra":{"a":1}}`, Frame{Type: "message", Text: "x"}, true},
		{`{"type":"progress","text":"Downloading..."}`, Frame{Type: "progress", Text: "Downloading..."}, true},
		{`{"type":"error","text":"Failed","code":"RENDER_FAIL"}`, Frame{Type: "error", Text: "Failed", Code: "RENDER_FAIL"}, true},
		{`{"type":"log","text":"x","level":"info"}`, Frame{Type: "log", Text: "x", Level: "info"}, true},
		{`{"type":"progress","text":"x","code":5}`, Frame{Type: "progress", Text: "x"}, true}, // code is not a progress field
		{`{"type":"message","text":"\u00fc \ud83d\ude00"}`, Frame{Type: "message", Text: "ü 😀"}, true},
		{"{\"type\":\"message\",\"text\":\"bad \xff\"}", Frame{Type: "message", Text: "bad \uFFFD"}, true},
		// Frames of an unknown type (Known false): dropped by the runner,
		// as nanobot ignores them (issue 11).
		{`{"type":null,"text":"x"}`, Frame{}, true},
		{`{"type":7}`, Frame{}, true},
		{`{"type":{"a":1},"text":"x"}`, Frame{}, true},
		{`{"type":"MESSAGE","text":"x"}`, Frame{Type: "MESSAGE"}, true},
		{`{"type":"weird","text":"x"}`, Frame{Type: "weird"}, true},
		{`{"type":"tool_call","name":"x","args":{}}`, Frame{Type: "tool_call"}, true},
		{`{"type":"","text":"x"}`, Frame{}, true},
		// A text that is not a string: the frame stands with the value.
		{`{"type":"message","text":5}`, Frame{Type: "message", Text: "5"}, true},
		{`{"type":"message","text":true}`, Frame{Type: "message", Text: "true"}, true},
		{`{"type":"message","text":1.50}`, Frame{Type: "message", Text: "1.50"}, true},
		{`{"type":"message","text": {"a" : [1, 2]}}`, Frame{Type: "message", Text: `{"a":[1,2]}`}, true},
		{`{"type":"error","text":404,"code":"x"}`, Frame{Type: "error", Text: "404", Code: "x"}, true},
		{`{"type":"message","text":5,"media":7}`, Frame{}, false},
		// termlink's delta: the text must be a string.
		{`{"type":"delta","text":"Hel"}`, Frame{Type: "delta", Text: "Hel"}, true},
		{`{"type":"delta","text":""}`, Frame{Type: "delta"}, true},
		{`{"type":"delta","text":" \n","media":5,"code":1}`, Frame{Type: "delta", Text: " \n"}, true},
		{`{"type":"delta"}`, Frame{Type: "delta", Problem: `delta frame without "text"`}, true},
		{`{"type":"delta","text":null}`, Frame{Type: "delta", Problem: `delta frame without "text"`}, true},
		{`{"type":"delta","text":5}`, Frame{Type: "delta", Problem: `delta frame whose "text" is not a string: 5`}, true},
		{`{"type":"delta","text":false}`, Frame{Type: "delta", Problem: `delta frame whose "text" is not a string: false`}, true},
		{`{"type":"delta","text":["a"]}`, Frame{Type: "delta", Problem: `delta frame whose "text" is not a string: ["a"]`}, true},
		{`{"type":"delta","text":{"t":"a"}}`, Frame{Type: "delta", Problem: `delta frame whose "text" is not a string: {"t":"a"}`}, true},
		{`{"type":"Delta","text":"x"}`, Frame{Type: "Delta"}, true},
		// Not frames: plain text.
		{``, Frame{}, false},
		{`hello`, Frame{}, false},
		{`{}`, Frame{}, false},
		{`{"text":"no type"}`, Frame{}, false},
		{`{"Type":"message","text":"x"}`, Frame{}, false},
		{`{"type":"message","media":"/a.png"}`, Frame{}, false},
		{`{"type":"message","media":[1]}`, Frame{}, false},
		{`{"type":"error","code":1}`, Frame{}, false},
		{`{"type":"log","level":["x"]}`, Frame{}, false},
		{`{"type":"message","text":"x"} trailing`, Frame{}, false},
		{`{"type":"message","text":"x"`, Frame{}, false},
		{`["type","message"]`, Frame{}, false},
		{`"message"`, Frame{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseFrame([]byte(tt.line))
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseFrame(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzParseFrame: ParseFrame never panics, keeps nothing but the type of
// a frame of an unknown type, returns valid UTF-8, and a frame it returns survives encoding and
// parsing again.
func FuzzParseFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"message","text":"hi","media":["/a.png"]}`,
		`{"type":"progress","text":"x"}`,
		`{"type":"error","text":"x","code":"C"}`,
		`{"type":"log","text":"x","level":"warning"}`,
		`{"type":"message","text":null}`,
		`{"type":7}`,
		`plain text`,
		"{\"type\":\"message\",\"text\":\"\xff\"}",
		`{"type":"message","text":"a","type":"error"}`,
		"{\"type\":\"message\",\"text\":{\"a\":\"\xff\"}}",
		`{"type":"message","text":[1, 2.50, true]}`,
		`{"type":"delta","text":"Hel"}`,
		`{"type":"delta"}`,
		`{"type":"delta","text":5}`,
		"{\"type\":\"delta\",\"text\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, ok := ParseFrame(line)
		if !ok {
			if !reflect.DeepEqual(fr, Frame{}) {
				t.Fatalf("rejected line gave frame %+v", fr)
			}
			return
		}
		if !fr.Known() && !reflect.DeepEqual(fr, Frame{Type: fr.Type}) {
			t.Fatalf("frame of unknown type %q kept fields: %+v", fr.Type, fr)
		}
		if fr.Type == FrameDelta && (fr.Media != nil || fr.Code != "" || fr.Level != "") {
			t.Fatalf("delta frame with fields beyond its text: %+v", fr)
		}
		if fr.Problem != "" {
			if fr.Type != FrameDelta || fr.Text != "" || !strings.HasPrefix(fr.Problem, "delta frame ") {
				t.Fatalf("frame with a problem: %+v", fr)
			}
			return
		}
		if !utf8.ValidString(fr.Type) {
			t.Fatalf("invalid UTF-8 type %q", fr.Type)
		}
		for _, s := range append([]string{fr.Text, fr.Code, fr.Level}, fr.Media...) {
			if !utf8.ValidString(s) {
				t.Fatalf("invalid UTF-8 %q", s)
			}
		}
		b, err := json.Marshal(fr)
		if err != nil {
			t.Fatal(err)
		}
		again, ok := ParseFrame(b)
		if !ok || !reflect.DeepEqual(normal(again), normal(fr)) {
			t.Fatalf("round trip of %s: %+v %v, want %+v", b, again, ok, fr)
		}
	})
}

// normal makes an empty media list nil, as omitempty drops it.
func normal(f Frame) Frame {
	if len(f.Media) == 0 {
		f.Media = nil
	}
	return f
}
