package main

import (
	"bufio"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// session runs the agent in-process on pipes.
type session struct {
	t     *testing.T
	in    *io.PipeWriter
	out   *bufio.Reader
	errs  *strings.Builder
	code  chan int
	outPW *io.PipeWriter
}

func start(t *testing.T, args ...string) *session {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &session{t: t, in: inW, out: bufio.NewReaderSize(outR, 4<<20), errs: &strings.Builder{}, code: make(chan int, 1), outPW: outW}
	env := func(string) string { return "" }
	go func() {
		code := run(args, env, inR, outW, &lockedWriter{b: s.errs})
		outW.Close()
		s.code <- code
	}()
	t.Cleanup(func() {
		inW.Close()
		outR.CloseWithError(io.EOF) // unblock the agent's writes
		select {
		case <-s.code:
		case <-time.After(5 * time.Second):
			t.Error("agent did not exit after stdin closed")
		}
	})
	return s
}

type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (s *session) send(line string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatalf("write: %v", err)
	}
}

func (s *session) user(text string) {
	s.t.Helper()
	b, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
	s.send(string(b))
}

// next reads the next JSON frame, skipping lines that are not.
func (s *session) next() map[string]any {
	s.t.Helper()
	for {
		line, err := s.out.ReadString('\n')
		if err != nil {
			s.t.Fatalf("read: %v", err)
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			if _, ok := m["type"].(string); ok {
				return m
			}
		}
	}
}

// until reads frames until one of type/subtype, returning all read.
func (s *session) until(typ, subtype string) []map[string]any {
	s.t.Helper()
	var got []map[string]any
	for {
		f := s.next()
		got = append(got, f)
		if f["type"] == typ && (subtype == "" || f["subtype"] == subtype) {
			return got
		}
	}
}

func texts(frames []map[string]any) []string {
	var out []string
	for _, f := range frames {
		if f["type"] != "assistant" {
			continue
		}
		for _, b := range f["message"].(map[string]any)["content"].([]any) {
			if bm := b.(map[string]any); bm["type"] == "text" {
				out = append(out, bm["text"].(string))
			}
		}
	}
	return out
}

func TestEchoTurns(t *testing.T) {
	s := start(t, "--session-id", "nuum_x")
	init := s.next()
	if init["subtype"] != "init" || init["session_id"] != "nuum_x" {
		t.Fatalf("first frame %v", init)
	}
	for _, msg := range []string{"hello", "again"} {
		s.user(msg)
		got := s.until("result", "")
		if got[0]["subtype"] != "turn_accepted" {
			t.Errorf("first frame of the turn %v", got[0])
		}
		if tx := texts(got); len(tx) != 1 || tx[0] != "You said: "+msg {
			t.Errorf("texts %q", tx)
		}
		if r := got[len(got)-1]; r["subtype"] != "success" || r["result"] != "You said: "+msg {
			t.Errorf("result %v", r)
		}
	}
	s.send(`{"type":"control","action":"heartbeat"}`)
	if f := s.next(); f["subtype"] != "heartbeat_ack" {
		t.Errorf("heartbeat answered with %v", f)
	}
}

func TestToolInjectInterrupt(t *testing.T) {
	s := start(t)
	s.next()
	s.user("/tool read")
	got := s.until("result", "")
	var sawUse, sawResult bool
	for _, f := range got {
		if f["type"] == "assistant" && strings.Contains(mustJSON(f), `"tool_use"`) {
			sawUse = true
		}
		if f["subtype"] == "tool_result" {
			sawResult = true
		}
	}
	if !sawUse || !sawResult || texts(got)[len(texts(got))-1] != "Used read" {
		t.Errorf("tool turn %v", got)
	}

	s.user("/slow 300")
	s.until("system", "turn_accepted")
	s.user("more")
	got = s.until("result", "")
	if tx := texts(got); len(tx) != 2 || tx[1] != "You said: more" {
		t.Errorf("injected turn texts %q (frames %v)", tx, got)
	}

	s.user("/slow 10000")
	s.until("system", "turn_accepted")
	s.send(`{"type":"control","action":"interrupt"}`)
	got = s.until("result", "")
	if got[len(got)-1]["subtype"] != "cancelled" {
		t.Errorf("interrupted turn %v", got)
	}
}

func TestCrashAfter(t *testing.T) {
	s := start(t, "--crash-after", "1")
	s.next()
	s.user("one")
	s.until("result", "")
	s.user("two")
	go io.Copy(io.Discard, s.out) // the agent may still say "queued"
	select {
	case code := <-s.code:
		s.code <- code
		if code != 3 {
			t.Fatalf("exit status %d, want 3", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not crash")
	}
}

func TestClaudeDialect(t *testing.T) {
	s := start(t, "--claude")
	s.next()
	s.user("/tool bash")
	got := s.until("result", "")
	for _, f := range got {
		if f["type"] == "system" {
			t.Errorf("system frame in claude mode: %v", f)
		}
	}
	if !strings.Contains(mustJSON(got), `"type":"user"`) {
		t.Errorf("no user tool_result message: %v", got)
	}
	s.user("/slow 200")
	s.user("queued")
	first := s.until("result", "")
	second := s.until("result", "")
	if tx := texts(first); len(tx) != 1 || tx[0] != "You said: /slow 200" {
		t.Errorf("first turn %q", tx)
	}
	if tx := texts(second); len(tx) != 1 || tx[0] != "You said: queued" {
		t.Errorf("second turn %q", tx)
	}
}

func TestBadOptions(t *testing.T) {
	var errs strings.Builder
	if code := run([]string{"--bogus"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, &errs); code != 2 {
		t.Errorf("exit status %d for a bad flag", code)
	}
	env := func(k string) string {
		if k == "NUUMAGENT_CRASH_AFTER" {
			return "x"
		}
		return ""
	}
	if code := run(nil, env, strings.NewReader(""), io.Discard, &errs); code != 2 {
		t.Errorf("exit status %d for a bad env value", code)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// /steps sends one assistant frame per step and the result's text.
func TestSteps(t *testing.T) {
	s := start(t)
	s.next() // init
	tests := []struct {
		msg    string
		steps  []string
		result any
	}{
		{"/steps a|b", []string{"a", "b"}, "b"},
		{"/steps Hello| world|=Hello world", []string{"Hello", " world"}, "Hello world"},
		{"/steps-noresult a|b", []string{"a", "b"}, nil},
	}
	for _, tt := range tests {
		s.user(tt.msg)
		got := s.until("result", "")
		if tx := texts(got); !slices.Equal(tx, tt.steps) {
			t.Errorf("%s: texts %q, want %q", tt.msg, tx, tt.steps)
		}
		n := 0
		for _, f := range got {
			if f["type"] == "assistant" {
				n++
			}
		}
		if n != len(tt.steps) {
			t.Errorf("%s: %d assistant frames, want one per step", tt.msg, n)
		}
		if r := got[len(got)-1]; r["subtype"] != "success" || r["result"] != tt.result {
			t.Errorf("%s: result %v, want %v", tt.msg, r, tt.result)
		}
	}
}

// partials returns the text deltas of the stream_event frames, checking
// each is wrapped as Claude Code wraps it.
func partials(t *testing.T, frames []map[string]any) []string {
	t.Helper()
	var out []string
	for _, f := range frames {
		if f["type"] != "stream_event" {
			continue
		}
		if _, ok := f["uuid"].(string); !ok || f["parent_tool_use_id"] != nil {
			t.Errorf("stream_event without its uuid or with a parent: %v", f)
		}
		ev := f["event"].(map[string]any)
		if ev["type"] != "content_block_delta" {
			continue
		}
		d := ev["delta"].(map[string]any)
		if d["type"] != "text_delta" {
			t.Errorf("delta %v", d)
		}
		out = append(out, d["text"].(string))
	}
	return out
}

// The streaming switches and commands send partial text deltas before
// the assistant frame with the same text.
func TestStreamModes(t *testing.T) {
	for _, tt := range []struct {
		args  []string
		msg   string
		delta []string
		text  string
	}{
		{nil, "/stream 3 1", []string{"w1", " w2", " w3"}, "w1 w2 w3"},
		{[]string{"--stream", "--stream-delay", "1ms"}, "a b", []string{"You ", "said: ", "a ", "b"}, "You said: a b"},
		{[]string{"--stream", "--stream-chunks", "3", "--claude"}, "x", []string{"a", "b", "c"}, "abc"},
		{[]string{"--stream-chunks", "2", "--stream-chunk-delay", "1ms"}, "x", []string{"a", "b"}, "ab"},
		{[]string{"--stream"}, "/pid", nil, ""},
		{nil, "plain", nil, "You said: plain"},
	} {
		s := start(t, tt.args...)
		s.next()
		s.user(tt.msg)
		got := s.until("result", "")
		if d := partials(t, got); !slices.Equal(d, tt.delta) {
			t.Errorf("%v %s: deltas %q, want %q", tt.args, tt.msg, d, tt.delta)
		}
		if tt.text != "" {
			if tx := texts(got); len(tx) != 1 || tx[0] != tt.text || got[len(got)-1]["result"] != tt.text {
				t.Errorf("%v %s: texts %q, result %v; want %q", tt.args, tt.msg, tx, got[len(got)-1], tt.text)
			}
		}
	}
	var errs strings.Builder
	env := func(k string) string {
		if k == "NUUMAGENT_STREAM_CHUNKS" {
			return "-1"
		}
		return ""
	}
	if code := run(nil, env, strings.NewReader(""), io.Discard, &errs); code != 2 {
		t.Errorf("exit status %d for a bad NUUMAGENT_STREAM_CHUNKS", code)
	}
}
