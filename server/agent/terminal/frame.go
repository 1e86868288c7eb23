package terminal

import (
	"bytes"
	"encoding/json"
	"strings"

	"termlink/link"
)

// Frame types of a rich-mode agent's stdout.
const (
	FrameMessage  = "message"
	FrameProgress = "progress"
	FrameError    = "error"
	FrameLog      = "log"
	// FrameDelta is termlink's extension {"type":"delta","text":"..."}:
	// a piece of the reply as the agent writes it, streamed to devices
	// that listed "stream" (see the package doc).
	FrameDelta = "delta"
	// FrameQuestion is termlink's extension {"type":"question","id":..,
	// "text":..,"options":[{"id":..,"label":..}],"timeout_seconds":N}:
	// a question for the person at the device, answered on stdin (see
	// the package doc). Only for an agent configured with "questions".
	FrameQuestion = "question"
)

// Frame is one JSONL line a rich-mode agent writes to stdout.
type Frame struct {
	Type  string   `json:"type"`            // FrameMessage, FrameProgress, FrameError, FrameLog or FrameDelta
	Text  string   `json:"text"`            // every type
	Media []string `json:"media,omitempty"` // message: files to attach
	Code  string   `json:"code,omitempty"`  // error: machine-readable code
	Level string   `json:"level,omitempty"` // log: "debug" (default), "info", "warning", "error"
	// ID, Options and TimeoutSeconds are a question frame's.
	ID             string        `json:"id,omitempty"`
	Options        []link.Option `json:"options,omitempty"`
	TimeoutSeconds int           `json:"timeout_seconds,omitempty"`
	// Problem says why a delta or question frame cannot be used (its "text" is
	// missing, null or not a string); Text is then empty. The runner
	// logs it and drops the frame.
	Problem string `json:"-"`
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
//
// A "delta" frame (termlink's extension) must carry its text as a string:
// one whose "text" is missing, null or of another JSON type is returned
// with Problem saying so and no Text (a piece of a reply cannot be
// guessed; the frame is dropped, the run goes on).
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
	if f.Type == FrameDelta {
		f.Problem = deltaText(raw["text"], &f.Text)
		return f, true
	}
	if f.Type == FrameQuestion {
		f.Problem = questionFields(raw, &f)
		return f, true
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

// deltaText decodes a delta frame's "text" into text, or says what is
// wrong with it.
func deltaText(raw json.RawMessage, text *string) string {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return `delta frame without "text"`
	}
	if v[0] != '"' || json.Unmarshal(v, text) != nil {
		*text = ""
		return `delta frame whose "text" is not a string: ` + preview(compactJSON(v))
	}
	return ""
}

// questionFields decodes a question frame's fields into f, or says what
// is wrong with them (link's bounds are the router's to check).
func questionFields(raw map[string]json.RawMessage, f *Frame) string {
	switch {
	case !field(raw, "id", &f.ID) || f.ID == "":
		return `question frame without a string "id"`
	case !field(raw, "text", &f.Text) || f.Text == "":
		return `question frame without a string "text"`
	case !field(raw, "options", &f.Options):
		return `question frame whose "options" is not a list of {"id","label"} objects`
	case !field(raw, "timeout_seconds", &f.TimeoutSeconds) || f.TimeoutSeconds < 0:
		return `question frame whose "timeout_seconds" is not a positive whole number`
	}
	return ""
}

// Known tells whether f is of one of the spec's four frame types or
// termlink's delta.
func (f Frame) Known() bool {
	switch f.Type {
	case FrameMessage, FrameProgress, FrameError, FrameLog, FrameDelta, FrameQuestion:
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
