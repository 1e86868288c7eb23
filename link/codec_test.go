package link

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeSpecFrames(t *testing.T) {
	tests := []struct {
		in   string
		want Frame
	}{
		{`{"type":"connect","peer_id":"device-001","device_name":"desk-terminal","capabilities":["text"]}`,
			&Connect{PeerID: "device-001", DeviceName: "desk-terminal", Capabilities: []string{"text"}}},
		{`{"type":"connected","channel_id":"terminal-dev","session_id":"terminal-dev:local:device-001"}`,
			&Connected{ChannelID: "terminal-dev", SessionID: "terminal-dev:local:device-001"}},
		{`{"type":"message","message_id":"m-001","text":"你好"}`, &Message{MessageID: "m-001", Text: "你好"}},
		{`{"type":"ack","message_id":"m-001","session_id":"terminal-dev:local:device-001","accepted":true}`,
			&Ack{MessageID: "m-001", SessionID: "terminal-dev:local:device-001", Accepted: true}},
		{`{"type":"message","role":"assistant","message_id":"m-001","run_id":"run-id","text":"你好,我在。","finish_reason":"stop"}`,
			&Message{Role: "assistant", MessageID: "m-001", RunID: "run-id", Text: "你好,我在。", FinishReason: "stop"}},
		{`{"type":"ping"}`, &Ping{}},
		{`{"type":"pong"}`, &Pong{}},
		{`{"type":"error","error":"Unsupported websocket frame type: example"}`, &Error{Error: "Unsupported websocket frame type: example"}},
		{`{"type":"ack","message_id":"m","session_id":"s","accepted":true,"duplicate":true,"reply":{"role":"assistant","message_id":"m","run_id":"r","text":"t","finish_reason":"stop"}}`,
			&Ack{MessageID: "m", SessionID: "s", Accepted: true, Duplicate: true, Reply: &Message{Role: "assistant", MessageID: "m", RunID: "r", Text: "t", FinishReason: "stop"}}},
		{`{"type":"progress","message_id":"m","text":"thinking"}`, &Progress{MessageID: "m", Text: "thinking"}},
		{`{"type":"cancel","message_id":"m"}`, &Cancel{MessageID: "m"}},
		{`{"type":"delta","message_id":"m","seq":1,"text":"Hel"}`, &Delta{MessageID: "m", Seq: 1, Text: "Hel"}},
		{`{"type":"connected","channel_id":"c","session_id":"s","heartbeat_seconds":15}`, &Connected{ChannelID: "c", SessionID: "s", HeartbeatSeconds: 15}},
		// unknown fields are ignored: newer peers stay compatible
		{`{"type":"ping","future":1}`, &Ping{}},
		// ...and so are duplicate keys inside them, which are never decoded
		{`{"type":"ping","future":{"a":1,"a":[{"b":"}"}]}}`, &Ping{}},
		// an escaped key is the key it spells
		{`{"typ\u0065":"ping"}`, &Ping{}},
		{`{"type":"cancel","message_id":"m","thread_id":"kitchen"}`, &Cancel{MessageID: "m", ThreadID: "kitchen"}},
		{manyKeys(40) + `}`, &Ping{}},
		{`{"type":"connect","peer_id":"kiosk-7","board":"pi-lcd2004","version":"0.2.0","tags":{"site":"lobby","floor":"1"}}`,
			&Connect{PeerID: "kiosk-7", Board: "pi-lcd2004", Version: "0.2.0", Tags: map[string]string{"site": "lobby", "floor": "1"}}},
		{`{"type":"notice","notice_id":"n-1","text":"Closing at 18:00","priority":"alert","display_seconds":20,"expires_at":"2026-11-23T18:00:00Z"}`,
			&Notice{NoticeID: "n-1", Text: "Closing at 18:00", Priority: "alert", DisplaySeconds: 20, ExpiresAt: "2026-11-23T18:00:00Z"}},
		{`{"type":"notice_ack","notice_id":"n-1"}`, &NoticeAck{NoticeID: "n-1"}},
		{`{"type":"screen","rows":["You said: hi    ","> _"],"cursor_row":1,"cursor_col":2,"cursor_on":true,"backlight":false}`,
			&Screen{Rows: []string{"You said: hi    ", "> _"}, CursorRow: 1, CursorCol: 2, CursorOn: true}},
	}
	for _, tt := range tests {
		got, err := Decode([]byte(tt.in))
		if err != nil {
			t.Errorf("Decode(%s): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Decode(%s) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		in      string
		wantMsg string
		field   string
	}{
		{`{"type":"message",`, "invalid JSON", ""},
		{`not json`, "invalid JSON", ""},
		{``, "invalid JSON", ""},
		{`[1,2]`, "frame must be a JSON object, got array", ""},
		{`"ping"`, "frame must be a JSON object, got string", ""},
		{`{}`, `missing "type" field`, ""},
		{`{"peer_id":"x"}`, `missing "type" field`, ""},
		{`{"type":7}`, `field "type" must be a string, got number`, "type"},
		{`{"type":null}`, `field "type" must be a string, got null`, "type"},
		{`{"type":""}`, `field "type" is empty`, "type"},
		{`{"type":"example"}`, "Unsupported websocket frame type: example", ""},
		{`{"type":"message","message_id":5,"text":"x"}`, `message frame: field "message_id" must be a string, got number`, "message_id"},
		{`{"type":"message","text":"x"}`, `message frame: field "message_id" is missing or empty`, "message_id"},
		{`{"type":"message","message_id":"m","text":["x"]}`, `message frame: field "text" must be a string, got array`, "text"},
		{`{"type":"connect","peer_id":"p","capabilities":"text"}`, `connect frame: field "capabilities" must be an array, got string`, "capabilities"},
		{`{"type":"connect","peer_id":"p","capabilities":[1]}`, `connect frame: field "capabilities" must be a string, got number`, "capabilities"},
		{`{"type":"ack","message_id":"m","session_id":"s","accepted":"yes"}`, `ack frame: field "accepted" must be a boolean, got string`, "accepted"},
		{`{"type":"ack","message_id":"m","session_id":"s","accepted":true,"reply":{"text":1}}`, `ack frame: field "reply.text" must be a string, got number`, "reply.text"},
		{`{"type":"connected","channel_id":"c"}`, `connected frame: field "session_id" is missing or empty`, "session_id"},
		{`{"type":"connected","channel_id":"c","session_id":"s","heartbeat_seconds":1.5}`, `connected frame: field "heartbeat_seconds" must be a number, got number 1.5`, "heartbeat_seconds"},
		{`{"type":"error"}`, `error frame: field "error" is missing or empty`, "error"},
		{`{"type":"cancel"}`, `cancel frame: field "message_id" is missing or empty`, "message_id"},
		{`{"type":"progress","text":"x"}`, `progress frame: field "message_id" is missing or empty`, "message_id"},
		{`{"type":"delta","seq":1,"text":"x"}`, `delta frame: field "message_id" is missing or empty`, "message_id"},
		{`{"type":"delta","message_id":"m","text":"x"}`, `delta frame: field "seq" must be a whole number from 1, got 0`, "seq"},
		{`{"type":"delta","message_id":"m","seq":-3,"text":"x"}`, `delta frame: field "seq" must be a whole number from 1, got -3`, "seq"},
		{`{"type":"delta","message_id":"m","seq":"1","text":"x"}`, `delta frame: field "seq" must be a number, got string`, "seq"},
		{`{"type":"notice","text":"x","priority":"info"}`, `notice frame: field "notice_id" is missing or empty`, "notice_id"},
		{`{"type":"notice_ack"}`, `notice_ack frame: field "notice_id" is missing or empty`, "notice_id"},
		{`{"type":"notice","notice_id":"n","text":"x","priority":"info","display_seconds":"5"}`, `notice frame: field "display_seconds" must be a number, got string`, "display_seconds"},
		{`{"type":"screen","rows":"abc"}`, `screen frame: field "rows" must be an array, got string`, "rows"},
		{`{"type":"connect","peer_id":"p","tags":{"site":1}}`, `connect frame: field "tags" must be a string, got number`, "tags"},
		// Strict wire: case-sensitive keys, no duplicates, UTF-8 only.
		{`{"type":"message","Type":"ping","message_id":"k","text":"hi"}`, `message frame: field "Type" is not known: keys are case-sensitive (did you mean "type"?)`, "Type"},
		{`{"TYPE":"ping"}`, `field "TYPE" is not known: keys are case-sensitive (did you mean "type"?)`, "TYPE"},
		{`{"type":"message","Message_ID":"k","text":"hi"}`, `message frame: field "Message_ID" is not known`, "Message_ID"},
		{"{\"type\":\"message\",\"me\u017f\u017fage_id\":\"k\",\"text\":\"hi\"}", `(did you mean "message_id"?)`, "meſſage_id"},
		{`{"type":"message","message_id":"d1","message_id":"d2","text":"x"}`, `message frame: field "message_id" appears twice: each key may appear once in an object`, "message_id"},
		{`{"type":"ping","typ\u0065":"pong"}`, `ping frame: field "type" appears twice`, "type"},
		{`{"type":"ack","message_id":"m","session_id":"s","accepted":true,"reply":{"text":"a","Text":"b"}}`, `ack frame: field "reply.Text" is not known: keys are case-sensitive (did you mean "reply.text"?)`, "reply.Text"},
		{`{"type":"ack","message_id":"m","session_id":"s","accepted":true,"reply":{"text":"a","text":"b"}}`, `ack frame: field "reply.text" appears twice`, "reply.text"},
		{manyKeys(40) + `,"k7":1}`, `ping frame: field "k7" appears twice`, "k7"},
		{"{\"type\":\"message\",\"message_id\":\"col-\xff\",\"text\":\"x\"}", "frame is not valid UTF-8 (first bad byte at offset 36)", ""},
		{"{\"type\":\"message\",\"message_id\":\"m\",\"text\":\"\xed\xa0\x80\"}", "frame is not valid UTF-8", ""},
		{`{"type":"ping","x":[1,}`, "invalid JSON", ""},
		{`true`, "frame must be a JSON object, got bool", ""},
		{`null`, `missing "type" field`, ""},
	}
	for _, tt := range tests {
		f, err := Decode([]byte(tt.in))
		if err == nil {
			t.Errorf("Decode(%q) = %#v, want error %q", tt.in, f, tt.wantMsg)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("Decode(%q) error %q, want it to contain %q", tt.in, err, tt.wantMsg)
		}
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("Decode(%q) error %T is not a *DecodeError", tt.in, err)
		} else if de.Field != tt.field {
			t.Errorf("Decode(%q) field %q, want %q", tt.in, de.Field, tt.field)
		}
	}
	if _, err := Decode([]byte(`{"type":"example"}`)); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type error %v does not match ErrUnknownType", err)
	}
}

// manyKeys is an unclosed ping frame with n unknown keys k0..k(n-1).
func manyKeys(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"ping"`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,"k%d":%d`, i, i)
	}
	return b.String()
}

func TestEncodeTypeFirstAndRoundTrip(t *testing.T) {
	frames := []Frame{
		&Connect{PeerID: "p", Capabilities: []string{CapText, CapProgress}},
		&Connected{ChannelID: "c", SessionID: "c:a:p", HeartbeatSeconds: 30},
		&Message{MessageID: "m", Text: "a \"quoted\"\nline <b>"},
		&Message{Role: RoleAssistant, MessageID: "m", RunID: "r", Text: "", FinishReason: FinishStop},
		&Ack{MessageID: "m", SessionID: "s", Accepted: true, Pending: true, Duplicate: true},
		&Ping{}, &Pong{},
		&Error{Error: "boom", Code: CodeBadFrame},
		&Progress{MessageID: "m", Text: "t"},
		&Delta{MessageID: "m", Seq: 7, Text: "lo, wor"},
		&Cancel{MessageID: "m"},
	}
	for _, f := range frames {
		b, err := Encode(f)
		if err != nil {
			t.Fatalf("Encode(%#v): %v", f, err)
		}
		prefix := `{"type":"` + string(f.FrameType()) + `"`
		if !strings.HasPrefix(string(b), prefix) {
			t.Errorf("Encode(%#v) = %s, want prefix %s", f, b, prefix)
		}
		if !json.Valid(b) {
			t.Errorf("Encode(%#v) = %s is not valid JSON", f, b)
		}
		got, err := Decode(b)
		if err != nil {
			t.Errorf("Decode(Encode(%#v)) = %v", f, err)
			continue
		}
		if !reflect.DeepEqual(got, f) {
			t.Errorf("round trip: got %#v, want %#v", got, f)
		}
	}
	// The spec's final assistant message carries exactly these fields.
	b := MustEncode(&Message{Role: RoleAssistant, MessageID: "m-001", RunID: "run-id", Text: "hi", FinishReason: FinishStop})
	want := `{"type":"message","role":"assistant","message_id":"m-001","run_id":"run-id","text":"hi","finish_reason":"stop"}`
	if string(b) != want {
		t.Errorf("assistant message = %s\nwant %s", b, want)
	}
	if _, err := Encode(nil); err == nil {
		t.Error("Encode(nil) did not fail")
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"connect","peer_id":"device-001","device_name":"desk-terminal","capabilities":["text"]}`,
		`{"type":"message","message_id":"m-001","text":"你好"}`,
		`{"type":"ack","message_id":"m","session_id":"s","accepted":true,"reply":{"text":"x","message_id":"m"}}`,
		`{"type":"ping"}`, `{"type":"example"}`, `[]`, `{"type":7}`, `{`,
		`{"type":"message","Type":"ping","message_id":"k","text":"hi"}`,
		`{"type":"message","message_id":"d1","message_id":"d2","text":"x"}`,
		"{\"type\":\"message\",\"message_id\":\"col-\xff\",\"text\":\"x\"}",
		`{"typ\u0065":"ping","x":{"a":1,"a":2}}`,
		`{"type":"ack","message_id":"m","session_id":"s","accepted":true,"reply":{"text":"a","Text":"b"}}`,
		`{"type":"update","update_id":"r","version":"1.1.0","manifest":"{}","url":"/b","gate_seconds":9}`,
		`{"type":"update_status","version":"1.1.0","running":"1.0.0","state":"refused","reason":"x"}`,
		`{"type":"settings","version":2,"idle_text":"hi","tags":{"a":"b"},"notice_seconds":3}`,
		`{"type":"settings_ack","version":2,"error":"no"}`,
		`{"type":"diag","request_id":"q","kind":"selftest"}`,
		`{"type":"diag_result","request_id":"q","kind":"logs","text":"a\nb"}`,
		// At and past the bounds of ids and kinds (issue 36).
		`{"type":"diag_result","request_id":"` + strings.Repeat("q", MaxFleetIDBytes) + `","kind":"` + strings.Repeat("k", MaxDiagKindBytes+1) + `"}`,
		`{"type":"update_status","update_id":"` + strings.Repeat("u", MaxFleetIDBytes+1) + `","version":"1","running":"1","state":"failed"}`,
		`{"type":"diag","request_id":"` + strings.Repeat("q", MaxFleetIDBytes+1) + `","kind":"logs"}`,
		// Questions and answers (issue 42).
		`{"type":"question","message_id":"m","question_id":"q","text":"Run it?","options":[{"id":"allow_once","label":"Allow once"},{"id":"reject","label":"Deny"}],"timeout_seconds":60}`,
		`{"type":"question","message_id":"m","question_id":"q","text":"?","options":[{"id":"a","label":"A"},{"id":"a","label":"B"}],"timeout_seconds":1}`,
		`{"type":"answer","message_id":"a1","question_id":"q","option_id":"allow_once"}`,
		// Health reports (issue 43).
		`{"type":"health","uptime_seconds":3600,"load1":0.25,"mem_available":104857600,"disk_free":1048576,"disk_free_percent":4.5,"temp_mc":61500,"throttled":["under_voltage","throttled_occurred"],"last_stop":"crash","last_stop_detail":"panic: boom","restarts_last_hour":3,"reconnects":2,"heartbeat_rtt_ms":40}`,
		`{"type":"health","uptime_seconds":1,"load1":0,"mem_available":0,"disk_free":0,"disk_free_percent":100,"throttled":[],"last_stop":"power_loss","restarts_last_hour":0,"reconnects":0}`,
		`{"type":"health","uptime_seconds":1,"load1":-1,"mem_available":0,"disk_free":0,"disk_free_percent":101,"throttled":["x","x"],"last_stop":"nap","restarts_last_hour":0,"reconnects":0,"temp_mc":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := Decode(data)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || err.Error() == "" {
				t.Fatalf("Decode error %T %q is not a descriptive *DecodeError", err, err)
			}
			return
		}
		// Whatever decodes is UTF-8 with unique keys that are either a
		// field's exact name or no field's name in any case.
		if !utf8.Valid(data) {
			t.Fatalf("Decode accepted invalid UTF-8 %q", data)
		}
		if bad := keyProblem(data); bad != "" {
			t.Fatalf("Decode accepted %q: %s", data, bad)
		}
		// Whatever decodes must encode and decode back to the same frame.
		b, err := Encode(fr)
		if err != nil {
			t.Fatalf("Encode(%#v): %v", fr, err)
		}
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(%#v)) = %v (wire %s)", fr, err, b)
		}
		if !reflect.DeepEqual(normalize(again), normalize(fr)) {
			t.Fatalf("round trip changed frame: %#v -> %#v", fr, again)
		}
	})
}

// normalize maps empty slices to nil: omitempty drops them on the wire.
func normalize(f Frame) Frame {
	if c, ok := f.(*Connect); ok && len(c.Capabilities) == 0 {
		cc := *c
		cc.Capabilities = nil
		return &cc
	}
	return f
}

func BenchmarkDecodeMessage(b *testing.B) {
	in := []byte(`{"type":"message","message_id":"m-000123","text":"hello from the desk terminal"}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeReply(b *testing.B) {
	m := &Message{Role: RoleAssistant, MessageID: "m-000123", RunID: "run-1", Text: "You said: hello", FinishReason: FinishStop}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		if buf, err = AppendEncode(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
}

// keyProblem checks the top-level keys of data (and those of "reply") the
// slow way, with encoding/json's tokenizer.
func keyProblem(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	var walk func(path string) string
	walk = func(path string) string {
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return ""
			}
			key := tok.(string)
			if seen[key] {
				return "duplicate key " + path + key
			}
			seen[key] = true
			for _, k := range wireKeys {
				if k != key && strings.EqualFold(k, key) {
					return "near-miss key " + path + key
				}
			}
			if key == "reply" && path == "" {
				var raw json.RawMessage
				if dec.Decode(&raw) != nil {
					return ""
				}
				if len(raw) > 0 && raw[0] == '{' {
					if p := keyProblem2(raw); p != "" {
						return p
					}
				}
				continue
			}
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return ""
			}
		}
		return ""
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	return walk("")
}

// keyProblem2 is keyProblem for the reply object.
func keyProblem2(raw []byte) string {
	if p := keyProblem(raw); p != "" {
		return "in reply: " + p
	}
	return ""
}

// decodeFast agrees with the general path: whatever it decodes, the
// general path decodes to the same frame; and it takes the plain frames
// it is for.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range []string{
		`{"type":"message","message_id":"m-001","text":"你好"}`,
		` { "type" : "message" , "text" : "a\"b\\\\c\/d\n\t\r\b\f" , "message_id" : "m" } `,
		`{"type":"message","message_id":"m","text":"\u00e9"}`,
		`{"type":"message","message_id":"m","text":null}`,
		`{"type":"message","message_id":"","text":"x"}`,
		`{"type":"message","message_id":"m","text":"x","Text":"y"}`,
		`{"type":"message","message_id":"m","text":"x","text":"y"}`,
		`{"type":"message","message_id":"m","text":"x","peer_id":"p"}`,
		`{"type":"message","role":"assistant","message_id":"m","run_id":"r","text":"t","finish_reason":"stop","thread_id":"t1","user_id":"u"}`,
		`{"type":"ping"}`, `{"type":"pong"}`, `{"type":"ping","x":"y"}`, `{"type":"ping"}x`,
		`{"type":"cancel","message_id":"m","thread_id":"t"}`, `{"type":"notice_ack","notice_id":"n-1"}`,
		`{"type":"connect","peer_id":"p"}`, `{"type":"message","message_id":"m","text":"x"`,
		"{\"type\":\"message\",\"message_id\":\"m\",\"text\":\"a\x01b\"}",
		`{"type":"message","message_id":"m","text":"\q"}`, `{"type":"message","message_id":"m","text":"x\"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // Decode refuses it before either path
		}
		fast, ok := decodeFast(data)
		if !ok {
			return
		}
		general, err := decodeGeneral(data)
		if err != nil {
			t.Fatalf("decodeFast took %q, which the general path refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fast, general) {
			t.Fatalf("decodeFast(%q) = %#v, the general path %#v", data, fast, general)
		}
	})
}

// The plain frames take the fast path (else it would be dead code and the
// benchmark would measure the general path).
func TestDecodeFastTakesPlainFrames(t *testing.T) {
	for _, s := range []string{
		`{"type":"message","message_id":"m-001","text":"hello"}`,
		`{"type":"message","message_id":"m","text":"line\nnext \"q\""}`,
		`{"type":"ping"}`, `{"type":"pong"}`,
		`{"type":"cancel","message_id":"m"}`, `{"type":"notice_ack","notice_id":"n"}`,
	} {
		fast, ok := decodeFast([]byte(s))
		if !ok {
			t.Errorf("%s: not decoded by the fast path", s)
			continue
		}
		general, err := decodeGeneral([]byte(s))
		if err != nil || !reflect.DeepEqual(fast, general) {
			t.Errorf("%s: fast %#v, general %#v (%v)", s, fast, general, err)
		}
	}
	for _, s := range []string{
		`{"type":"message","message_id":"m","text":"x","text":"y"}`, // duplicate: refused by the general path
		`{"type":"message","message_id":"m","Text":"x"}`,            // case near miss: refused
		`{"type":"message","message_id":"","text":"x"}`,             // missing id: refused
		`{"type":"connect","peer_id":"p"}`,                          // not a hot frame
	} {
		if _, ok := decodeFast([]byte(s)); ok {
			t.Errorf("%s: the fast path took it", s)
		}
	}
}
