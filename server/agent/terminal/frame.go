package terminal

import (
	"bytes"
	"encoding/json"
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
// reports false for a line that is not a frame: not a JSON object, no
// "type" string, a type other than the four of the spec, or a known field
// of the wrong JSON type. Such a line is the agent's plain text. Keys are
// matched exactly (case-sensitive); unknown keys are ignored; null counts
// as absent.
func ParseFrame(line []byte) (Frame, bool) {
	line = bytes.TrimSpace(line)
	if len(line) < 2 || line[0] != '{' {
		return Frame{}, false
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Frame{}, false
	}
	var f Frame
	if !field(raw, "type", &f.Type) {
		return Frame{}, false
	}
	switch f.Type {
	case FrameMessage, FrameProgress, FrameError, FrameLog:
	default:
		return Frame{}, false
	}
	ok := field(raw, "text", &f.Text)
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

// field decodes raw[key] into v; an absent key or null leaves v as it is.
// It reports false when the value has the wrong type.
func field(raw map[string]json.RawMessage, key string, v any) bool {
	msg, has := raw[key]
	if !has {
		return true
	}
	return json.Unmarshal(msg, v) == nil
}
