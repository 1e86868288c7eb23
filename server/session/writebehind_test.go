package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func openWB(t *testing.T, opt Options) *Store {
	t.Helper()
	if !haveSyncFS {
		t.Skip("WriteBehind needs syncfs(2)")
	}
	opt.SyncLater, opt.WriteBehind = true, true
	return openTest(t, opt)
}

func appendOne(t *testing.T, s *Store, key, content string) {
	t.Helper()
	lines, err := EncodeRecords([]Record{{Role: "user", Content: content, MessageID: content}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEncoded(context.Background(), key, lines, 1); err != nil {
		t.Fatal(err)
	}
}

// fileContents lists the contents of the records in key's file, read
// directly (not through the store).
func fileContents(t *testing.T, s *Store, key string) []string {
	t.Helper()
	data, err := os.ReadFile(pathOf(t, s, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if strings.HasPrefix(l, `{"_type"`) || l == "" {
			continue
		}
		recs, err := DecodeRecords([]byte(l + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		out = append(out, recs[0].Content)
	}
	return out
}

// An append with WriteBehind writes nothing; every kind of read through
// the store sees it at once (before any Sync), because the read writes
// the file's pending lines first.
func TestWriteBehindReadsSeePendingLines(t *testing.T) {
	t.Parallel()
	s := openWB(t, Options{})
	reads := map[string]func(key string) ([]string, error){
		"load": func(key string) ([]string, error) {
			sess, err := s.Load(key)
			if err != nil {
				return nil, err
			}
			return contents(sess.Records), nil
		},
		"tail": func(key string) ([]string, error) {
			sess, err := s.Tail(key, 10)
			if err != nil {
				return nil, err
			}
			return contents(sess.Records), nil
		},
		"tailmessages": func(key string) ([]string, error) {
			sess, err := s.TailMessages(key, 10, 0)
			if err != nil {
				return nil, err
			}
			return contents(sess.Records), nil
		},
		"scan": func(key string) ([]string, error) {
			var got []string
			err := s.Scan(func(sess *Session) error {
				if sess.Meta.Key == key {
					got = contents(sess.Records)
				}
				return nil
			})
			return got, err
		},
		"scantails": func(key string) ([]string, error) {
			var got []string
			err := s.ScanTails(10, func(sess *Session) error {
				if sess.Meta.Key == key {
					got = contents(sess.Records)
				}
				return nil
			})
			return got, err
		},
		"updatemetadata": func(key string) ([]string, error) {
			if err := s.UpdateMetadata(context.Background(), key, func(m map[string]any) { m["x"] = "y" }); err != nil {
				return nil, err
			}
			sess, err := s.Load(key)
			if err != nil {
				return nil, err
			}
			if sess.Meta.Metadata["x"] != "y" {
				return nil, fmt.Errorf("metadata %v", sess.Meta.Metadata)
			}
			return contents(sess.Records), nil
		},
	}
	// Plain keys, escaped ones and hashed ones (the file name does not
	// say the key): pending lines are kept by key, not by file name.
	keys := map[string]func(kind string) string{
		"plain":   func(kind string) string { return "t:wb:" + kind },
		"escaped": func(kind string) string { return "t/wb %" + kind },
		"hashed":  func(kind string) string { return "t:wb:" + kind + ":" + strings.Repeat("x/", 200) },
	}
	for shape, keyOf := range keys {
		for kind, read := range reads {
			key := keyOf(kind)
			t.Logf("%s key, %s", shape, kind)
			checkWriteBehindRead(t, s, kind, key, read)
		}
	}
	if st := s.Stats(); st.FSSyncs != 0 || st.Pending != 0 {
		t.Fatalf("stats %+v: reads synced or left lines pending", st)
	}
}

func checkWriteBehindRead(t *testing.T, s *Store, kind, key string, read func(key string) ([]string, error)) {
	t.Helper()
	{
		appendOne(t, s, key, "first")
		if got := fileContents(t, s, key); got != nil {
			t.Fatalf("%s: the append wrote the file at once: %v", kind, got)
		}
		got, err := read(key)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if strings.Join(got, ",") != "first" {
			t.Fatalf("%s after a new file's append: %v, want [first]", kind, got)
		}
		appendOne(t, s, key, "second") // to an existing file
		got, err = read(key)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if strings.Join(got, ",") != "first,second" {
			t.Fatalf("%s after an append to an existing file: %v, want [first second]", kind, got)
		}
	}
}

// An append with WriteBehind to a session with pending lines allocates
// nothing: the lines go after the pending ones and no file name is
// derived (it was once per append, FileName's key+".jsonl").
func TestWriteBehindAppendAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	s := openWB(t, Options{})
	const key = "terminal-dev:local:dev-0001"
	lines, err := EncodeRecords([]Record{{Role: "user", Content: "hello", MessageID: "m-1"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A buffer big enough for every append below, reused from the flush.
	for range 200 {
		if err := s.AppendEncoded(ctx, key, lines, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() { // its first run (not counted) takes the session's pending entry
		if err := s.AppendEncoded(ctx, key, lines, 1); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per append, want 0", allocs)
	}
}

// Sync writes every pending line (one write per file) before its syncfs;
// appends interleaved with Syncs and reads land in order; Close writes
// what is left.
func TestWriteBehindOrderAndClose(t *testing.T) {
	t.Parallel()
	s := openWB(t, Options{})
	keys := []string{"t:o:a", "t:o:b", "t:o:c"}
	want := map[string][]string{}
	for i := range 30 {
		for _, k := range keys {
			c := fmt.Sprintf("%s-%d", k, i)
			appendOne(t, s, k, c)
			want[k] = append(want[k], c)
		}
		switch i % 5 {
		case 1:
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if got := fileContents(t, s, k); strings.Join(got, ",") != strings.Join(want[k], ",") {
					t.Fatalf("after Sync %s holds %v, want %v", k, got, want[k])
				}
			}
		case 3:
			if _, err := s.Tail(keys[1], 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := fileContents(t, s, keys[0]); len(got) == len(want[keys[0]]) {
		t.Fatalf("the last appends were written before Sync or Close: %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if got := fileContents(t, s, k); strings.Join(got, ",") != strings.Join(want[k], ",") {
			t.Fatalf("after Close %s holds %v, want %v", k, got, want[k])
		}
	}
}

// A flush whose write fails keeps the lines pending, in order ahead of
// later appends: Sync and reads fail meanwhile, and once writes work
// the file gets every line once, in order.
func TestWriteBehindFailedFlushIsRetriedInOrder(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	s := openWB(t, Options{FailWrite: func(key string) error {
		if failing.Load() && key == "t:f:bad" {
			return errors.New("no space left on device (injected)")
		}
		return nil
	}})
	appendOne(t, s, "t:f:bad", "a")
	if err := s.Sync(); err != nil { // the file exists: the next write appends
		t.Fatal(err)
	}
	appendOne(t, s, "t:f:bad", "b")
	appendOne(t, s, "t:f:good", "g")
	failing.Store(true)
	if err := s.Sync(); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Sync with a failing write: %v", err)
	}
	if got := fileContents(t, s, "t:f:good"); strings.Join(got, ",") != "g" {
		t.Fatalf("the other file: %v, want [g]", got)
	}
	appendOne(t, s, "t:f:bad", "c")
	if _, err := s.Load("t:f:bad"); err == nil {
		t.Fatal("a read whose pending lines cannot be written succeeded: it read a stale file")
	}
	if st := s.Stats(); st.Pending == 0 {
		t.Fatalf("stats %+v: the failed lines are not pending", st)
	}
	failing.Store(false)
	appendOne(t, s, "t:f:bad", "d")
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := fileContents(t, s, "t:f:bad"); strings.Join(got, ",") != "a,b,c,d" {
		t.Fatalf("after the retry: %v, want [a b c d]", got)
	}
}

// Past MaxPending an append writes every pending line itself, so memory
// stays bounded without a Sync; while that write fails, an append that
// would pass the bound fails and takes nothing.
func TestWriteBehindBound(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	const bound = 4 << 10
	s := openWB(t, Options{MaxPending: bound, FailWrite: func(string) error {
		if failing.Load() {
			return errors.New("no space left on device (injected)")
		}
		return nil
	}})
	n := 0
	for s.Stats().Flushes == 0 {
		appendOne(t, s, fmt.Sprintf("t:b:%d", n%7), fmt.Sprintf("m-%d-%s", n, strings.Repeat("x", 100)))
		n++
		if p := s.Stats().Pending; p > bound {
			t.Fatalf("%d bytes pending, over the %d-byte bound", p, bound)
		}
		if n > 1000 {
			t.Fatal("no flush after 1000 appends")
		}
	}
	if got := fileContents(t, s, "t:b:0"); len(got) == 0 {
		t.Fatal("the bound's flush wrote nothing")
	}
	failing.Store(true)
	var err error
	for i := 0; err == nil; i++ {
		lines, _ := EncodeRecords([]Record{{Role: "user", Content: strings.Repeat("y", 100), MessageID: fmt.Sprint(i)}})
		err = s.AppendEncoded(context.Background(), "t:b:0", lines, 1)
		if i > 1000 {
			t.Fatal("appends past the bound keep succeeding while writes fail")
		}
	}
	if !strings.Contains(err.Error(), "injected") {
		t.Fatalf("append past the bound: %v", err)
	}
	if p := s.Stats().Pending; p > bound {
		t.Fatalf("%d bytes pending, over the %d-byte bound", p, bound)
	}
	failing.Store(false)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

// Appenders, readers and Syncs at once (run with -race): a reader sees
// every append its goroutine's appender finished before the read, and
// each file ends with every line once, in order.
func TestWriteBehindConcurrent(t *testing.T) {
	t.Parallel()
	s := openWB(t, Options{MaxPending: 16 << 10})
	const appenders, each = 4, 200
	last := make([]atomic.Int64, appenders)
	for i := range last {
		last[i].Store(-1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("t:c:%d", a)
			for i := range each {
				lines, _ := EncodeRecords([]Record{{Role: "user", Content: fmt.Sprint(i), MessageID: fmt.Sprint(i)}})
				if err := s.AppendEncoded(context.Background(), key, lines, 1); err != nil {
					errs <- err
					return
				}
				last[a].Store(int64(i))
				if i%10 == 0 { // its own append, read at once
					sess, err := s.TailMessages(key, 1, 0)
					if err != nil {
						errs <- err
						return
					}
					if r := sess.Records; len(r) == 0 || r[len(r)-1].Content != fmt.Sprint(i) {
						errs <- fmt.Errorf("%s read right after append %d: %+v", key, i, r)
						return
					}
				}
			}
		}()
	}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { // reader
		defer bg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			a := n % appenders
			want := last[a].Load()
			sess, err := s.TailMessages(fmt.Sprintf("t:c:%d", a), 5, 0)
			if errors.Is(err, fs.ErrNotExist) && want < 0 {
				continue
			}
			if err != nil {
				errs <- err
				return
			}
			got := int64(-1)
			if r := sess.Records; len(r) > 0 {
				fmt.Sscan(r[len(r)-1].Content, &got)
			}
			if got < want {
				errs <- fmt.Errorf("read of t:c:%d ends at %d, after append %d returned", a, got, want)
				return
			}
		}
	}()
	go func() { // checkpoints
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Sync(); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	bg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for a := range appenders {
		got := fileContents(t, s, fmt.Sprintf("t:c:%d", a))
		if len(got) != each {
			t.Fatalf("t:c:%d has %d records, want %d", a, len(got), each)
		}
		for i, c := range got {
			if c != fmt.Sprint(i) {
				t.Fatalf("t:c:%d record %d is %s: out of order", a, i, c)
			}
		}
	}
}
