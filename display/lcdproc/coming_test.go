package lcdproc

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
)

// A first connection to LCDd that does not come (a peer that closes
// every connection at once) is logged at DEBUG while Opts.ComingFor has
// not passed, then warned about once, and the tries go on quietly.
func TestFirstConnectionComingIsNoWarning(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tt := range []struct {
		name      string
		comingFor time.Duration
		warns     int
	}{
		{"still coming", time.Hour, 0},
		{"past the bound", time.Nanosecond, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := &syncbuf.Buffer{}
			dev := New(Opts{Address: l.Addr().String(), MinRetry: time.Millisecond, MaxRetry: 5 * time.Millisecond, ComingFor: tt.comingFor,
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- dev.Run(ctx) }()
			testwait.Until(t, "six tries", func() bool { return strings.Count(logs.String(), "lcdproc: LCDd") >= 6 })
			cancel()
			<-done
			if n := strings.Count(logs.String(), "level=WARN"); n != tt.warns {
				t.Fatalf("%d warnings, want %d:\n%s", n, tt.warns, logs.String())
			}
		})
	}
}
