package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/config"
)

// BenchmarkServerRoundTrip drives the real server (echo agent, session log
// without fsync, so the figure is the CPU and allocation of the message
// path) over loopback WebSockets: 16 devices, each with up to 8 messages
// in flight; one op is one message acked and answered. Run with
// -benchmem; -cpuprofile shows where the server's time goes.
func BenchmarkServerRoundTrip(b *testing.B) { benchRoundTrip(b, true, 16, 8) }

// BenchmarkServerRoundTripDurable is BenchmarkServerRoundTrip with the
// write-ahead log's fsyncs (group commit) on: what every durable record
// on the message path costs (the accepted message, the run's start, the
// reply).
func BenchmarkServerRoundTripDurable(b *testing.B) { benchRoundTrip(b, false, 16, 8) }

// BenchmarkServerRoundTripSerial is one device with one message at a time,
// fsyncs on: the latency of a message alone, where no group commit
// shares a sync.
func BenchmarkServerRoundTripSerial(b *testing.B) { benchRoundTrip(b, false, 1, 1) }

func benchRoundTrip(b *testing.B, noSync bool, devices, window int) {
	cfg := config.Default()
	cfg.Workspace = b.TempDir()
	ch := cfg.Channels["terminal-dev"]
	ch.Config.RatePerPeer, ch.Config.RateBurst = 1<<20, 1<<20 // the bench measures the path, not the limit
	cfg.Channels["terminal-dev"] = ch
	s, err := New(cfg, Options{NoSync: noSync, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	s.Start()
	hs := httptest.NewServer(s.Handler())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
	}()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/api/channels/terminal-dev/ws"
	conns := make([]*websocket.Conn, devices)
	for i := range conns {
		ws, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer ws.Close()
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: fmt.Sprintf("bench-%d", i)})); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ws.ReadMessage(); err != nil {
			b.Fatal(err)
		}
		conns[i] = ws
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, devices)
	for d, ws := range conns {
		n := b.N / devices
		if d < b.N%devices {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := roundTrips(ws, d, n, window); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// roundTrips sends n messages on ws, at most window unanswered, and reads
// until every one has its ack and its reply.
func roundTrips(ws *websocket.Conn, device, n, window int) error {
	_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
	sent, replies, acks := 0, 0, 0
	send := func() error {
		m := &link.Message{MessageID: fmt.Sprintf("d%d-m%d", device, sent), Text: "hello from the bench"}
		sent++
		return ws.WriteMessage(websocket.TextMessage, link.MustEncode(m))
	}
	for sent < n && sent < window {
		if err := send(); err != nil {
			return err
		}
	}
	for replies < n || acks < n {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return err
		}
		f, err := link.Decode(data)
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *link.Ack:
			acks++
		case *link.Message:
			replies++
			if sent < n {
				if err := send(); err != nil {
					return err
				}
			}
		case *link.Error:
			return fmt.Errorf("server error: %s (%s)", f.Error, f.Code)
		}
	}
	return nil
}
