package logring

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Tail keeps the newest bytes across wrap-arounds, and starts at a line
// boundary: the partial first line is left out, a whole one is kept, and
// one line longer than n comes cut.
func TestTail(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		writes []string
		n      int
		want   string
	}{
		{"empty", 16, nil, 10, ""},
		{"all, from the start", 64, []string{"a 1\n", "b 2\n"}, 0, "a 1\nb 2\n"},
		{"the whole log, n past it", 64, []string{"a 1\n", "b 2\n"}, 100, "a 1\nb 2\n"},
		{"a partial line left out", 64, []string{"first line\n", "second\n"}, 10, "second\n"},
		{"the byte before is a newline", 64, []string{"first\n", "second\n"}, 7, "second\n"},
		{"wrapped: oldest dropped", 16, []string{"0123456789\n", "abcdefghij\n"}, 0, "abcdefghij\n"},
		{"wrapped, held line boundary", 16, []string{"aaaa\n", "bbbb\n", "cccc\n", "dddd\n"}, 0, "bbbb\ncccc\ndddd\n"},
		{"wrapped, n inside", 16, []string{"aaaa\n", "bbbb\n", "cccc\n", "dddd\n"}, 12, "cccc\ndddd\n"},
		{"one write larger than the ring", 8, []string{"xxxxxxxxxx\nyyyyy\n"}, 0, "yyyyy\n"},
		{"one line longer than n", 64, []string{"a very long line without end"}, 6, "ut end"},
		{"only a line's end", 64, []string{"a long line\n"}, 5, "line\n"},
	}
	for _, tt := range tests {
		r := New(tt.size)
		for _, w := range tt.writes {
			if n, err := r.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("%s: Write = %d, %v", tt.name, n, err)
			}
		}
		if got := string(r.Tail(tt.n)); got != tt.want {
			t.Errorf("%s: Tail(%d) = %q, want %q", tt.name, tt.n, got, tt.want)
		}
	}
}

// Byte by byte against a plain buffer's end: every size, every write
// length, the ring holds exactly the newest bytes.
func TestRingMatchesBuffer(t *testing.T) {
	for _, size := range []int{1, 2, 7, 64} {
		for _, chunk := range []int{1, 3, 7, 64, 100} {
			r := New(size)
			var all bytes.Buffer
			for i := 0; i < 300; i += chunk {
				var p []byte
				for j := range chunk {
					p = append(p, byte('a'+(i+j)%26))
				}
				r.Write(p)
				all.Write(p)
				want := all.Bytes()[max(0, all.Len()-size):]
				if got := r.Tail(0); !bytes.Equal(got, want) { // no newline: nothing cut
					t.Fatalf("size %d chunk %d after %d bytes: %q, want %q", size, chunk, all.Len(), got, want)
				}
			}
			if r.Written() != int64(all.Len()) || r.Len() != min(size, all.Len()) {
				t.Fatalf("size %d: Written %d Len %d", size, r.Written(), r.Len())
			}
		}
	}
}

// Writers and readers at once (go test -race): every line comes back
// whole, each written by one Write, as slog writes a record.
func TestConcurrentWriters(t *testing.T) {
	r := New(4 << 10)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				fmt.Fprintf(r, "writer=%d line=%d %s\n", w, i, strings.Repeat("x", i%50))
			}
		}()
	}
	stop := make(chan struct{})
	var rd sync.WaitGroup
	rd.Add(1)
	go func() {
		defer rd.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			checkLines(t, r.Tail(1000))
		}
	}()
	wg.Wait()
	close(stop)
	rd.Wait()
	if r.Written() == 0 || r.Len() != 4<<10 {
		t.Fatalf("written %d, held %d", r.Written(), r.Len())
	}
	checkLines(t, r.Tail(0))
}

var lineRE = regexp.MustCompile(`^writer=\d+ line=(\d+) (x*)$`)

func checkLines(t *testing.T, tail []byte) {
	t.Helper()
	if len(tail) == 0 {
		return // nothing written yet: the reader may run first
	}
	if tail[len(tail)-1] != '\n' {
		t.Fatalf("the tail does not end a line: %q", tail)
	}
	for _, l := range strings.Split(strings.TrimSuffix(string(tail), "\n"), "\n") {
		m := lineRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("a torn line in the tail: %q", l)
		}
		if i, _ := strconv.Atoi(m[1]); len(m[2]) != i%50 {
			t.Fatalf("a torn line in the tail: %q", l)
		}
	}
}

// An slog handler on the ring: its records come back as written.
func TestSlog(t *testing.T) {
	r := New(0)
	if r.Size() != DefaultSize {
		t.Fatalf("Size = %d", r.Size())
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(r, io.Discard), nil))
	log.Info("termd starting", "peer_id", "kiosk-1")
	if got := string(r.Tail(1024)); !strings.Contains(got, `msg="termd starting" peer_id=kiosk-1`) {
		t.Fatalf("tail %q", got)
	}
}

// The cost of one log line: an slog record to a discarded output, and
// to the same output and a ring (what termd adds per line).
func BenchmarkLogLine(b *testing.B) {
	for _, c := range []struct {
		name string
		w    io.Writer
	}{{"discard", io.Discard}, {"ring", io.MultiWriter(New(0), io.Discard)}} {
		b.Run(c.name, func(b *testing.B) {
			log := slog.New(slog.NewTextHandler(c.w, nil))
			b.ReportAllocs()
			for b.Loop() {
				log.Info("sent", "message_id", "m-000123", "peer_id", "kiosk-lobby-1", "bytes", 42)
			}
		})
	}
}

// The ring's own cost per 100-byte line.
func BenchmarkWrite(b *testing.B) {
	r := New(0)
	line := []byte(strings.Repeat("x", 99) + "\n")
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		r.Write(line)
	}
}

func BenchmarkTail64K(b *testing.B) {
	r := New(0)
	line := []byte(strings.Repeat("x", 99) + "\n")
	for range 4000 {
		r.Write(line)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Tail(64 << 10)
	}
}
