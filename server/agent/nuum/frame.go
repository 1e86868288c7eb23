package nuum

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// kind is what a stdout frame means to the runner.
type kind int

const (
	kindOther        kind = iota // understood or not, nothing to do (tasks, status_response, ...)
	kindInit                     // system/init
	kindHeartbeatAck             // system/heartbeat_ack
	kindTurnAccepted             // system/turn_accepted
	kindAssistant                // assistant message: text and tool_use blocks
	kindUser                     // user message: tool_result blocks (Claude Code stream-json)
	kindToolResult               // system/tool_result
	kindResult                   // result: ends a turn
	kindInterrupted              // system/interrupted
	kindQueued                   // system/queued
	kindInjected                 // system/injected
	kindError                    // system/error
	kindStreamEvent              // stream_event: a partial message (Claude Code's --include-partial-messages)
)

// frame is one line the agent wrote on stdout. It is decoded leniently: only
// "type" must be a string; a field of an unexpected JSON type reads as
// absent, so one odd field never costs the whole frame.
type frame struct {
	Type      string
	Subtype   string
	SessionID string
	fields    map[string]json.RawMessage
}

// errNotFrame is wrapped by parseFrame's errors.
var errNotFrame = errors.New("not a protocol frame")

// parseFrame decodes one stdout line (without its newline).
func parseFrame(line []byte) (frame, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return frame{}, fmt.Errorf("%w: not a JSON object", errNotFrame)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return frame{}, fmt.Errorf("%w: %v", errNotFrame, err)
	}
	f := frame{fields: fields}
	var ok bool
	if f.Type, ok = rawString(fields["type"]); !ok || f.Type == "" {
		return frame{}, fmt.Errorf(`%w: no "type" string`, errNotFrame)
	}
	f.Subtype, _ = rawString(fields["subtype"])
	f.SessionID, _ = rawString(fields["session_id"])
	return f, nil
}

// kind classifies f. Besides the spec's shapes it accepts the bare types
// "heartbeat_ack", "turn_accepted", "interrupted" and "tool_result".
func (f frame) kind() kind {
	switch f.Type {
	case "assistant":
		return kindAssistant
	case "user":
		return kindUser
	case "result":
		return kindResult
	case "heartbeat_ack":
		return kindHeartbeatAck
	case "turn_accepted":
		return kindTurnAccepted
	case "interrupted":
		return kindInterrupted
	case "tool_result":
		return kindToolResult
	case "stream_event":
		return kindStreamEvent
	case "system":
		switch f.Subtype {
		case "init":
			return kindInit
		case "heartbeat_ack":
			return kindHeartbeatAck
		case "turn_accepted":
			return kindTurnAccepted
		case "tool_result":
			return kindToolResult
		case "interrupted":
			return kindInterrupted
		case "queued":
			return kindQueued
		case "injected":
			return kindInjected
		case "error":
			return kindError
		}
	}
	return kindOther
}

// str returns the string field key, "" when absent or not a string.
func (f frame) str(key string) string {
	s, _ := rawString(f.fields[key])
	return s
}

// boolean returns the boolean field key, false when absent or not a bool.
func (f frame) boolean(key string) bool {
	var b bool
	if raw := f.fields[key]; raw != nil && json.Unmarshal(raw, &b) == nil {
		return b
	}
	return false
}

// integer returns the integer field key, 0 when absent or not a number.
func (f frame) integer(key string) int {
	var n float64
	if raw := f.fields[key]; raw != nil && json.Unmarshal(raw, &n) == nil && n >= -1e9 && n <= 1e9 {
		return int(n)
	}
	return 0
}

// content returns the content blocks of an assistant or user message.
func (f frame) content() []block {
	var msg map[string]json.RawMessage
	if json.Unmarshal(f.fields["message"], &msg) != nil {
		return nil
	}
	return blocks(msg["content"])
}

// toolResult returns the tool_result block of a system/tool_result frame
// (or the frame itself when its type is "tool_result").
func (f frame) toolResult() (block, bool) {
	if f.Type == "tool_result" {
		return decodeBlock(mustRaw(f.fields)), true
	}
	raw := f.fields["tool_result"]
	if raw == nil {
		return block{}, false
	}
	b := decodeBlock(raw)
	return b, true
}

// errorDetail is what an error result or system/error says went wrong: the
// "result" string, else the "errors" list, else "error", else "message".
func (f frame) errorDetail() string {
	if s := f.str("result"); s != "" {
		return s
	}
	var list []json.RawMessage
	if json.Unmarshal(f.fields["errors"], &list) == nil && len(list) > 0 {
		parts := make([]string, 0, len(list))
		for _, raw := range list {
			if s := textOf(raw); s != "" {
				parts = append(parts, s)
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, "; ")
		}
	}
	if s := textOf(f.fields["error"]); s != "" {
		return s
	}
	return f.str("message")
}

// streamEvent is the part of a stream_event frame the runner uses: the
// Anthropic streaming event it wraps,
//
//	{"type":"stream_event","event":{"type":"content_block_delta","index":0,
//	  "delta":{"type":"text_delta","text":"Hel"}},"session_id":..,"parent_tool_use_id":null,"uuid":..}
type streamEvent struct {
	Type      string // message_start, content_block_start, content_block_delta, content_block_stop, ...
	Index     int    // the content block's index in its message
	BlockType string // content_block_start: the block's type ("text", "tool_use", "thinking")
	DeltaType string // content_block_delta: "text_delta", "input_json_delta", ...
	Text      string // a text_delta's text; a text block's start text
	Nested    bool   // parent_tool_use_id is set: a subagent's message, not the reply
}

// streamEvent decodes a stream_event frame's event; false when it has
// none (not an object, or no "type" string).
func (f frame) streamEvent() (streamEvent, bool) {
	var ev map[string]json.RawMessage
	if json.Unmarshal(f.fields["event"], &ev) != nil {
		return streamEvent{}, false
	}
	var e streamEvent
	var ok bool
	if e.Type, ok = rawString(ev["type"]); !ok {
		return streamEvent{}, false
	}
	var index float64
	if json.Unmarshal(ev["index"], &index) == nil && index >= 0 && index <= 1e9 {
		e.Index = int(index)
	}
	if parent, ok := rawString(f.fields["parent_tool_use_id"]); ok && parent != "" {
		e.Nested = true
	}
	switch e.Type {
	case "content_block_start":
		b := decodeBlock(ev["content_block"])
		e.BlockType, e.Text = b.Type, b.Text
	case "content_block_delta":
		var d map[string]json.RawMessage
		if json.Unmarshal(ev["delta"], &d) == nil {
			e.DeltaType, _ = rawString(d["type"])
			e.Text, _ = rawString(d["text"])
		}
	}
	return e, true
}

// block is one content block.
type block struct {
	Type      string
	Text      string
	ID        string
	Name      string
	ToolUseID string
	Content   json.RawMessage // tool_result: a string or a list of blocks
	IsError   bool
}

func blocks(raw json.RawMessage) []block {
	if s, ok := rawString(raw); ok {
		return []block{{Type: "text", Text: s}}
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil
	}
	out := make([]block, 0, len(list))
	for _, r := range list {
		out = append(out, decodeBlock(r))
	}
	return out
}

func decodeBlock(raw json.RawMessage) block {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return block{}
	}
	var b block
	b.Type, _ = rawString(m["type"])
	b.Text, _ = rawString(m["text"])
	b.ID, _ = rawString(m["id"])
	b.Name, _ = rawString(m["name"])
	b.ToolUseID, _ = rawString(m["tool_use_id"])
	b.Content = m["content"]
	_ = json.Unmarshal(m["is_error"], &b.IsError)
	return b
}

func mustRaw(m map[string]json.RawMessage) json.RawMessage {
	b, _ := json.Marshal(m)
	return b
}

func rawString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// textOf renders a tool result's content or an error value as text: a
// string as is, text blocks joined, an object's "message" or "text", and
// anything else as compact JSON.
func textOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if s, ok := rawString(raw); ok {
		return s
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		parts := make([]string, 0, len(list))
		for _, r := range list {
			if s := textOf(r); s != "" {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, " ")
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil {
		for _, k := range []string{"text", "message"} {
			if s, ok := rawString(m[k]); ok {
				return s
			}
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		return buf.String()
	}
	return string(raw)
}

// lineReader reads newline-terminated lines of at most max bytes. A longer
// line is skipped whole, however long it is, and reported by its length.
type lineReader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	size := 64 << 10
	if max+1 < size {
		size = max + 1
	}
	if size < 16 {
		size = 16
	}
	return &lineReader{br: bufio.NewReaderSize(r, size), max: max}
}

// next returns the next line without its "\n" or "\r\n". The line is valid
// until the next call. A line longer than max comes back as (nil, its
// length, nil). A last line without a newline is returned before the error.
func (l *lineReader) next() (line []byte, skipped int, err error) {
	if cap(l.buf) > 256<<10 {
		l.buf = nil // do not keep a long line's buffer around
	}
	l.buf = l.buf[:0]
	for {
		frag, err := l.br.ReadSlice('\n')
		n := len(frag)
		if n > 0 && frag[n-1] == '\n' {
			n--
		}
		switch {
		case skipped > 0:
			skipped += len(frag)
		case len(l.buf)+n > l.max:
			skipped = len(l.buf) + len(frag)
			l.buf = l.buf[:0]
		default:
			l.buf = append(l.buf, frag...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if skipped > 0 {
			return nil, skipped, nil
		}
		if err == nil {
			return bytes.TrimSuffix(bytes.TrimSuffix(l.buf, []byte("\n")), []byte("\r")), 0, nil
		}
		if len(l.buf) > 0 {
			return bytes.TrimSuffix(l.buf, []byte("\r")), 0, nil
		}
		return nil, 0, err
	}
}
