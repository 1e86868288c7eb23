package events

import (
	"fmt"
	"strings"
	"testing"
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
