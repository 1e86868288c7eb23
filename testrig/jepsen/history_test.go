package jepsen

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func sampleHistory() History {
	return History{
		{Kind: KindFaultStart, Time: 1, Fault: FaultKillNATS, Node: "n1"},
		{Kind: KindSend, Time: 2, Device: "d1", Message: "m1", Seq: 1, Text: "d1-1"},
		{Kind: KindAck, Time: 3, Device: "d1", Session: "s1", Message: "m1", Seq: 1},
		{Kind: KindRefused, Time: 3, Device: "d1", Message: "m1", Seq: 1, Note: "busy"},
		{Kind: KindResend, Time: 3, Device: "d1", Message: "m1", Seq: 1},
		{Kind: KindRunStart, Time: 4, Device: "d1", Message: "m1", Seq: 1, Node: "worker-1"},
		{Kind: KindInterrupted, Time: 4, Device: "d1", Message: "m1"},
		{Kind: KindRunEnd, Time: 5, Device: "d1", Message: "m1", Seq: 1, Node: "worker-1"},
		{Kind: KindReply, Time: 6, Device: "d1", Message: "m1", Seq: 1, Text: "You said: d1-1"},
		{Kind: KindFaultEnd, Time: 7, Fault: FaultKillNATS, Node: "n1", Note: "beyond"},
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	for _, e := range sampleHistory() {
		r.Add(e)
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	got, err := ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sampleHistory()) || !reflect.DeepEqual(r.History(), sampleHistory()) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, sampleHistory())
	}
	path := t.TempDir() + "/h.jsonl"
	if err := WriteHistoryFile(path, got); err != nil {
		t.Fatal(err)
	}
	again, err := ReadHistoryFile(path)
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Fatalf("file round trip: %v %+v", err, again)
	}
}

func TestReadHistoryErrors(t *testing.T) {
	ok := `{"kind":"send","t":1,"device":"d","msg":"m","seq":1,"text":"x"}`
	for _, tc := range []struct{ name, in, want string }{
		{"blank line", ok + "\n\n" + ok, "line 2: blank line"},
		{"not json", "{", "line 1: not an event"},
		{"unknown field", `{"kind":"send","t":1,"device":"d","msg":"m","seq":1,"text":"x","extra":1}`, `unknown field "extra"`},
		{"two values", ok + ok, "line 1: more than one JSON value"},
		{"trailing", ok + " x", "line 1:"},
		{"unknown kind", `{"kind":"poke","t":1}`, `unknown kind "poke"`},
		{"no time", `{"kind":"ack","device":"d","msg":"m"}`, "time 0"},
		{"no message", `{"kind":"ack","t":1,"device":"d"}`, "no message id"},
		{"no device", `{"kind":"ack","t":1,"msg":"m"}`, "no device"},
		{"send without seq", `{"kind":"send","t":1,"device":"d","msg":"m","text":"x"}`, "no seq"},
		{"send without text", `{"kind":"send","t":1,"device":"d","msg":"m","seq":1}`, "no text"},
		{"run without node", `{"kind":"run_start","t":1,"device":"d","msg":"m"}`, "no node"},
		{"unknown fault", `{"kind":"fault_start","t":1,"fault":"flood","node":"n1"}`, `unknown fault "flood"`},
		{"fault without node", `{"kind":"fault_end","t":1,"fault":"pause"}`, "no node"},
		{"fault on a message", `{"kind":"ack","t":1,"device":"d","msg":"m","fault":"pause"}`, "fault name"},
		{"null", `null`, `unknown kind ""`},
		{"array", `[1]`, "not an event"},
		{"wrong type", `{"kind":"ack","t":"1","device":"d","msg":"m"}`, "not an event"},
		{"too long", ok + "\n" + strings.Repeat("x", maxLine+1), "line 2: longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHistory(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadHistory(%.60q) = %v, want an error with %q", tc.in, err, tc.want)
			}
		})
	}
	h, err := ReadHistory(strings.NewReader(ok + "\n" + ok + "\n"))
	if err != nil || len(h) != 2 {
		t.Fatalf("two good lines: %v, %d events", err, len(h))
	}
}

// FuzzReadHistory: the parser never panics, and what it accepts is
// written back and read again to the same events.
func FuzzReadHistory(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteHistory(&buf, sampleHistory()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"kind":"send","t":1,"device":"d","msg":"m","seq":1,"text":"x"}`))
	f.Add([]byte("\n"))
	f.Add([]byte(`{"kind":"fault_start","t":1,"fault":"pause","node":"n1"}` + "\n" + `null`))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := ReadHistory(bytes.NewReader(in))
		if err != nil {
			return
		}
		for i, e := range h {
			if err := e.Validate(); err != nil {
				t.Fatalf("event %d accepted but invalid: %v", i, err)
			}
		}
		var out bytes.Buffer
		if err := WriteHistory(&out, h); err != nil {
			t.Fatal(err)
		}
		again, err := ReadHistory(&out)
		if err != nil {
			t.Fatalf("written history does not read back: %v\n%s", err, out.Bytes())
		}
		if len(again) != len(h) || (len(h) > 0 && !reflect.DeepEqual(again, h)) {
			t.Fatalf("round trip changed the history:\n%+v\n%+v", h, again)
		}
	})
}
