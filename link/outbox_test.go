package link

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var quiet = FileOutboxOptions{Logger: slog.New(slog.DiscardHandler)}

func openOutbox(t testing.TB, dir string) *FileOutbox {
	t.Helper()
	o, err := OpenFileOutbox(dir, quiet)
	if err != nil {
		t.Fatalf("OpenFileOutbox: %v", err)
	}
	return o
}

func ids(es []OutboxEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func mustAdd(t testing.TB, o Outbox, text string) OutboxEntry {
	t.Helper()
	e, err := o.Add(text)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	return e
}

func TestFileOutboxKeepsPendingAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	o := openOutbox(t, dir)
	a := mustAdd(t, o, "first")
	b := mustAdd(t, o, "second, with \"quotes\"\nand a newline")
	c := mustAdd(t, o, "third ✓")
	if err := o.Done(b.ID); err != nil {
		t.Fatal(err)
	}
	if err := o.Done("not-an-id"); err != nil {
		t.Fatalf("Done of an unknown id: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	o = openOutbox(t, dir)
	defer o.Close()
	got := o.Pending()
	if !slices.Equal(ids(got), []string{a.ID, c.ID}) || got[0].Text != "first" || got[1].Text != "third ✓" {
		t.Fatalf("pending after reopen %+v", got)
	}
	if !got[0].Added.Equal(a.Added) {
		t.Fatalf("added time %v, want %v", got[0].Added, a.Added)
	}
	if _, err := OpenFileOutbox(dir, quiet); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open of a locked state dir: %v", err)
	}
}

// A power cut mid-append leaves a torn last line: it is dropped, the file
// is cut back, and the next append lands on a clean line.
func TestFileOutboxTornLastLine(t *testing.T) {
	tails := map[string]string{
		"half a record":            `{"op":"add","id":"9-dead-1","te`,
		"zeros":                    "\x00\x00\x00\x00\x00\x00",
		"whole record, no newline": `{"op":"done","id":"X"}`,
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			o := openOutbox(t, dir)
			a := mustAdd(t, o, "kept")
			o.Close()
			path := filepath.Join(dir, OutboxFile)
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(tail)
			f.Close()

			o = openOutbox(t, dir)
			if got := ids(o.Pending()); !slices.Equal(got, []string{a.ID}) {
				t.Fatalf("pending %v, want [%s]", got, a.ID)
			}
			b := mustAdd(t, o, "after the cut")
			o.Close()
			data, _ := os.ReadFile(path)
			if bytes.Contains(data, []byte(tail)) {
				t.Fatalf("torn tail still in the file:\n%s", data)
			}
			o = openOutbox(t, dir)
			defer o.Close()
			if got := ids(o.Pending()); !slices.Equal(got, []string{a.ID, b.ID}) {
				t.Fatalf("pending %v after append behind a torn line", got)
			}
		})
	}
}

// A corrupt line in the middle is skipped with a warning, never a failed
// start; the file is rewritten without it.
func TestFileOutboxSkipsCorruptLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, OutboxFile)
	content := `{"op":"add","id":"1-a-1","text":"one"}
this is not json
{"op":"add","id":"1-a-2"}
{"op":"frobnicate","id":"1-a-3"}
{"op":"add","id":"1-a-4","text":"four"}
{"op":"done","id":"1-a-1"}
`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	o := openOutbox(t, dir)
	defer o.Close()
	if got := ids(o.Pending()); !slices.Equal(got, []string{"1-a-4"}) {
		t.Fatalf("pending %v", got)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "not json") {
		t.Fatalf("corrupt line kept:\n%s", data)
	}
}

func TestFileOutboxCompaction(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, OutboxFile)
	o := openOutbox(t, dir)
	var all []OutboxEntry
	for i := range 200 {
		all = append(all, mustAdd(t, o, fmt.Sprintf("message %d", i)))
	}
	full, _ := os.Stat(path)
	for _, e := range all[:190] {
		if err := o.Done(e.ID); err != nil {
			t.Fatal(err)
		}
	}
	small, _ := os.Stat(path)
	if small.Size() >= full.Size()/4 {
		t.Fatalf("file is %d bytes after answering 190 of 200 (was %d): not compacted", small.Size(), full.Size())
	}
	if o.lines > 4*compactMinLines {
		t.Fatalf("%d records in the file", o.lines)
	}
	// Appends after the rewrite go to the new file.
	extra := mustAdd(t, o, "after compaction")
	o.Close()
	o = openOutbox(t, dir)
	defer o.Close()
	want := append(ids(all[190:]), extra.ID)
	if got := ids(o.Pending()); !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Fatalf("temp file left behind: %s", e.Name())
		}
	}
}

func TestFileOutboxIDsUniqueAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	seen := map[string]bool{}
	for boot := uint64(1); boot <= 5; boot++ {
		o := openOutbox(t, dir)
		if o.Boot() != boot {
			t.Fatalf("boot %d, want %d", o.Boot(), boot)
		}
		for range 3 {
			e := mustAdd(t, o, "x")
			if seen[e.ID] {
				t.Fatalf("id %s issued twice", e.ID)
			}
			if !strings.HasPrefix(e.ID, fmt.Sprintf("%d-", boot)) {
				t.Fatalf("id %s does not start with the boot counter %d", e.ID, boot)
			}
			seen[e.ID] = true
			o.Done(e.ID)
		}
		o.Close()
	}
	// A wiped or garbled boot counter starts again at 1; the random part
	// keeps the ids unique.
	for _, content := range []string{"", "garbage"} {
		if content == "" {
			os.Remove(filepath.Join(dir, OutboxBootFile))
		} else {
			os.WriteFile(filepath.Join(dir, OutboxBootFile), []byte(content), 0o600)
		}
		o := openOutbox(t, dir)
		e := mustAdd(t, o, "x")
		if seen[e.ID] || o.Boot() != 1 {
			t.Fatalf("after wiping the boot counter: id %s (seen %t), boot %d", e.ID, seen[e.ID], o.Boot())
		}
		seen[e.ID] = true
		o.Close()
	}
	// Two memory outboxes never share ids either.
	m1, m2 := NewMemoryOutbox(), NewMemoryOutbox()
	if a, b := mustAdd(t, m1, "x"), mustAdd(t, m2, "x"); a.ID == b.ID {
		t.Fatalf("memory outboxes issued the same id %s", a.ID)
	}
}

func TestMemoryOutbox(t *testing.T) {
	o := NewMemoryOutbox()
	a := mustAdd(t, o, "a")
	b := mustAdd(t, o, "b")
	c := mustAdd(t, o, "c")
	o.Done(b.ID)
	if got := ids(o.Pending()); !slices.Equal(got, []string{a.ID, c.ID}) {
		t.Fatalf("pending %v", got)
	}
	for i := range 500 { // exercise the list compaction
		e := mustAdd(t, o, "x")
		if i%2 == 0 {
			o.Done(e.ID)
		}
	}
	if n := len(o.Pending()); n != 252 {
		t.Fatalf("%d pending, want 252", n)
	}
	o.Close()
	if _, err := o.Add("late"); err != ErrOutboxClosed {
		t.Fatalf("Add after Close: %v", err)
	}
}

func TestParseOutboxRecord(t *testing.T) {
	tests := []struct {
		line string
		err  string
	}{
		{`{"op":"add","id":"1-a-1","text":"hi","at":"2026-06-01T10:00:00Z"}`, ""},
		{`{"op":"done","id":"1-a-1"}` + "\n", ""},
		{`{"op":"add","id":"1-a-1","text":""}`, ""},
		{``, "empty line"},
		{`{"op":"add","id":"1"`, "invalid JSON"},
		{`{"op":"add","id":"1","text":"x"} {}`, "more than one JSON value"},
		{`{"id":"1"}`, `missing "op"`},
		{`{"op":"done"}`, `missing or empty "id"`},
		{`{"op":"done","id":""}`, `missing or empty "id"`},
		{`{"op":"add","id":"1"}`, `without "text"`},
		{`{"op":"add","id":"1","text":"x","at":"yesterday"}`, `"at"`},
		{`{"op":"add","id":7,"text":"x"}`, "invalid JSON"},
		{`{"op":"undo","id":"1"}`, `unknown op "undo"`},
		{`{"op":"done","id":"` + strings.Repeat("x", 300) + `"}`, "more than 256"},
		{"{\"op\":\"done\",\"id\":\"\xff\"}", "UTF-8"},
		{`{"op":"answer","id":"1-a-2","question_id":"q-1","option_id":"reject","at":"2026-06-01T10:00:00Z"}`, ""},
		{`{"op":"answer","id":"1-a-2","option_id":"reject"}`, `without "question_id"`},
		{`{"op":"answer","id":"1-a-2","question_id":"q-1","option_id":""}`, `without "option_id"`},
		{`{"op":"answer","id":"1-a-2","question_id":"` + strings.Repeat("q", 300) + `","option_id":"x"}`, `"question_id" is 300 bytes`},
		{`{"op":"answer","id":"1-a-2","question_id":"q","option_id":"x","at":"soon"}`, `"at"`},
	}
	for _, tt := range tests {
		_, err := parseOutboxRecord([]byte(tt.line))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%q: %v", tt.line, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: error %v, want %q", tt.line, err, tt.err)
		}
	}
}

// FuzzOutboxLine: the line parser never panics, and what it accepts
// encodes back to a line it parses to the same record.
func FuzzOutboxLine(f *testing.F) {
	for _, s := range []string{
		`{"op":"add","id":"1-9f2ac41d-1","text":"hello","at":"2026-06-01T10:00:00.123Z"}`,
		`{"op":"done","id":"1-9f2ac41d-1"}`,
		`{"op":"add","id":"x","text":"\u00e9\n"}`,
		`{"op":"add","id":"1-a-1","te`,
		"\x00\x00\x00",
		`[]`, `null`, `{"op":null,"id":"1"}`,
		`{"op":"answer","id":"1-a-2","question_id":"q-1","option_id":"allow_once","at":"2026-06-01T10:00:00Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := parseOutboxRecord(line)
		if err != nil {
			return
		}
		enc, err := encodeOutboxLine(r)
		if err != nil {
			t.Fatalf("encoding an accepted record %+v: %v", r, err)
		}
		if bytes.Count(enc, []byte("\n")) != 1 {
			t.Fatalf("encoded record is not one line: %q", enc)
		}
		r2, err := parseOutboxRecord(enc)
		if err != nil {
			t.Fatalf("re-parsing %q: %v", enc, err)
		}
		if r2.Op != r.Op || r2.ID != r.ID || r2.Text != r.Text || !r2.At.Equal(r.At) || r2.QuestionID != r.QuestionID || r2.OptionID != r.OptionID {
			t.Fatalf("round trip changed %+v into %+v", r, r2)
		}
	})
}

// FuzzOutboxFile: whatever bytes are in the outbox file, opening works and
// what it then holds survives another reopen unchanged.
func FuzzOutboxFile(f *testing.F) {
	f.Add([]byte(`{"op":"add","id":"1-a-1","text":"one"}` + "\n" + `{"op":"add","id":"1-a-2","text":"two"}` + "\n" + `{"op":"done","id":"1-a-1"}` + "\n"))
	f.Add([]byte(`{"op":"add","id":"1-a-1","text":"one"}` + "\n" + `{"op":"add","id":"1-a-2","te`))
	f.Add([]byte("\n\n\x00garbage\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, OutboxFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		opt := quiet
		opt.NoSync = true
		o, err := OpenFileOutbox(dir, opt)
		if err != nil {
			t.Fatalf("open failed on file content %q: %v", data, err)
		}
		before := o.Pending()
		added := mustAdd(t, o, "new")
		o.Close()
		o, err = OpenFileOutbox(dir, opt)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer o.Close()
		after := o.Pending()
		want := append(ids(before), added.ID)
		if !slices.Equal(ids(after), want) {
			b, _ := json.Marshal(after)
			t.Fatalf("after reopen %s, want ids %v", b, want)
		}
	})
}
