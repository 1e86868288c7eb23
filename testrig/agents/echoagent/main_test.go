package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func frames(t *testing.T, out string) []map[string]any {
	t.Helper()
	var fs []map[string]any
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var f map[string]any
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			f = map[string]any{"plain": line}
		}
		fs = append(fs, f)
	}
	return fs
}

func TestRun(t *testing.T) {
	t.Setenv("ECHOAGENT_TEST_VAR", "v1")
	tests := []struct {
		text   string
		opt    options
		code   int
		want   []map[string]any
		stderr string
	}{
		{text: "hello 'there'", want: []map[string]any{{"type": "message", "text": "You said: hello 'there'"}}},
		{text: "hi", opt: options{progress: true}, want: []map[string]any{
			{"type": "progress", "text": "thinking"}, {"type": "message", "text": "You said: hi"}}},
		{text: "hi", opt: options{plain: true}, want: []map[string]any{{"plain": "You said: hi"}}},
		{text: "/error", code: 1, want: []map[string]any{{"type": "error", "text": "requested error", "code": "ECHO_ERROR"}}},
		{text: "/exit 7", code: 7, stderr: "exiting with 7\n"},
		{text: "/media /a.png /b.pdf", want: []map[string]any{
			{"type": "message", "text": "here you go", "media": []any{"/a.png", "/b.pdf"}}}},
		{text: "/env ECHOAGENT_TEST_VAR", want: []map[string]any{{"type": "message", "text": "v1"}}},
		{text: "/log info hello log", want: []map[string]any{
			{"type": "log", "level": "info", "text": "hello log"}, {"type": "message", "text": "logged"}}},
		{text: "/plain just text", want: []map[string]any{{"plain": "just text"}, {"type": "message", "text": "and a frame"}}},
		{text: "/multi 2", want: []map[string]any{{"type": "message", "text": "part 1"}, {"type": "message", "text": "part 2"}}},
		{text: "/stderr 100", stderr: strings.Repeat("e", 63) + "\n" + strings.Repeat("e", 35) + "\n", want: []map[string]any{
			{"type": "message", "text": "wrote 100 bytes to stderr"}}},
		{text: "/sleep 0.01", want: []map[string]any{
			{"type": "progress", "text": "sleeping"}, {"type": "message", "text": "slept 0.01 s"}}},
		{text: "/stream 3 1", want: []map[string]any{
			{"type": "delta", "text": "w1"}, {"type": "delta", "text": " w2"}, {"type": "delta", "text": " w3"},
			{"type": "message", "text": "w1 w2 w3"}}},
		{text: "/stream-only 2 0", want: []map[string]any{{"type": "delta", "text": "w1"}, {"type": "delta", "text": " w2"}}},
		{text: "/bad-delta", want: []map[string]any{{"type": "delta"}, {"type": "delta", "text": 5.0},
			{"type": "delta", "text": "still "}, {"type": "message", "text": "still here"}}},
		{text: "a b", opt: options{stream: true}, want: []map[string]any{
			{"type": "delta", "text": "You "}, {"type": "delta", "text": "said: "}, {"type": "delta", "text": "a "},
			{"type": "delta", "text": "b"}, {"type": "message", "text": "You said: a b"}}},
		{text: "x", opt: options{stream: true, streamChunks: 3}, want: []map[string]any{
			{"type": "delta", "text": "a"}, {"type": "delta", "text": "b"}, {"type": "delta", "text": "c"},
			{"type": "message", "text": "abc"}}},
		{text: "y", opt: options{streamChunks: 2, chunkDelay: time.Millisecond}, want: []map[string]any{
			{"type": "delta", "text": "a"}, {"type": "delta", "text": "b"}, {"type": "message", "text": "ab"}}},
		{text: "/multi 1", opt: options{stream: true}, want: []map[string]any{{"type": "message", "text": "part 1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			env, _ := json.Marshal(map[string]any{"version": 1, "text": tt.text})
			var stdout, stderr bytes.Buffer
			code := run(bytes.NewReader(append(env, '\n')), &stdout, &stderr, tt.opt)
			if code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			if tt.want != nil {
				if got := frames(t, stdout.String()); !reflect.DeepEqual(got, tt.want) {
					t.Errorf("stdout frames\n got %v\nwant %v", got, tt.want)
				}
			}
			if stderr.String() != tt.stderr {
				t.Errorf("stderr %q, want %q", stderr.String(), tt.stderr)
			}
		})
	}
}

func TestRunEnvelopeAndBadInput(t *testing.T) {
	env := `{"version":1,"text":"/envelope","chat_id":"c"}` + "\n"
	var stdout, stderr bytes.Buffer
	if code := run(strings.NewReader(env), &stdout, &stderr, options{}); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	fs := frames(t, stdout.String())
	if len(fs) != 1 || fs[0]["text"] != strings.TrimSpace(env) {
		t.Fatalf("envelope reply %v", fs)
	}
	stdout.Reset()
	if code := run(strings.NewReader("not json\n"), &stdout, &stderr, options{}); code != 2 || stdout.Len() != 0 {
		t.Fatalf("bad envelope: exit %d, stdout %q", code, stdout.String())
	}
}

func TestWriteFill(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 200000} {
		var b bytes.Buffer
		writeFill(&b, n, 'z')
		if b.Len() != n {
			t.Errorf("writeFill(%d) wrote %d bytes", n, b.Len())
		}
	}
}
