package link

import (
	"bytes"
	"encoding/json"
	"testing"
)

// reflectEncode is the encoder AppendEncode replaced: json.Marshal of the
// frame's struct with "type" spliced in first. The hand-written encoder
// must write exactly the same bytes.
func reflectEncode(t testing.TB, f Frame) []byte {
	dst := []byte(`{"type":"` + string(f.FrameType()) + `"`)
	body, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 2 {
		return append(append(dst, ','), body[1:]...)
	}
	return append(dst, '}')
}

// framesOf builds one frame of every type from a few strings, with the
// optional fields both set and left empty.
func framesOf(a, b, c string, n int, flag bool) []Frame {
	var caps []string
	if flag {
		caps = []string{a, CapProgress}
	}
	reply := &Message{Role: RoleAssistant, MessageID: a, RunID: b, Text: c, FinishReason: FinishStop}
	if !flag {
		reply = nil
	}
	return []Frame{
		&Connect{PeerID: a, DeviceName: b, Capabilities: caps, ThreadID: c, UserID: b, Token: c},
		&Connect{PeerID: a},
		&Connected{ChannelID: a, SessionID: b, HeartbeatSeconds: n},
		&Message{MessageID: a, Text: c},
		&Message{Role: b, MessageID: a, RunID: b, Text: c, FinishReason: a, ThreadID: b, UserID: c},
		&Ack{MessageID: a, SessionID: b, Accepted: flag, Duplicate: flag, Pending: !flag, Reply: reply},
		&Ack{MessageID: a, SessionID: b, Accepted: true, Reply: &Message{MessageID: c}},
		&Ping{}, &Pong{},
		&Error{Error: c, MessageID: a, Code: b},
		&Error{Error: c},
		&Progress{MessageID: a, Text: c},
		&Delta{MessageID: a, Seq: int64(n), Text: c},
		&Cancel{MessageID: a, ThreadID: b},
		&Cancel{MessageID: a},
		&Connect{PeerID: a, Board: b, Version: c, Tags: map[string]string{a: b, c: a, "site": c}},
		&Notice{NoticeID: a, Text: c, Priority: b, DisplaySeconds: n, ExpiresAt: c},
		&Notice{NoticeID: a, Text: c, Priority: PriorityAlert},
		&NoticeAck{NoticeID: a},
		&Screen{Rows: []string{a, b, c}, CursorRow: n, CursorCol: -n, CursorOn: flag, Backlight: !flag},
		&Screen{Rows: []string{}},
		&Screen{},
		&Connect{PeerID: a, Platform: b, SettingsVersion: int64(n)},
		&Update{UpdateID: a, Version: b, Manifest: c, URL: a, AllowDowngrade: flag, GateSeconds: n},
		&UpdateStatus{UpdateID: a, Version: b, Running: c, State: UpdateRolledBack, Reason: c},
		&UpdateStatus{Version: b, Running: c, State: UpdateInstalled},
		&Settings{Version: int64(n), IdleText: &c, IdleSeconds: &n, BacklightOffAfter: &n, NoticeSeconds: &n, LogLevel: a, Tags: map[string]string{a: b}},
		&Settings{Version: 1},
		&SettingsAck{Version: int64(n), Error: c},
		&Diag{RequestID: a, Kind: DiagLogs, Bytes: n},
		&DiagResult{RequestID: a, Kind: b, Text: c, OK: flag, Error: a},
	}
}

func checkEncodeMatchesReflect(t *testing.T, frames []Frame) {
	t.Helper()
	for _, f := range frames {
		got, err := Encode(f)
		if err != nil {
			t.Fatalf("Encode(%#v): %v", f, err)
		}
		if want := reflectEncode(t, f); !bytes.Equal(got, want) {
			t.Fatalf("Encode(%#v)\n got %s\nwant %s (encoding/json)", f, got, want)
		}
	}
}

func TestEncodeMatchesEncodingJSON(t *testing.T) {
	checkEncodeMatchesReflect(t, framesOf("m-1", "", "hello", 0, false))
	checkEncodeMatchesReflect(t, framesOf("m-\"1\"", "<b>&amp;</b>", "caf\u00e9\n\t\x00 \u2028 \xff end", 25, true))
	checkEncodeMatchesReflect(t, framesOf("", "", "", -3, true))
}

func TestEncodeTypedNil(t *testing.T) {
	var m *Message
	if _, err := Encode(m); err == nil {
		t.Error("Encode((*Message)(nil)) did not fail")
	}
}

func FuzzEncode(f *testing.F) {
	f.Add("m-1", "run", "hello", 30, true)
	f.Add("<&>", "\u2028", "\xff\x00\"\\", 0, false)
	f.Fuzz(func(t *testing.T, a, b, c string, n int, flag bool) {
		checkEncodeMatchesReflect(t, framesOf(a, b, c, n, flag))
	})
}

func BenchmarkEncodeAck(b *testing.B) {
	a := &Ack{MessageID: "m-000123", SessionID: "terminal-dev:local:bench-0001", Accepted: true}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Encode(a); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeNewReply(b *testing.B) {
	m := &Message{Role: RoleAssistant, MessageID: "m-000123", RunID: "run-1", Text: "You said: hello", FinishReason: FinishStop}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Encode(m); err != nil {
			b.Fatal(err)
		}
	}
}
