package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
)

var timestampRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$`)

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	ctx := context.Background()
	const key = "terminal-dev:local:dev1"
	user := Record{Role: "user", Content: "hi", MessageID: "m-1"}
	reply := Record{Role: "assistant", Content: "You said: hi", MessageID: "m-1", RunID: "run-1", FinishReason: "stop"}
	if err := s.Append(ctx, key, user); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, key, reply); err != nil {
		t.Fatal(err)
	}
	fixed := Record{Role: "user", Content: "two\nlines <b>é</b>", Timestamp: "2026-03-15T14:30:00.123456", MessageID: "m-2", Media: []string{"/tmp/p.png"}}
	if err := s.Append(ctx, key, fixed); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(s.Dir(), "terminal-dev:local:dev1.jsonl")
	lines := rawLines(t, path)
	if len(lines) != 4 {
		t.Fatalf("file has %d lines, want 4:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.HasPrefix(lines[0], `{"_type":"metadata","key":"terminal-dev:local:dev1","created_at":"`) ||
		!strings.HasSuffix(lines[0], `,"metadata":{},"last_consolidated":0}`) {
		t.Errorf("metadata line %s", lines[0])
	}
	wantKeys := [][]string{
		{"_type", "created_at", "key", "last_consolidated", "metadata", "updated_at"},
		{"content", "message_id", "role", "timestamp"},
		{"content", "finish_reason", "message_id", "role", "run_id", "timestamp"},
		{"content", "media", "message_id", "role", "timestamp"},
	}
	var decoded []map[string]any
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if got := keysOf(m); !reflect.DeepEqual(got, wantKeys[i]) {
			t.Errorf("line %d fields %v, want %v", i+1, got, wantKeys[i])
		}
		decoded = append(decoded, m)
	}
	meta := decoded[0]
	if meta["_type"] != "metadata" || meta["key"] != key || meta["last_consolidated"] != 0.0 ||
		!reflect.DeepEqual(meta["metadata"], map[string]any{}) || meta["created_at"] != meta["updated_at"] {
		t.Errorf("metadata %v", meta)
	}
	for _, f := range []string{"created_at", "updated_at"} {
		if !timestampRE.MatchString(meta[f].(string)) {
			t.Errorf("%s = %q, not nanobot's format", f, meta[f])
		}
	}
	for i := 1; i < 3; i++ {
		if ts := decoded[i]["timestamp"].(string); !timestampRE.MatchString(ts) {
			t.Errorf("line %d timestamp %q, not nanobot's format", i+1, ts)
		}
	}
	if want := `{"role":"user","content":"two\nlines <b>é</b>","timestamp":"2026-03-15T14:30:00.123456","message_id":"m-2","media":["/tmp/p.png"]}`; lines[3] != want {
		t.Errorf("line 4\n%s\nwant\n%s", lines[3], want)
	}

	sess, err := s.Load(key)
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Warnings) != 0 {
		t.Errorf("warnings %q", sess.Warnings)
	}
	if sess.Meta.Key != key || sess.Meta.CreatedAt != meta["created_at"] || sess.Meta.LastConsolidated != 0 || len(sess.Meta.Metadata) != 0 {
		t.Errorf("meta %+v", sess.Meta)
	}
	user.Timestamp = decoded[1]["timestamp"].(string)
	reply.Timestamp = decoded[2]["timestamp"].(string)
	if want := []Record{user, reply, fixed}; !reflect.DeepEqual(sess.Records, want) {
		t.Errorf("records\n%+v\nwant\n%+v", sess.Records, want)
	}

	// A loaded record with unknown fields is written back with them.
	writeFile(t, pathOf(t, s, "t:k"), metaLine+"\n"+`{"role":"assistant","content":null,"tool_calls":[{"id":"c1"}],"timestamp":"2026-03-15T14:30:01.234567"}`+"\n")
	in, err := s.Load("t:k")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "copy", in.Records...); err != nil {
		t.Fatal(err)
	}
	if got := rawLines(t, pathOf(t, s, "copy"))[1]; got != `{"role":"assistant","content":null,"timestamp":"2026-03-15T14:30:01.234567","tool_calls":[{"id":"c1"}]}` {
		t.Errorf("copied record %s", got)
	}
}

func TestKeysStayInsideDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s, err := Open(filepath.Join(root, "sessions"), Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys := []string{
		"../x", "a/b", "../../etc/passwd", ".", "..", "/abs", "a\\b", "é/ü 日本", "a%2Fb", "%",
		"terminal-dev:local:device-001", "terminal-dev:local:device-001:thread-7",
	}
	for _, k := range keys {
		if err := s.Append(context.Background(), k, Record{Role: "user", Content: k}); err != nil {
			t.Fatalf("append %q: %v", k, err)
		}
	}
	top, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 1 || top[0].Name() != "sessions" {
		t.Errorf("files outside the session dir: %v", top)
	}
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(keys) {
		t.Errorf("%d entries in the session dir, want %d", len(entries), len(keys))
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".jsonl") {
			t.Errorf("unexpected entry %q (%v)", e.Name(), e.Type())
		}
	}
	got := map[string]string{}
	err = s.Scan(func(sess *Session) error {
		if len(sess.Records) != 1 || len(sess.Warnings) != 0 {
			t.Errorf("session %q: %d records, warnings %q", sess.Meta.Key, len(sess.Records), sess.Warnings)
		} else {
			got[sess.Meta.Key] = sess.Records[0].Content
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if got[k] != k {
			t.Errorf("Scan: key %q has %q", k, got[k])
		}
		if sess, err := s.Load(k); err != nil || sess.Meta.Key != k {
			t.Errorf("Load(%q): %v", k, err)
		}
	}
	if len(got) != len(keys) {
		t.Errorf("Scan found %d sessions, want %d", len(got), len(keys))
	}
}

func TestTornLastLine(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	s := openTest(t, Options{Logger: logs.logger()})
	path := pathOf(t, s, "t:k")
	torn := `{"role":"user","content":"half`
	writeFile(t, path, metaLine+"\n"+recLine("one")+"\n"+torn)

	sess, err := s.Load("t:k")
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(sess.Records); !reflect.DeepEqual(got, []string{"one"}) {
		t.Errorf("records %q", got)
	}
	if len(sess.Warnings) != 1 || !strings.HasPrefix(sess.Warnings[0], path+":3: ") || !strings.Contains(sess.Warnings[0], "torn") {
		t.Errorf("warnings %q", sess.Warnings)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "file="+path) || !strings.Contains(l, "line=3") {
		t.Errorf("log %s", l)
	}

	if err := s.Append(context.Background(), "t:k", Record{Role: "user", Content: "two"}); err != nil {
		t.Fatal(err)
	}
	lines := rawLines(t, path)
	if len(lines) != 4 || lines[2] != torn || !strings.HasPrefix(lines[3], `{"role":"user","content":"two",`) {
		t.Fatalf("after append:\n%s", strings.Join(lines, "\n"))
	}
	sess, err = s.Load("t:k")
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(sess.Records); !reflect.DeepEqual(got, []string{"one", "two"}) {
		t.Errorf("records %q", got)
	}
	if len(sess.Warnings) != 1 || !strings.HasPrefix(sess.Warnings[0], path+":3: ") {
		t.Errorf("warnings %q", sess.Warnings)
	}
	// The handle is cached now; the next append needs no newline.
	if err := s.Append(context.Background(), "t:k", Record{Role: "user", Content: "three"}); err != nil {
		t.Fatal(err)
	}
	if n := len(rawLines(t, path)); n != 5 {
		t.Errorf("%d lines, want 5", n)
	}
}

func TestTolerantLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		content  string
		key      string   // want; "" means the file's key "t:k"
		records  []string // contents
		warnings []string // substrings, in order, one per warning
	}{
		{
			name:    "clean",
			content: metaLine + "\n" + recLine("a") + "\n" + recLine("b") + "\n",
			records: []string{"a", "b"},
		},
		{
			name:     "garbage middle line",
			content:  metaLine + "\n" + recLine("a") + "\nnot json at all\n" + recLine("b") + "\n",
			records:  []string{"a", "b"},
			warnings: []string{":3: invalid line"},
		},
		{
			name:     "non-object lines",
			content:  metaLine + "\n[1]\nnull\n42\n\"s\"\n" + recLine("a") + "\n{\"a\":1}{\"b\":2}\n",
			records:  []string{"a"},
			warnings: []string{":2: invalid", ":3: invalid", ":4: invalid", ":5: invalid", ":7: invalid"},
		},
		{
			name:    "blank lines and CRLF",
			content: "\n" + metaLine + "\r\n  \r\n" + recLine("a") + "\r\n\n\n",
			records: []string{"a"},
		},
		{
			name:     "no metadata line",
			content:  recLine("a") + "\n" + recLine("b") + "\n",
			records:  []string{"a", "b"},
			warnings: []string{":1: first line is not a metadata record"},
		},
		{
			name:     "metadata after a torn first line",
			content:  `{"_type":"meta` + "\n" + strings.Replace(metaLine, "t:k", "other", 1) + "\n" + recLine("a") + "\n",
			key:      "other",
			records:  []string{"a"},
			warnings: []string{":1: invalid line", ":2: metadata record is not the first line", "differs from the key of the file name"},
		},
		{
			name:     "second metadata line ignored",
			content:  metaLine + "\n" + recLine("a") + "\n" + strings.Replace(metaLine, "t:k", "other", 1) + "\n",
			records:  []string{"a"},
			warnings: []string{":3: metadata record after the first record ignored"},
		},
		{
			name:     "metadata key of the wrong type",
			content:  `{"_type":"metadata","key":7}` + "\n" + recLine("a") + "\n",
			records:  []string{"a"},
			warnings: []string{":1: metadata record has no key"},
		},
		{
			name:     "empty file",
			content:  "",
			warnings: []string{"empty session file"},
		},
		{
			name:     "only whitespace",
			content:  "\n \n\t",
			warnings: []string{"empty session file"},
		},
		{
			name:     "only a torn metadata line",
			content:  `{"_type":"metadata","ke`,
			warnings: []string{":1: invalid line skipped (torn last line)", ":1: first line is not a metadata record"},
		},
		{
			name:    "last line complete without newline",
			content: metaLine + "\n" + recLine("a"),
			records: []string{"a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTest(t, Options{})
			path := pathOf(t, s, "t:k")
			writeFile(t, path, tt.content)
			sess, err := s.Load("t:k")
			if err != nil {
				t.Fatal(err)
			}
			wantKey := tt.key
			if wantKey == "" {
				wantKey = "t:k"
			}
			if sess.Meta.Key != wantKey {
				t.Errorf("key %q, want %q", sess.Meta.Key, wantKey)
			}
			if sess.Meta.Metadata == nil {
				t.Error("nil Meta.Metadata")
			}
			if got := contents(sess.Records); len(got)+len(tt.records) > 0 && !reflect.DeepEqual(got, tt.records) {
				t.Errorf("records %q, want %q", got, tt.records)
			}
			if len(sess.Warnings) != len(tt.warnings) {
				t.Fatalf("warnings %q, want %q", sess.Warnings, tt.warnings)
			}
			for i, w := range tt.warnings {
				if !strings.HasPrefix(sess.Warnings[i], path) || !strings.Contains(sess.Warnings[i], w) {
					t.Errorf("warning %d %q, want %q", i, sess.Warnings[i], w)
				}
			}
		})
	}
}

func TestLongLines(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{maxLine: 100})
	path := pathOf(t, s, "t:k")
	long := `{"role":"user","content":"` + strings.Repeat("x", 200) + `"}`
	writeFile(t, path, metaLine[:0]+`{"_type":"metadata","key":"t:k"}`+"\n"+long+"\n"+recLine("a")+"\n"+long)
	sess, err := s.Load("t:k")
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(sess.Records); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("records %q", got)
	}
	if len(sess.Warnings) != 2 || !strings.Contains(sess.Warnings[0], ":2: line longer than 100 bytes") ||
		!strings.Contains(sess.Warnings[1], ":4: line longer than 100 bytes skipped (torn last line)") {
		t.Errorf("warnings %q", sess.Warnings)
	}
	err = s.Append(context.Background(), "t:k", Record{Role: "user", Content: strings.Repeat("y", 100)})
	if err == nil || !strings.Contains(err.Error(), "over the 100-byte line limit") {
		t.Errorf("append of a too long record: %v", err)
	}
}

// TestMaxLineSize: a line of exactly the limit is read, one byte more
// is skipped, for a limit many read buffers long (the line reader's 64
// KiB buffer fills 16 times), and a store opened without a limit takes
// MaxLineSize (16 MiB: writing and decoding lines that long took 8 to 25
// s under the race detector).
func TestMaxLineSize(t *testing.T) {
	t.Parallel()
	if got := openTest(t, Options{}).maxLine; got != MaxLineSize {
		t.Fatalf("a store opened without a limit reads lines of up to %d bytes, want MaxLineSize (%d)", got, MaxLineSize)
	}
	const limit = 1<<20 + 3
	s := openTest(t, Options{maxLine: limit})
	fill := func(n int) string {
		head, tail := `{"role":"user","content":"`, `"}`
		return head + strings.Repeat("z", n-len(head)-len(tail)) + tail
	}
	ok, over := fill(limit), fill(limit+1)
	writeFile(t, pathOf(t, s, "t:k"), metaLine+"\n"+over+"\n"+ok+"\n"+recLine("a")+"\n")
	sess, err := s.Load("t:k")
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Records) != 2 || len(sess.Records[0].Content) != limit-28 || sess.Records[1].Content != "a" {
		t.Errorf("%d records", len(sess.Records))
	}
	if len(sess.Warnings) != 1 || !strings.Contains(sess.Warnings[0], ":2: line longer than") {
		t.Errorf("warnings %q", sess.Warnings)
	}
}

func TestScan(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	s := openTest(t, Options{Logger: logs.logger()})
	ctx := context.Background()
	for _, k := range []string{"b:1", "a:2", "a/3"} {
		if err := s.Append(ctx, k, Record{Role: "user", Content: k}, Record{Role: "assistant", Content: "re " + k}); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(s.Dir(), "empty.jsonl"), "")
	writeFile(t, filepath.Join(s.Dir(), "x%2Fy.jsonl"), recLine("no meta")+"\n")
	writeFile(t, filepath.Join(s.Dir(), "odd name.jsonl"), recLine("odd")+"\n")
	writeFile(t, filepath.Join(s.Dir(), "notes.txt"), "not a session\n")
	if err := os.Mkdir(filepath.Join(s.Dir(), "dir.jsonl"), 0o700); err != nil {
		t.Fatal(err)
	}

	got := map[string][]string{}
	err := s.Scan(func(sess *Session) error {
		got[sess.Meta.Key] = contents(sess.Records)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"b:1": {"b:1", "re b:1"}, "a:2": {"a:2", "re a:2"}, "a/3": {"a/3", "re a/3"},
		"x/y": {"no meta"}, "odd name": {"odd"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Scan got %q\nwant %q", got, want)
	}
	if l := logs.String(); !strings.Contains(l, "empty session file") || !strings.Contains(l, "empty.jsonl") {
		t.Errorf("no warning for the empty file:\n%s", l)
	}

	stop := errors.New("stop")
	calls := 0
	err = s.Scan(func(*Session) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("Scan with failing fn: %v after %d calls", err, calls)
	}
}

func TestConcurrentSameKeyOrder(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	const writers, each = 20, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := s.Append(context.Background(), "same", Record{Role: "user", Content: fmt.Sprintf("%d-%d", w, i)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sess, err := s.Load("same")
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Records) != writers*each {
		t.Fatalf("%d records, want %d", len(sess.Records), writers*each)
	}
	next := make([]int, writers)
	for _, r := range sess.Records {
		var w, i int
		if _, err := fmt.Sscanf(r.Content, "%d-%d", &w, &i); err != nil {
			t.Fatal(err)
		}
		if i != next[w] {
			t.Fatalf("writer %d: record %d after %d", w, i, next[w]-1)
		}
		next[w]++
	}
}

// TestGroupCommit proves that concurrent appends share fsyncs: 1000
// appends to 50 sessions from 1000 goroutines, on a disk whose fsync takes
// a millisecond, need far fewer than 1000 fsyncs.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{syncHook: func(f *os.File) error {
		time.Sleep(time.Millisecond)
		return f.Sync()
	}})
	const appends, sessions = 1000, 50
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, appends)
	for i := 0; i < appends; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- s.Append(context.Background(), fmt.Sprintf("dev:%d", i%sessions), Record{Role: "user", Content: fmt.Sprint(i)})
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	t.Logf("%d appends: %d batches, %d file fsyncs, %d dir fsyncs", appends, st.Batches, st.FileSyncs, st.DirSyncs)
	if st.Appends != appends || st.Records != appends {
		t.Errorf("stats %+v", st)
	}
	if st.FileSyncs >= appends/2 {
		t.Errorf("%d fsyncs for %d appends: no group commit", st.FileSyncs, appends)
	}
	if st.DirSyncs >= sessions {
		t.Errorf("%d directory fsyncs for %d new files", st.DirSyncs, sessions)
	}
	total := 0
	if err := s.Scan(func(sess *Session) error { total += len(sess.Records); return nil }); err != nil {
		t.Fatal(err)
	}
	if total != appends {
		t.Errorf("Scan found %d records, want %d", total, appends)
	}
}

func TestUpdateMetadata(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if err := s.Append(ctx, "u:1", Record{Role: "user", Content: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := s.Load("u:1")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // updated_at must move
	err = s.UpdateMetadata(ctx, "u:1", func(m map[string]any) {
		m["title"] = "x"
		m["n"] = 1
	})
	if err != nil {
		t.Fatal(err)
	}
	// The cached append handle must not point at the replaced file.
	if err := s.Append(ctx, "u:1", Record{Role: "user", Content: "5"}); err != nil {
		t.Fatal(err)
	}
	var seen map[string]any
	if err := s.UpdateMetadata(ctx, "u:1", func(m map[string]any) { seen = maps.Clone(m); m["n"] = 2 }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, map[string]any{"title": "x", "n": json.Number("1")}) {
		t.Errorf("fn saw %v", seen)
	}
	after, err := s.Load("u:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(after.Records); !reflect.DeepEqual(got, []string{"0", "1", "2", "3", "4", "5"}) {
		t.Errorf("records %q", got)
	}
	if !reflect.DeepEqual(after.Records[:5], before.Records) {
		t.Error("records changed")
	}
	m := after.Meta
	if m.Key != "u:1" || m.CreatedAt != before.Meta.CreatedAt || m.UpdatedAt <= before.Meta.UpdatedAt ||
		!reflect.DeepEqual(m.Metadata, map[string]any{"title": "x", "n": json.Number("2")}) || len(after.Warnings) != 0 {
		t.Errorf("meta %+v, warnings %q", m, after.Warnings)
	}
	if l := rawLines(t, pathOf(t, s, "u:1"))[0]; !strings.HasPrefix(l, `{"_type":"metadata","key":"u:1",`) || !strings.Contains(l, `"metadata":{"n":2,"title":"x"},"last_consolidated":0}`) {
		t.Errorf("metadata line %s", l)
	}
	if st := s.Stats(); st.OpenFiles != 0 {
		t.Errorf("%d open files after rewrite", st.OpenFiles)
	}
	if tmps, _ := filepath.Glob(filepath.Join(s.Dir(), tempPattern)); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

func TestUpdateMetadataKeepsEverything(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	path := pathOf(t, s, "t:k")
	meta := `{"_type":"metadata","key":"t:k","created_at":"2026-03-01T10:00:00","updated_at":"2026-03-01T10:00:00","metadata":{"big":12345678901234567890},"last_consolidated":42,"extra":[1]}`
	tool := `{"role":"assistant","content":null,"tool_calls":[{"id":"c"}]}`
	writeFile(t, path, meta+"\n"+recLine("a")+"\ngarbage\n"+tool+"\n\n"+`{"role":"user","con`)
	if err := s.UpdateMetadata(context.Background(), "t:k", func(m map[string]any) { m["x"] = true }); err != nil {
		t.Fatal(err)
	}
	lines := rawLines(t, path)
	want := []string{"", recLine("a"), "garbage", tool, `{"role":"user","con`}
	if len(lines) != len(want) {
		t.Fatalf("lines:\n%s", strings.Join(lines, "\n"))
	}
	for i := 1; i < len(want); i++ {
		if lines[i] != want[i] {
			t.Errorf("line %d %s, want %s", i+1, lines[i], want[i])
		}
	}
	if !regexp.MustCompile(`^\{"_type":"metadata","key":"t:k","created_at":"2026-03-01T10:00:00","updated_at":"[^"]+","metadata":\{"big":12345678901234567890,"x":true\},"last_consolidated":42,"extra":\[1\]\}$`).MatchString(lines[0]) {
		t.Errorf("metadata line %s", lines[0])
	}
}

func TestUpdateMetadataNewAndPanic(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	ctx := context.Background()
	if err := s.UpdateMetadata(ctx, "new:1", func(m map[string]any) { m["a"] = "b" }); err != nil {
		t.Fatal(err)
	}
	sess, err := s.Load("new:1")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Meta.Key != "new:1" || sess.Meta.Metadata["a"] != "b" || !timestampRE.MatchString(sess.Meta.CreatedAt) || len(sess.Records) != 0 || len(sess.Warnings) != 0 {
		t.Errorf("session %+v", sess)
	}
	if err := s.Append(ctx, "new:1", Record{Role: "user", Content: "x"}); err != nil {
		t.Fatal(err)
	}
	if n := len(rawLines(t, pathOf(t, s, "new:1"))); n != 2 {
		t.Errorf("%d lines, want 2", n)
	}
	before, _ := os.ReadFile(pathOf(t, s, "new:1"))
	err = s.UpdateMetadata(ctx, "new:1", func(m map[string]any) { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "session: update metadata new:1: ") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panicking fn: %v", err)
	}
	if after, _ := os.ReadFile(pathOf(t, s, "new:1")); string(after) != string(before) {
		t.Error("file changed by a failed update")
	}
	if err := s.Append(ctx, "new:1", Record{Role: "user", Content: "y"}); err != nil {
		t.Errorf("append after a failed update: %v", err)
	}
}

func TestEmptyFileGetsMetadata(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	path := pathOf(t, s, "t:k")
	writeFile(t, path, "")
	if err := s.Append(context.Background(), "t:k", Record{Role: "user", Content: "a"}); err != nil {
		t.Fatal(err)
	}
	sess, err := s.Load("t:k")
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Warnings) != 0 || len(sess.Records) != 1 || !strings.HasPrefix(rawLines(t, path)[0], `{"_type":"metadata","key":"t:k",`) {
		t.Errorf("session %+v", sess)
	}
}

func TestLoadMissing(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	_, err := s.Load("nobody:1")
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "session: load nobody:1: ") {
		t.Errorf("Load of a missing session: %v", err)
	}
	if _, err := s.Load(""); err == nil {
		t.Error("Load(\"\") did not fail")
	}
}

func TestAppendErrors(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	ctx := context.Background()
	path := pathOf(t, s, "terminal-dev:local:x")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	err := s.Append(ctx, "terminal-dev:local:x", Record{Role: "user", Content: "a"})
	if err == nil || !strings.HasPrefix(err.Error(), "session: append terminal-dev:local:x: open "+path+": ") {
		t.Errorf("append to a directory: %v", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != path {
		t.Errorf("error %v does not carry the path", err)
	}
	if err := s.Append(ctx, "", Record{}); err == nil || !strings.Contains(err.Error(), "empty session key") {
		t.Errorf("empty key: %v", err)
	}
	if err := s.Append(ctx, "k", Record{Extra: map[string]any{"bad": make(chan int)}}); err == nil || !strings.HasPrefix(err.Error(), "session: append k: record 0: ") {
		t.Errorf("unencodable record: %v", err)
	}
	// The store keeps working.
	if err := s.Append(ctx, "ok", Record{Role: "user", Content: "a"}); err != nil {
		t.Error(err)
	}
	if err := s.Append(ctx, "ok"); err != nil {
		t.Errorf("append of nothing: %v", err)
	}
}

func TestAppendAfterClose(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	ctx := context.Background()
	if err := s.Append(ctx, "k", Record{Role: "user", Content: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "k", Record{Role: "user", Content: "b"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if err := s.Append(ctx, "k"); !errors.Is(err, ErrClosed) {
		t.Errorf("empty Append after Close: %v", err)
	}
	if err := s.UpdateMetadata(ctx, "k", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("UpdateMetadata after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if sess, err := s.Load("k"); err != nil || len(sess.Records) != 1 {
		t.Errorf("Load after Close: %v", err)
	}
}

// blockingSync returns a sync hook that blocks every fsync until release
// is closed, and a channel that receives once per fsync started.
func blockingSync() (hook func(*os.File) error, started chan struct{}, release chan struct{}) {
	started = make(chan struct{}, 1000)
	release = make(chan struct{})
	return func(f *os.File) error {
		started <- struct{}{}
		<-release
		return f.Sync()
	}, started, release
}

func TestCloseFlushesQueued(t *testing.T) {
	t.Parallel()
	hook, started, release := blockingSync()
	s := openTest(t, Options{syncHook: hook})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- s.Append(ctx, "k", Record{Role: "user", Content: "first"}) }()
	<-started // the writer is inside the first batch's fsync
	const queued = 20
	results := make(chan error, queued)
	for i := 0; i < queued; i++ {
		go func() { results <- s.Append(ctx, "k", Record{Role: "user", Content: fmt.Sprint(i)}) }()
	}
	// Wait until they are queued, then close while the writer is blocked.
	testwait.UntilOK(t, fmt.Sprintf("%d appends queued", queued), func() error {
		if n := len(s.reqs); n < queued {
			return fmt.Errorf("%d queued", n)
		}
		return nil
	})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < queued; i++ {
		if err := <-results; err != nil {
			t.Errorf("queued append: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	sess, err := s.Load("k")
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Records) != queued+1 {
		t.Errorf("%d records after Close, want %d", len(sess.Records), queued+1)
	}
}

func TestContextDone(t *testing.T) {
	t.Parallel()
	hook, started, release := blockingSync()
	s := openTest(t, Options{syncHook: hook})

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Append(cancelled, "never", Record{Role: "user", Content: "x"}); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "session: append never: ") {
		t.Errorf("Append with a cancelled ctx: %v", err)
	}
	if err := s.UpdateMetadata(cancelled, "never", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("UpdateMetadata with a cancelled ctx: %v", err)
	}
	if _, err := os.Stat(pathOf(t, s, "never")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cancelled append created the file: %v", err)
	}

	first := make(chan error, 1)
	go func() { first <- s.Append(context.Background(), "k", Record{Role: "user", Content: "first"}) }()
	<-started // the writer is stuck in fsync
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	// The writer stays stuck until release: only the deadline can end
	// this Append, and it must end it before the stuck write finishes.
	late := make(chan error, 1)
	go func() { late <- s.Append(short, "k", Record{Role: "user", Content: "late"}) }()
	select {
	case err := <-late:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Append past its deadline: %v", err)
		}
	case <-time.After(testwait.Deadline):
		close(release)
		t.Fatal("Append waited for a stuck writer past its deadline")
	}
	select {
	case err := <-first:
		t.Fatalf("the stuck write finished before release: %v", err)
	default:
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The late append was dropped by the writer: its ctx was done when its
	// batch started.
	sess, err := s.Load("k")
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(sess.Records); !reflect.DeepEqual(got, []string{"first"}) {
		t.Errorf("records %q", got)
	}
}

func TestOpenFilesLRU(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{MaxOpenFiles: 2})
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		for k := 0; k < 5; k++ {
			if err := s.Append(ctx, fmt.Sprintf("k:%d", k), Record{Role: "user", Content: fmt.Sprint(round)}); err != nil {
				t.Fatal(err)
			}
			// Eviction runs right after the waiters are answered, so one
			// more may be open for a moment.
			if n := s.Stats().OpenFiles; n > 3 {
				t.Fatalf("%d open files, limit 2", n)
			}
		}
	}
	for k := 0; k < 5; k++ {
		sess, err := s.Load(fmt.Sprintf("k:%d", k))
		if err != nil {
			t.Fatal(err)
		}
		if got := contents(sess.Records); !reflect.DeepEqual(got, []string{"0", "1", "2"}) || len(sess.Warnings) != 0 {
			t.Errorf("k:%d: records %q, warnings %q", k, got, sess.Warnings)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().OpenFiles; n != 0 {
		t.Errorf("%d files open after Close", n)
	}
}

func TestOpenRemovesStaleTemp(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "sessions")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".session-123.tmp")
	writeFile(t, stale, "half")
	s, err := Open(dir, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale temporary file kept: %v", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v", fi.Mode().Perm())
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		s, err := Open(filepath.Join(t.TempDir(), "sessions"), Options{Logger: quietLogger(), NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for j := 0; j < 20; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Append(context.Background(), fmt.Sprintf("k:%d", j%3), Record{Role: "user", Content: "x"})
			}()
		}
		wg.Wait()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Not parallel: it counts the process's goroutines.
	testwait.UntilOK(t, "the store's goroutines to end", func() error {
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			return fmt.Errorf("%d goroutines, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
		return nil
	})
}

func TestConcurrentLoadSeesWholeLines(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{NoSync: true})
	ctx := context.Background()
	big := strings.Repeat("b", 32<<10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			if err := s.Append(ctx, "k", Record{Role: "user", Content: big}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for loads := 0; ; loads++ {
		select {
		case <-done:
			return
		default:
		}
		sess, err := s.Load("k")
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(sess.Warnings) != 0 {
			t.Fatalf("load %d: warnings %q", loads, sess.Warnings)
		}
	}
}
