package terminal

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Frame types of a rich-mode agent's stdout.
const (
	FrameMessage  = "message"
	FrameProgress = "progress"
	FrameError    = "error"
	FrameLog      = "log"
)

// Frame is one JSONL line a rich-mode agent writes to stdout.
type Frame struct {
	Type  string   `json:"type"`            // FrameMessage, FrameProgress, FrameError or FrameLog
	Text  string   `json:"text"`            // every type
	Media []string `json:"media,omitempty"` // message: files to attach
	Code  string   `json:"code,omitempty"`  // error: machine-readable code
	Level string   `json:"level,omitempty"` // log: "debug" (default), "info", "warning", "error"
}

// ParseFrame parses one stdout line (with or without its line ending). It
// reports false for a line that is not a frame, which is the agent's plain
// text: not a JSON object, no "type" key, or a frame of the spec's four
// types with a known field of the wrong JSON type. A "text" that is not a
// string (a number, a boolean, an array, an object) is not that: the frame
// stands and its Text is the value's JSON text (`5`, `true`, `{"a":1}`), so
// the user sees the value rather than the raw line. A JSON object with a
// "type" key of another value (a future frame type, "type": null, a
// non-string) is a frame all the same, returned with only its Type set
// ("" when it is not a string), for which Known is false: callers drop
// it, as nanobot does, rather than show raw JSON. Keys are matched exactly
// (case-sensitive); unknown keys are ignored; null counts as absent.
func ParseFrame(line []byte) (Frame, bool) {
	line = bytes.TrimSpace(line)
	if len(line) < 2 || line[0] != '{' {
		return Frame{}, false
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Frame{}, false
	}
	rawType, has := raw["type"]
	if !has {
		return Frame{}, false
	}
	var f Frame
	if json.Unmarshal(rawType, &f.Type) != nil {
		return Frame{}, true // a type that is not a string: unknown
	}
	if !f.Known() {
		return Frame{Type: f.Type}, true
	}
	ok := true
	if !field(raw, "text", &f.Text) {
		f.Text = compactJSON(raw["text"])
	}
	switch f.Type {
	case FrameMessage:
		ok = ok && field(raw, "media", &f.Media)
	case FrameError:
		ok = ok && field(raw, "code", &f.Code)
	case FrameLog:
		ok = ok && field(raw, "level", &f.Level)
	}
	if !ok {
		return Frame{}, false
	}
	return f, true
}

// Known tells whether f is of one of the spec's four frame types.
func (f Frame) Known() bool {
	switch f.Type {
	case FrameMessage, FrameProgress, FrameError, FrameLog:
		return true
	}
	return false
}

// field decodes raw[key] into v; an absent key or null leaves v as it is.
// It reports false when the value has the wrong type.
func field(raw map[string]json.RawMessage, key string, v any) bool {
	msg, has := raw[key]
	if !has {
		return true
	}
	return json.Unmarshal(msg, v) == nil
}

// compactJSON is v's JSON text without insignificant space, invalid UTF-8
// replaced as the decoder replaces it in strings.
func compactJSON(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		b.Reset()
		b.Write(bytes.TrimSpace(v))
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}
