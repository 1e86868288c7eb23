package session

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// sameJSON compares two JSON texts as values (numbers compared as text).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	dec := func(p []byte) any {
		d := json.NewDecoder(bytes.NewReader(p))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decode %s: %v", p, err)
		}
		return v
	}
	return reflect.DeepEqual(dec(a), dec(b))
}

func TestRecordJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		want  Record // Extra not compared when nil
		exact bool   // output must equal in byte for byte
	}{
		{
			name:  "user",
			in:    `{"role":"user","content":"hi","timestamp":"2026-03-15T14:30:00.123456","message_id":"m-1"}`,
			want:  Record{Role: "user", Content: "hi", Timestamp: "2026-03-15T14:30:00.123456", MessageID: "m-1"},
			exact: true,
		},
		{
			name:  "assistant",
			in:    `{"role":"assistant","content":"You said: hi","timestamp":"2026-03-15T14:30:00.123456","message_id":"m-1","run_id":"run-1","finish_reason":"stop"}`,
			want:  Record{Role: "assistant", Content: "You said: hi", Timestamp: "2026-03-15T14:30:00.123456", MessageID: "m-1", RunID: "run-1", FinishReason: "stop"},
			exact: true,
		},
		{
			name:  "media, unicode and html kept as is",
			in:    `{"role":"user","content":"<b>é</b> & \"q\"\n","media":["/a.png","/b.png"]}`,
			want:  Record{Role: "user", Content: "<b>é</b> & \"q\"\n", Media: []string{"/a.png", "/b.png"}},
			exact: true,
		},
		{
			name: "tool call with null content",
			in:   `{ "role": "assistant", "content": null, "tool_calls": [{"id": "call_abc", "function": {"name": "web_search", "arguments": "{\"query\": \"weather today\"}"}}], "timestamp": "2026-03-15T14:30:01.234567" }`,
			want: Record{Role: "assistant", Timestamp: "2026-03-15T14:30:01.234567", Extra: map[string]any{
				"content": nil,
				"tool_calls": []any{map[string]any{"id": "call_abc", "function": map[string]any{
					"name": "web_search", "arguments": `{"query": "weather today"}`}}},
			}},
		},
		{
			name:  "tool result",
			in:    `{"role":"tool","content":"Sunny, 22°C","timestamp":"2026-03-15T14:30:02.345678","name":"web_search","tool_call_id":"call_abc"}`,
			want:  Record{Role: "tool", Content: "Sunny, 22°C", Timestamp: "2026-03-15T14:30:02.345678", Extra: map[string]any{"name": "web_search", "tool_call_id": "call_abc"}},
			exact: true,
		},
		{
			name:  "big number kept exactly",
			in:    `{"role":"x","content":"","f":1.50,"n":12345678901234567890}`,
			want:  Record{Role: "x", Extra: map[string]any{"n": json.Number("12345678901234567890"), "f": json.Number("1.50")}},
			exact: true,
		},
		{
			name:  "content as list of parts",
			in:    `{"role":"user","content":[{"text":"hi","type":"text"}]}`,
			want:  Record{Role: "user", Extra: map[string]any{"content": []any{map[string]any{"type": "text", "text": "hi"}}}},
			exact: true,
		},
		{
			name:  "wrong types and foreign _type",
			in:    `{"role":1,"content":"c","timestamp":null,"media":"x","_type":"other"}`,
			want:  Record{Content: "c", Extra: map[string]any{"role": json.Number("1"), "timestamp": nil, "media": "x", "_type": "other"}},
			exact: false, // order changes: known fields first
		},
		{
			name:  "missing role",
			in:    `{}`,
			want:  Record{},
			exact: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Record
			if err := json.Unmarshal([]byte(tt.in), &r); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, tt.want) {
				t.Fatalf("decoded\n%#v\nwant\n%#v", r, tt.want)
			}
			out, err := r.MarshalJSON() // json.Marshal would escape <>& again
			if err != nil {
				t.Fatal(err)
			}
			if bytes.IndexByte(out, '\n') >= 0 {
				t.Errorf("output has a raw newline: %s", out)
			}
			if tt.exact && string(out) != tt.in {
				t.Errorf("output\n%s\nwant\n%s", out, tt.in)
			}
			if tt.in != "{}" && !sameJSON(t, out, []byte(tt.in)) {
				t.Errorf("output\n%s\nis not the same JSON as\n%s", out, tt.in)
			}
		})
	}
}

func TestRecordJSONErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{``, `null`, `[1]`, `"s"`, `42`, `{`, `{"a":1}x`, `{"a":1}{"b":2}`} {
		var r Record
		if err := r.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("Record.UnmarshalJSON(%q) did not fail", in)
		}
		var m Metadata
		if err := m.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("Metadata.UnmarshalJSON(%q) did not fail", in)
		}
	}
	if _, err := json.Marshal(Record{Extra: map[string]any{"_type": "metadata"}}); err == nil {
		t.Error(`a record with "_type":"metadata" was encoded`)
	}
	if _, err := json.Marshal(Record{Extra: map[string]any{"x": func() {}}}); err == nil {
		t.Error("a record with an unencodable Extra value was encoded")
	}
}

func TestMetadataJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, out string
		want          Metadata
	}{
		{
			name: "nanobot",
			in:   `{"_type":"metadata","key":"telegram:12345","created_at":"2026-03-01T10:00:00","updated_at":"2026-03-15T14:30:00","metadata":{"a":1},"last_consolidated":42,"x":true}`,
			want: Metadata{Key: "telegram:12345", CreatedAt: "2026-03-01T10:00:00", UpdatedAt: "2026-03-15T14:30:00",
				Metadata: map[string]any{"a": json.Number("1")}, LastConsolidated: 42, Extra: map[string]any{"x": true}},
		},
		{
			name: "wrong types kept",
			in:   `{"_type":"metadata","key":7,"created_at":"c","updated_at":"u","metadata":null,"last_consolidated":4.5}`,
			want: Metadata{CreatedAt: "c", UpdatedAt: "u", Extra: map[string]any{"key": json.Number("7"), "metadata": nil, "last_consolidated": json.Number("4.5")}},
		},
		{
			name: "zero value",
			in:   `{"_type":"metadata"}`,
			out:  `{"_type":"metadata","key":"","created_at":"","updated_at":"","metadata":{},"last_consolidated":0}`,
			want: Metadata{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Metadata
			if err := json.Unmarshal([]byte(tt.in), &m); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, tt.want) {
				t.Fatalf("decoded\n%#v\nwant\n%#v", m, tt.want)
			}
			out, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.out
			if want == "" {
				want = tt.in
			}
			if string(out) != want {
				t.Errorf("output\n%s\nwant\n%s", out, want)
			}
		})
	}
}
