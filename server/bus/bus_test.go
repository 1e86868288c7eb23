package bus

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPublishOrderAndBackPressure(t *testing.T) {
	b := New(2)
	ctx := context.Background()
	for i, id := range []string{"m1", "m2"} {
		if err := b.PublishInbound(ctx, Inbound{MessageID: id}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	// The queue is full: a third publish waits until its context ends.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := b.PublishInbound(short, Inbound{MessageID: "m3"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish on full queue = %v, want deadline exceeded", err)
	}
	if got := (<-b.Inbound()).MessageID; got != "m1" {
		t.Fatalf("first out %q, want m1", got)
	}
	if got := (<-b.Inbound()).MessageID; got != "m2" {
		t.Fatalf("second out %q, want m2", got)
	}
	b.Close()
	if err := b.PublishOutbound(ctx, Outbound{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after close = %v, want ErrClosed", err)
	}
	b.Close() // twice is fine
}

func TestChatID(t *testing.T) {
	m := Inbound{PeerID: "dev1"}
	if m.ChatID() != "dev1" {
		t.Fatal(m.ChatID())
	}
	m.ThreadID = "t2"
	if m.ChatID() != "dev1:t2" {
		t.Fatal(m.ChatID())
	}
}
