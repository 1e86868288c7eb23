package nuum

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

func TestParseFrame(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		kind kind
		err  bool
	}{
		// The spec's frames.
		{`{"type":"system","subtype":"init","session_id":"nuum_01JD","version":"0.1.0","tools":["read"]}`, kindInit, false},
		{`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"model":"m"},"session_id":"s"}`, kindAssistant, false},
		{`{"type":"system","subtype":"tool_result","tool_result":{"type":"tool_result","tool_use_id":"call_123","content":"file"}}`, kindToolResult, false},
		{`{"type":"result","subtype":"success","duration_ms":1234,"is_error":false,"num_turns":3,"session_id":"s","result":"Done!"}`, kindResult, false},
		{`{"type":"system","subtype":"turn_accepted","session_id":"s","timestamp":"2026-02-05T15:30:00.000Z"}`, kindTurnAccepted, false},
		{`{"type":"system","subtype":"tasks","tasks":[]}`, kindOther, false},
		{`{"type":"system","subtype":"error","message":"Something went wrong"}`, kindError, false},
		{`{"type":"system","subtype":"queued","position":1}`, kindQueued, false},
		{`{"type":"system","subtype":"injected","message_count":2}`, kindInjected, false},
		{`{"type":"system","subtype":"status_response","running":true}`, kindOther, false},
		{`{"type":"system","subtype":"heartbeat_ack"}`, kindHeartbeatAck, false},
		{`{"type":"system","subtype":"interrupted"}`, kindInterrupted, false},
		// Claude Code stream-json.
		{`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"}]}]}}`, kindUser, false},
		{`{"type":"result","subtype":"error_max_turns","is_error":true}`, kindResult, false},
		// Bare types, tolerated.
		{`{"type":"heartbeat_ack"}`, kindHeartbeatAck, false},
		{`{"type":"turn_accepted"}`, kindTurnAccepted, false},
		// Odd field types do not cost the frame.
		{`{"type":"result","subtype":7,"is_error":"yes","result":{"x":1}}`, kindResult, false},
		{"  {\"type\":\"assistant\"}\r", kindAssistant, false},
		// Not frames.
		{``, 0, true},
		{`not json`, 0, true},
		{`[1,2]`, 0, true},
		{`{"type":42}`, 0, true},
		{`{"no_type":1}`, 0, true},
		{`{"type":"x"`, 0, true},
	} {
		f, err := parseFrame([]byte(tc.line))
		if (err != nil) != tc.err {
			t.Errorf("%q: err %v", tc.line, err)
			continue
		}
		if err == nil && f.kind() != tc.kind {
			t.Errorf("%q: kind %d, want %d", tc.line, f.kind(), tc.kind)
		}
	}
}

func TestFrameFields(t *testing.T) {
	t.Parallel()
	f, _ := parseFrame([]byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"a"},{"type":"tool_use","id":"c1","name":"read","input":{}},"junk",{"type":"text","text":5}]}}`))
	b := f.content()
	if len(b) != 4 || b[0].Text != "a" || b[1].Name != "read" || b[1].ID != "c1" || b[2].Type != "" || b[3].Text != "" {
		t.Errorf("content %+v", b)
	}
	f, _ = parseFrame([]byte(`{"type":"user","message":{"content":"plain"}}`))
	if b := f.content(); len(b) != 1 || b[0].Text != "plain" {
		t.Errorf("string content %+v", b)
	}
	f, _ = parseFrame([]byte(`{"type":"system","subtype":"tool_result","tool_result":{"tool_use_id":"c1","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}],"is_error":true}}`))
	if tr, ok := f.toolResult(); !ok || tr.ToolUseID != "c1" || !tr.IsError || textOf(tr.Content) != "x y" {
		t.Errorf("tool result %+v %v", tr, ok)
	}
	for _, tc := range []struct{ line, want string }{
		{`{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["a",{"message":"b"}]}`, "a; b"},
		{`{"type":"result","subtype":"error","error":{"message":"c"}}`, "c"},
		{`{"type":"result","subtype":"error","result":"d","errors":["e"]}`, "d"},
		{`{"type":"system","subtype":"error","message":"f"}`, "f"},
		{`{"type":"result","subtype":"error"}`, ""},
	} {
		f, _ := parseFrame([]byte(tc.line))
		if got := f.errorDetail(); got != tc.want {
			t.Errorf("%s: detail %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestMapResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line, text, lastErr string
		reason, reply       string
	}{
		// The result's text is the answer; the assistant steps only when it
		// has none (issue 11).
		{`{"type":"result","subtype":"success","result":"r"}`, "step one\nr", "", "stop", "r"},
		{`{"type":"result","subtype":"success","result":"r"}`, "", "", "stop", "r"},
		{`{"type":"result","subtype":"success"}`, "step one\nstep two", "", "stop", "step one\nstep two"},
		{`{"type":"result","subtype":"success","result":" \n"}`, "collected", "", "stop", "collected"},
		{`{"type":"result","result":"r"}`, "", "", "stop", "r"},
		{`{"type":"result","subtype":"success","is_error":true,"result":"API Error: 529"}`, "x", "", "error", "agent error: API Error: 529"},
		{`{"type":"result","subtype":"cancelled"}`, "partial", "", "cancelled", "cancelled"},
		{`{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":10}`, "", "", "error", "agent stopped: it reached its maximum number of turns"},
		{`{"type":"result","subtype":"error_during_execution","is_error":true}`, "", "tool crashed", "error", "agent failed during execution: tool crashed"},
		{`{"type":"result","subtype":"error"}`, "", "", "error", "agent error"},
	} {
		f, err := parseFrame([]byte(tc.line))
		if err != nil {
			t.Fatal(err)
		}
		res := mapResult(f, tc.text, tc.lastErr)
		if res.FinishReason != tc.reason || res.Text != tc.reply {
			t.Errorf("%s: %+v, want %s %q", tc.line, res, tc.reason, tc.reply)
		}
	}
}

func TestLineReader(t *testing.T) {
	t.Parallel()
	in := "short\r\n" + strings.Repeat("x", 40) + "\n\nexactly16bytes!!\n" + strings.Repeat("y", 17) + "\nlast"
	for _, name := range []string{"whole", "one byte at a time"} {
		var r io.Reader = strings.NewReader(in)
		if name != "whole" {
			r = iotest.OneByteReader(r)
		}
		lr := newLineReader(r, 16)
		var got []string
		for {
			line, skipped, err := lr.next()
			if err != nil {
				if err != io.EOF {
					t.Fatal(err)
				}
				break
			}
			if skipped > 0 {
				got = append(got, "skip")
				continue
			}
			got = append(got, string(line))
		}
		want := []string{"short", "skip", "", "exactly16bytes!!", "skip", "last"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: lines %q, want %q", name, got, want)
		}
	}
}

func FuzzParseFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"system","subtype":"init","session_id":"nuum_01JD"}`,
		`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"c","name":"read","input":{}}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"c","content":[{"type":"text","text":"x"}]}]}}`,
		`{"type":"system","subtype":"tool_result","tool_result":{"tool_use_id":"c","content":"x","is_error":true}}`,
		`{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["a",{"message":"b"}]}`,
		`{"type":"system","subtype":"injected","message_count":1e300}`,
		`{"type":"tool_result","content":null}`,
		"not json", "", "{", `{"type":"x","message":"str"}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}},"parent_tool_use_id":null}`,
		`{"type":"stream_event","event":{"type":"content_block_start","index":3,"content_block":{"type":"text","text":"x"}},"parent_tool_use_id":"t"}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":-1e99,"delta":"x"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, err := parseFrame(line)
		if err != nil {
			return
		}
		if fr.Type == "" {
			t.Fatal("frame without a type")
		}
		if ev, ok := fr.streamEvent(); ok {
			if ev.Index < 0 || !utf8.ValidString(ev.Text) || !utf8.ValidString(ev.Type) {
				t.Fatalf("stream event %+v", ev)
			}
			if ev.Type != "content_block_delta" && ev.DeltaType != "" {
				t.Fatalf("delta type outside a delta: %+v", ev)
			}
		}
		_ = fr.kind()
		for _, b := range fr.content() {
			_ = textOf(b.Content)
		}
		if tr, ok := fr.toolResult(); ok {
			_ = preview(textOf(tr.Content), eventPreviewRunes)
		}
		_ = fr.integer("message_count")
		res := mapResult(fr, "", "")
		switch res.FinishReason {
		case "stop", "error", "cancelled":
		default:
			t.Fatalf("finish reason %q", res.FinishReason)
		}
	})
}

func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbb\r\n"+strings.Repeat("c", 40)+"\nlast"), 8)
	f.Add([]byte("\n\n\n"), 1)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 1 || max > 1<<12 {
			return
		}
		lr := newLineReader(iotest.HalfReader(bytes.NewReader(data)), max)
		total := 0
		for i := 0; ; i++ {
			if i > len(data)+1 {
				t.Fatal("more lines than bytes")
			}
			line, skipped, err := lr.next()
			if err != nil {
				break
			}
			if len(line) > max {
				t.Fatalf("line of %d bytes, max %d", len(line), max)
			}
			if bytes.IndexByte(line, '\n') >= 0 {
				t.Fatal("newline inside a line")
			}
			total += len(line) + skipped
		}
		if total > len(data) {
			t.Fatalf("read %d bytes of %d", total, len(data))
		}
	})
}

func TestStreamEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want streamEvent
		ok   bool
	}{
		{`{"type":"stream_event","event":{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Hel"}},"session_id":"s","parent_tool_use_id":null,"uuid":"u"}`,
			streamEvent{Type: "content_block_delta", Index: 2, DeltaType: "text_delta", Text: "Hel"}, true},
		{`{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"x"}}}`,
			streamEvent{Type: "content_block_start", BlockType: "text", Text: "x"}, true},
		{`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}}`,
			streamEvent{Type: "content_block_delta", DeltaType: "input_json_delta"}, true},
		{`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}},"parent_tool_use_id":"toolu_1"}`,
			streamEvent{Type: "content_block_delta", DeltaType: "text_delta", Text: "x", Nested: true}, true},
		{`{"type":"stream_event","event":{"type":"content_block_delta","index":"1","delta":{"type":"text_delta","text":5}}}`,
			streamEvent{Type: "content_block_delta", DeltaType: "text_delta"}, true},
		{`{"type":"stream_event","event":{"type":"message_stop"}}`, streamEvent{Type: "message_stop"}, true},
		{`{"type":"stream_event","event":"x"}`, streamEvent{}, false},
		{`{"type":"stream_event"}`, streamEvent{}, false},
		{`{"type":"stream_event","event":{"index":1}}`, streamEvent{}, false},
	} {
		f, err := parseFrame([]byte(tc.line))
		if err != nil || f.kind() != kindStreamEvent {
			t.Fatalf("%s: %v, kind %v", tc.line, err, f.kind())
		}
		got, ok := f.streamEvent()
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}
