package session

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// testdata/golden.jsonl is a session file written by the encoder as it
// was before the hot path's encoder was rewritten (commit "session: a
// golden session file ..."): every record shape the store has written
// or kept (a loaded line's unknown fields). It must stay byte for byte
// what the encoder writes, and load as goldenMeta and goldenRecords.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden.jsonl with the current encoder")

const goldenKey = "terminal-dev:local:golden/1"

var goldenMeta = Metadata{
	Key:       goldenKey,
	CreatedAt: "2026-03-01T10:00:00.123456",
	UpdatedAt: "2026-03-02T11:30:00.654321",
	Metadata: map[string]any{
		"title":  "desk <terminal> & co",
		"nested": map[string]any{"n": json.Number("2"), "list": []any{"a", json.Number("1.50"), true, nil}},
	},
	LastConsolidated: 3,
	Extra:            map[string]any{"version": json.Number("2")},
}

const goldenTS = "2026-03-15T14:30:00.123456"

var goldenRecords = []Record{
	{Role: "user", Content: "hi", Timestamp: goldenTS, MessageID: "m-1", RunID: "run-1"},
	{Role: "system", Content: "the run of message m-1 started", Timestamp: goldenTS, MessageID: "m-1", RunID: "run-1",
		Extra: map[string]any{"event": "run_started"}},
	{Role: "assistant", Content: "You said: hi", Timestamp: goldenTS, MessageID: "m-1", RunID: "run-1", FinishReason: "stop",
		Media: []string{"a.png", "dir/b c.jpg"}},
	{Role: "system", Content: "the run of message m-2 was cut short by a server restart; it runs again once", Timestamp: goldenTS,
		MessageID: "m-2", RunID: "run-2", Extra: map[string]any{"event": "run_interrupted"}},
	{Role: "user", Content: "html <b>&amp;</b> \"quoted\" back\\slash\nnew\tline \x01\x1f\x7f caf\u00e9 \u2028\u2029 \U0001F600",
		Timestamp: goldenTS, MessageID: "m-\"3\"", RunID: "run-<3>"},
	{Role: "", Content: ""},
	{Role: "assistant", Timestamp: goldenTS, Extra: map[string]any{
		"content":    nil,
		"tool_calls": []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "f", "arguments": "{\"x\":1}"}}},
	}},
	{Role: "tool", Content: "42", Extra: map[string]any{"zeta": json.Number("12.50"), "alpha": true, "event": "custom", "name": "calc", "_type": "other"}},
	{Role: "assistant", Content: "attempt", MessageID: "m-4", RunID: "run-4", Extra: map[string]any{"event": "run_interrupted", "attempt": json.Number("2")}},
}

// goldenBytes encodes the golden session with the current encoder.
func goldenBytes(t testing.TB) []byte {
	t.Helper()
	out, err := goldenMeta.appendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, '\n')
	for i, r := range goldenRecords {
		if out, err = r.appendJSON(out); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		out = append(out, '\n')
	}
	return out
}

// TestGoldenFileEncoding: the encoder writes the golden file byte for byte.
func TestGoldenFileEncoding(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "golden.jsonl")
	got := goldenBytes(t)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range min(len(gl), len(wl)) {
			if !bytes.Equal(gl[i], wl[i]) {
				t.Fatalf("line %d:\n got %s\nwant %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%d lines written, golden has %d", len(gl), len(wl))
	}
}

// TestGoldenFileLoads: the golden file loads as the records it was
// written from (Load, TailMessages and DecodeRecords), and appending to
// it keeps its lines as they were.
func TestGoldenFileLoads(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "golden.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	s := openTest(t, Options{NoSync: true})
	path := pathOf(t, s, goldenKey)
	writeFile(t, path, string(data))
	sess, err := s.Load(goldenKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Warnings) > 0 {
		t.Fatalf("warnings: %q", sess.Warnings)
	}
	if !reflect.DeepEqual(sess.Meta, goldenMeta) {
		t.Errorf("metadata\n got %#v\nwant %#v", sess.Meta, goldenMeta)
	}
	checkRecords(t, "Load", sess.Records, goldenRecords)

	tail, err := s.TailMessages(goldenKey, len(goldenRecords), 0)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "TailMessages", tail.Records, goldenRecords)

	_, lines, _ := bytes.Cut(data, []byte("\n"))
	decoded, err := DecodeRecords(lines)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "DecodeRecords", decoded, goldenRecords)

	// An append after them leaves them as they were.
	more := Record{Role: "user", Content: "after", Timestamp: goldenTS, MessageID: "m-5"}
	if err := s.Append(t.Context(), goldenKey, more); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := more.appendJSON(nil)
	if want := append(append(data, line...), '\n'); !bytes.Equal(after, want) {
		t.Fatalf("after an append the file is\n%s\nwant\n%s", after, want)
	}
}

func checkRecords(t *testing.T, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("%s: record %d\n got %#v\nwant %#v", what, i, got[i], want[i])
		}
	}
}
