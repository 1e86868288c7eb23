package wschannel

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/events"
)

// A restart waits for its devices' answers to the going-away close
// together, for shutdownGrace in all, then cuts off those that did not
// answer: here each device's own close grace is an hour and no device
// answers, and Close still returns, each device having had its 1001
// first and its socket closed after.
func TestCloseCutsOffDevicesThatDoNotAnswer(t *testing.T) {
	a := depsAdapter(&deps{}, events.NewLog(100), testMetrics())
	a.closeGrace, a.shutdown = time.Hour, 50*time.Millisecond
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.ServeUpgrade(w, r, 10) }))
	defer hs.Close()

	const n = 5
	var devs []*websocket.Conn
	for i := range n {
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
		// The device never answers a close: gorilla's default close
		// handler would.
		ws.SetCloseHandler(func(int, string) error { return nil })
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: "dev-" + string(rune('a'+i))})); err != nil {
			t.Fatal(err)
		}
		if _, data, err := ws.ReadMessage(); err != nil {
			t.Fatal(err)
		} else if f, err := link.Decode(data); err != nil || f.FrameType() != link.TypeConnected {
			t.Fatalf("connect answered with %s (%v)", data, err)
		}
		devs = append(devs, ws)
	}

	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	for i, ws := range devs {
		var ce *websocket.CloseError
		if _, _, err := ws.ReadMessage(); !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Fatalf("device %d at Close: %v, want close 1001 first", i, err)
		}
	}
	select {
	case <-closed:
	case <-time.After(time.Minute): // a guard against a hang, not a limit: the devices' own grace is an hour
		t.Fatal("Close still waits for devices that never answer its close frame")
	}
	for i, ws := range devs {
		// The close frame was read; the socket is closed after it.
		if _, err := ws.UnderlyingConn().Read(make([]byte, 1)); err == nil {
			t.Fatalf("device %d: its socket still open after Close", i)
		}
	}
	if a.ConnectedPeers() != 0 {
		t.Fatalf("after Close: %d peers", a.ConnectedPeers())
	}
}
