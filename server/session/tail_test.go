package session

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// checkTail reads data with the tail walk (n records with an id, or with
// messages n user records; at most maxBytes if > 0; chunk bytes at a time)
// and with the whole-file parser, and fails unless the tail's records are
// the parser's last ones, as many as asked for, and Partial unless all.
func checkTail(t *testing.T, data []byte, n, chunk int) { checkTailOpts(t, data, n, chunk, false, 0) }

func checkTailOpts(t *testing.T, data []byte, n, chunk int, messages bool, maxBytes int64) {
	t.Helper()
	const max = 256
	full, err := parse(bytes.NewReader(data), "f", "k", max, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	tr := &tailReader{path: "f", f: bytes.NewReader(data), size: int64(len(data)), max: max, want: n, chunk: chunk, sess: &Session{},
		messages: messages, maxBytes: maxBytes}
	if err := tr.read(); err != nil {
		t.Fatalf("tail: %v", err)
	}
	got, all := tr.sess.Records, full.sess.Records
	if len(got) > len(all) {
		t.Fatalf("n=%d chunk=%d: tail has %d records, the file %d", n, chunk, len(got), len(all))
	}
	if len(got) < len(all) && !tr.done() {
		t.Fatalf("n=%d chunk=%d: tail stopped at %d of %d records without enough of them", n, chunk, len(got), len(all))
	}
	if !tr.sess.Partial && len(got) != len(all) {
		t.Fatalf("n=%d chunk=%d: tail has %d of %d records and says it is not partial", n, chunk, len(got), len(all))
	}
	suffix := all[len(all)-len(got):]
	for i := range got {
		a, _ := got[i].MarshalJSON()
		b, _ := suffix[i].MarshalJSON()
		if !bytes.Equal(a, b) {
			t.Fatalf("n=%d chunk=%d: record %d of the tail is %s, the file has %s", n, chunk, i, a, b)
		}
	}
}

func FuzzTail(f *testing.F) {
	for _, seed := range []string{
		"",
		"\n",
		metaLine + "\n" + recLine("a") + "\n",
		metaLine + "\n" + recLine("a") + "\n" + `{"role":"user","con`,
		metaLine + "\ngarbage\n" + recLine("b"),
		recLine("no meta") + "\n" + recLine("second"),
		"\n\n" + metaLine + "\n\n" + recLine("x") + "\n\n",
		metaLine + "\n" + strings.Repeat("y", 300) + "\n" + recLine("after long") + "\n" + strings.Repeat("z", 300),
		metaLine + "\n" + metaLine + "\n" + recLine("c") + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, n := range []int{1, 2, 1 << 20} {
			for _, chunk := range []int{1, 3, 17, 4096} {
				checkTail(t, data, n, chunk)
				checkTailOpts(t, data, n, chunk, true, 0)
				checkTailOpts(t, data, n, chunk, true, 100)
			}
		}
	})
}

func TestTailStopsEarly(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{NoSync: true})
	ctx := context.Background()
	const key = "terminal-dev:local:tail"
	for i := range 50 {
		id := fmt.Sprintf("m-%d", i)
		if err := s.Append(ctx, key, Record{Role: "user", Content: "q" + id, MessageID: id},
			Record{Role: "assistant", Content: "a" + id, MessageID: id, FinishReason: "stop"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Tail(key, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.Key != key {
		t.Errorf("key %q, want %q", got.Meta.Key, key)
	}
	if len(got.Records) != 5 || got.Records[0].Content != "am-47" || got.Records[4].Content != "am-49" {
		t.Fatalf("tail of 5: %+v", got.Records)
	}
	all, err := s.Tail(key, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Records) != 100 || all.Records[0].Content != "qm-0" {
		t.Fatalf("whole tail: %d records, first %+v", len(all.Records), all.Records[0])
	}
	if _, err := s.Tail("terminal-dev:local:none", 5); !os.IsNotExist(err) && !strings.Contains(fmt.Sprint(err), "no such file") {
		t.Errorf("missing session: %v, want not-exist", err)
	}
}

// TestLongKeyHashedName: keys whose escaped name is over NAME_MAX are
// stored under a hashed name, appended to, loaded and scanned by key.
func TestLongKeyHashedName(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{NoSync: true})
	ctx := context.Background()
	keys := []string{
		"terminal-dev:local:a" + strings.Repeat("@", 100),
		"terminal-dev:local:" + strings.Repeat("p", 128) + ":" + strings.Repeat("t", 128),
		"terminal-dev:local:" + strings.Repeat("p", 128) + ":" + strings.Repeat("t", 127) + "u",
	}
	names := map[string]bool{}
	for _, key := range keys {
		name, err := FileName(key)
		if err != nil {
			t.Fatalf("FileName(%d-byte key): %v", len(key), err)
		}
		if len(name) > 255 || !IsHashedName(name) || names[name] {
			t.Fatalf("FileName(%d-byte key) = %q (%d bytes)", len(key), name, len(name))
		}
		names[name] = true
		if _, err := KeyFromFileName(name); err == nil {
			t.Errorf("KeyFromFileName(%q) did not report a hashed name", name)
		}
		if err := s.Append(ctx, key, Record{Role: "user", Content: "hi", MessageID: "m-1"}); err != nil {
			t.Fatalf("Append: %v", err)
		}
		got, err := s.Load(key)
		if err != nil || got.Meta.Key != key || len(got.Records) != 1 {
			t.Fatalf("Load: %+v, %v", got, err)
		}
		tail, err := s.Tail(key, 10)
		if err != nil || tail.Meta.Key != key || len(tail.Records) != 1 {
			t.Fatalf("Tail: %+v, %v", tail, err)
		}
	}
	for _, scan := range []func(func(*Session) error) error{s.Scan, func(fn func(*Session) error) error { return s.ScanTails(10, fn) }} {
		seen := map[string]int{}
		if err := scan(func(sess *Session) error { seen[sess.Meta.Key] = len(sess.Records); return nil }); err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			if seen[key] != 1 {
				t.Errorf("scan: key %q has %d records; saw %v", key[:40], seen[key], seen)
			}
		}
	}
}

// FuzzFastRecord: whatever fastRecord accepts, the general decoder reads
// the same way.
func FuzzFastRecord(f *testing.F) {
	for _, seed := range []string{
		recLine("a"),
		`{"role":"user","content":"a\"b\\\\","message_id":"x"}`,
		`{"role":"user","content":"line\nbreak \u00e9 \ud83d\ude00"}`,
		` { "role" : "assistant" , "finish_reason":"stop" } `,
		`{"role":"user","role":"x"}`,
		`{"content":"\xff"}`,
		`{}`,
		`{"media":["a"]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ok := fastRecord(line)
		if !ok {
			return
		}
		obj, err := decodeObject(line)
		if err != nil {
			t.Fatalf("fastRecord accepted %q, the decoder did not: %v", line, err)
		}
		var slow Record
		slow.fromObject(obj)
		a, _ := fast.MarshalJSON()
		b, _ := slow.MarshalJSON()
		if !bytes.Equal(a, b) {
			t.Fatalf("%q: fast %s, general %s", line, a, b)
		}
	})
}

// A tail ends after TailSettled answered messages in a row: the records of
// unanswered messages (even one older than a few answered ones) are all
// in it, and the long answered history before them is not read.
func TestTailSettles(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{NoSync: true})
	ctx := context.Background()
	const key = "terminal-dev:local:settle"
	pair := func(id string) {
		t.Helper()
		if err := s.Append(ctx, key, Record{Role: "user", Content: "q" + id, MessageID: id},
			Record{Role: "assistant", Content: "a" + id, MessageID: id, FinishReason: "stop"}); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(id string) {
		t.Helper()
		if err := s.Append(ctx, key, Record{Role: "user", Content: "q" + id, MessageID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 500 {
		pair(fmt.Sprintf("old-%d", i))
	}
	ask("lost-1") // unanswered, then a few answered after it
	for i := range 10 {
		pair(fmt.Sprintf("new-%d", i))
	}
	ask("lost-2")
	ask("lost-3")
	got, err := s.Tail(key, 1024)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	users := 0
	for _, r := range got.Records {
		if r.Role == "user" {
			ids[r.MessageID] = true
			users++
		}
	}
	for _, id := range []string{"lost-1", "lost-2", "lost-3", "new-0", "new-9"} {
		if !ids[id] {
			t.Errorf("tail lacks %s", id)
		}
	}
	// 3 unanswered, 10 answered after lost-1, then TailSettled answered.
	if want := 3 + 10 + TailSettled; users != want {
		t.Errorf("tail holds %d user records, want %d (stopped once settled)", users, want)
	}
}

// TailMessages reads the records of the last n messages, past any run of
// answered ones (no TailSettled stop), counting user records only; Partial
// says whether older records are left.
func TestTailMessages(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{NoSync: true})
	ctx := context.Background()
	const key = "terminal-dev:local:msgs"
	for i := range 300 {
		id := fmt.Sprintf("m-%d", i)
		if err := s.Append(ctx, key, Record{Role: "user", Content: "q", MessageID: id},
			Record{Role: "system", MessageID: id, Extra: map[string]any{"event": "run_started"}},
			Record{Role: "assistant", Content: "a", MessageID: id, FinishReason: "stop"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.TailMessages(key, 200, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Records) != 600 || got.Records[0].MessageID != "m-100" || got.Records[0].Role != "user" || !got.Partial {
		t.Fatalf("last 200 messages: %d records, first %+v, partial %v; want 600 from m-100's user record, partial",
			len(got.Records), got.Records[0], got.Partial)
	}
	all, err := s.TailMessages(key, 1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Records) != 900 || all.Partial {
		t.Fatalf("all 300 messages: %d records, partial %v; want 900, not partial", len(all.Records), all.Partial)
	}
	bounded, err := s.TailMessages(key, 1024, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(bounded.Records); n == 0 || n >= 900 || !bounded.Partial {
		t.Fatalf("TailMessages bounded to 4 KiB: %d records, partial %v", n, bounded.Partial)
	}
	settled, err := s.Tail(key, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if !settled.Partial || len(settled.Records) >= 900 {
		t.Fatalf("Tail: %d records, partial %v; want it settled early, partial", len(settled.Records), settled.Partial)
	}
}
