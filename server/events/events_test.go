package events

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRingNewestLast(t *testing.T) {
	l := NewLog(3)
	if got := l.Recent(10); len(got) != 0 {
		t.Fatalf("empty log returned %v", got)
	}
	for i := 0; i < 5; i++ {
		l.Add(Event{Event: InboundAccepted, MessageID: fmt.Sprint(i)})
	}
	got := l.Recent(10)
	if len(got) != 3 || got[0].MessageID != "2" || got[2].MessageID != "4" || got[2].Seq != 4 {
		t.Fatalf("Recent(10) = %+v, want messages 2,3,4", got)
	}
	got = l.Recent(2)
	if len(got) != 2 || got[0].MessageID != "3" || got[1].MessageID != "4" {
		t.Fatalf("Recent(2) = %+v, want 3,4", got)
	}
	if l.LastAt().IsZero() {
		t.Fatal("LastAt is zero after events")
	}
	if got := l.Recent(0); len(got) != 0 {
		t.Fatalf("Recent(0) = %v", got)
	}
}

func TestPreviewNeverKeepsFullText(t *testing.T) {
	long := strings.Repeat("ü", 500)
	l := NewLog(1)
	l.Add(Event{Event: InboundAccepted, Preview: long})
	p := l.Recent(1)[0].Preview
	if strings.Count(p, "ü") != PreviewChars || !strings.HasSuffix(p, "…") {
		t.Fatalf("preview %q: want %d runes and an ellipsis", p, PreviewChars)
	}
	if Preview("short") != "short" {
		t.Fatal("short text changed")
	}
}

// Every string field is cut to MaxFieldBytes at a UTF-8 boundary with an
// ellipsis: a 120,000-byte rejected peer_id is quoted, not stored. Issue
// 10, finding 4.
func TestFieldsTruncated(t *testing.T) {
	huge := strings.Repeat("p", 120_000)
	wide := strings.Repeat("€", 100) // 3 bytes a rune: cut inside a rune
	l := NewLog(10)
	l.Add(Event{Event: TerminalRefused, PeerID: huge, SessionID: wide, MessageID: huge,
		RunID: huge, Preview: huge, Detail: "connect refused: bad peer_id " + huge})
	e := l.Recent(1)[0]
	for name, v := range map[string]string{"peer_id": e.PeerID, "session_id": e.SessionID, "message_id": e.MessageID,
		"run_id": e.RunID, "preview": e.Preview, "detail": e.Detail} {
		if len(v) > MaxFieldBytes || !strings.HasSuffix(v, "…") || !utf8.ValidString(v) {
			t.Errorf("%s: %d bytes %q, want at most %d, valid UTF-8, ending in an ellipsis", name, len(v), v, MaxFieldBytes)
		}
	}
	if !strings.HasPrefix(e.Detail, "connect refused: bad peer_id ppp") {
		t.Errorf("detail lost its start: %q", e.Detail)
	}
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 200, "short"},
		{strings.Repeat("a", 200), 200, strings.Repeat("a", 200)},
		{strings.Repeat("a", 201), 200, strings.Repeat("a", 197) + "…"},
		{"ab€€x", 8, "ab€…"},
		{"ab€€", 7, "ab…"},
		{"abc", 2, ""},
	}
	for _, tt := range tests {
		if got := Truncate(tt.in, tt.max); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

// The ring is bounded in bytes too: big events push the oldest out long
// before the count bound, and the log never holds more than its bytes.
func TestRingBoundedInBytes(t *testing.T) {
	const maxBytes = 10_000
	l := NewLogLimits(1000, maxBytes)
	detail := strings.Repeat("d", 10_000)
	for i := 0; i < 1000; i++ {
		l.Add(Event{Event: TerminalRefused, PeerID: detail, Detail: detail, MessageID: fmt.Sprint(i)})
		if b := l.Bytes(); b > maxBytes {
			t.Fatalf("after %d events the log holds %d bytes, over %d", i+1, b, maxBytes)
		}
	}
	got := l.Recent(1000)
	if len(got) == 0 || len(got) >= 1000 || got[len(got)-1].MessageID != "999" || got[len(got)-1].Seq != 999 {
		t.Fatalf("kept %d events, newest %+v; want the newest few", len(got), got[len(got)-1])
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq != got[i-1].Seq+1 {
			t.Fatalf("events out of order: %d then %d", got[i-1].Seq, got[i].Seq)
		}
	}
	// The default bound: the flood of the issue (1,000 events quoting a
	// 120,000-byte peer_id) stays within DefaultMaxBytes.
	l = NewLog(1000)
	huge := strings.Repeat("p", 120_000)
	for i := 0; i < 1000; i++ {
		l.Add(Event{Event: TerminalRefused, PeerID: huge, Detail: "connect refused: invalid peer_id " + huge})
	}
	if b := l.Bytes(); b > DefaultMaxBytes {
		t.Fatalf("default log holds %d bytes", b)
	}
	var sum int
	for _, e := range l.Recent(1000) {
		sum += len(e.PeerID) + len(e.Detail)
	}
	if sum > DefaultMaxBytes {
		t.Fatalf("Recent returns %d bytes of fields", sum)
	}
}

// FuzzTruncate: the cut is never longer than the bound, keeps valid UTF-8
// valid, and leaves short strings alone.
func FuzzTruncate(f *testing.F) {
	for _, s := range []string{"", "short", strings.Repeat("€", 100), "a\xffb"} {
		f.Add(s, 10)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 1000 {
			return
		}
		got := Truncate(s, max)
		if len(got) > max {
			t.Fatalf("Truncate(%q, %d) = %q, %d bytes", s, max, got, len(got))
		}
		if len(s) <= max && got != s {
			t.Fatalf("short string changed: %q -> %q", s, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Truncate(%q, %d) = %q: invalid UTF-8", s, max, got)
		}
	})
}

func TestSubscribe(t *testing.T) {
	l := NewLog(10)
	l.Add(Event{Event: "before"})
	s := l.Subscribe(2)
	defer s.Close()
	l.Add(Event{Event: "one", Detail: strings.Repeat("x", 500)})
	l.Add(Event{Event: "two"})
	if e := <-s.C(); e.Event != "one" || e.Seq != 1 || len(e.Detail) > MaxFieldBytes {
		t.Fatalf("first streamed event %+v", e)
	}
	if e := <-s.C(); e.Event != "two" || e.Seq != 2 {
		t.Fatalf("second streamed event %+v", e)
	}
	for range 3 { // one more than the buffer: dropped, Add never waits
		l.Add(Event{Event: "more"})
	}
	<-s.Done()
	if !s.Lagged() {
		t.Fatal("subscriber that fell behind is not marked lagged")
	}
}
