package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEcho(t *testing.T) {
	var progress []string
	r := Echo{}.Run(context.Background(), Request{Text: "hi ü"}, func(s string) { progress = append(progress, s) })
	if r.Text != "You said: hi ü" || r.FinishReason != "stop" {
		t.Fatalf("echo = %+v", r)
	}
	if len(progress) != 0 {
		t.Fatalf("no delay, yet progress %v", progress)
	}
	r = Echo{Delay: time.Millisecond}.Run(context.Background(), Request{Text: "x"}, func(s string) { progress = append(progress, s) })
	if r.Text != "You said: x" || len(progress) != 1 {
		t.Fatalf("delayed echo = %+v, progress %v", r, progress)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = Echo{Delay: time.Hour}.Run(ctx, Request{Text: "x"}, nil)
	if r.FinishReason != "cancelled" {
		t.Fatalf("cancelled echo = %+v", r)
	}
}

// With WordGap, echo streams its reply word by word: the chunks add up to
// the reply, spaces included; without Stream the reply is the same.
func TestEchoStreams(t *testing.T) {
	var chunks []string
	req := Request{Text: "  two  words ü", Stream: func(s string) { chunks = append(chunks, s) }}
	r := Echo{WordGap: time.Millisecond}.Run(context.Background(), req, nil)
	want := []string{"You", " said:", "   two", "  words", " ü"}
	if r.Text != "You said:   two  words ü" || r.FinishReason != "stop" || strings.Join(chunks, "") != r.Text || !slices.Equal(chunks, want) {
		t.Fatalf("echo = %+v, chunks %q, want %q", r, chunks, want)
	}
	req.Stream = nil
	if r := (Echo{WordGap: time.Millisecond}).Run(context.Background(), req, nil); r.Text != "You said:   two  words ü" {
		t.Fatalf("echo without Stream = %+v", r)
	}
}

// A cancel mid-stream ends the reply with the words written so far.
func TestEchoStreamCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var chunks []string
	req := Request{Text: strings.Repeat("w ", 50), Stream: func(s string) {
		chunks = append(chunks, s)
		if len(chunks) == 3 {
			cancel()
		}
	}}
	r := Echo{WordGap: time.Millisecond}.Run(ctx, req, nil)
	if r.FinishReason != "cancelled" || r.Text != strings.Join(chunks, "") || len(chunks) != 3 {
		t.Fatalf("echo = %+v after chunks %q, want cancelled with those 3", r, chunks)
	}
}
