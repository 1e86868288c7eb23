package agent

import (
	"context"
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
