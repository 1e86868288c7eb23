package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/throttle"
)

// A stranger's refused upgrades and a device's refused frames (issue
// 36): 1,000 upgrades with an unknown bearer token, 1,000 connects that
// take over another device's peer_id with a wrong token, and 1,000
// frames a device may not send each leave a burst of events and log
// lines (the gate's), never one each; the event recorded before the
// flood is still there.
func TestRefusedConnectFloodIsGated(t *testing.T) {
	t.Parallel()
	tok := config.Tokens{ByPeer: map[string]string{"pi-1": "tok-pi-1"}}
	ts, logs := countedLogServer(t, channelTokens(tok, false))
	markBeforeFlood(ts)
	logs.reset()
	start := time.Now()
	bad := http.Header{"Authorization": {"Bearer not-a-token-" + strings.Repeat("x", 4096)}}
	for i := range 1000 {
		_, resp, err := websocket.DefaultDialer.Dial(ts.ws, bad)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("upgrade %d with a bad token: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	for i := range 1000 {
		ws, _, err := websocket.DefaultDialer.Dial(ts.ws, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := link.Encode(&link.Connect{PeerID: "pi-1", Token: "wrong-token"})
		_ = ws.WriteMessage(websocket.TextMessage, b)
		if _, _, err := ws.ReadMessage(); err != nil {
			t.Fatalf("connect %d: no error frame before the close: %v", i, err)
		}
		ws.Close()
	}
	ws, _, err := websocket.DefaultDialer.Dial(ts.ws, http.Header{"Authorization": {"Bearer tok-pi-1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	b, _ := link.Encode(&link.Connect{PeerID: "pi-1"})
	_ = ws.WriteMessage(websocket.TextMessage, b)
	if _, _, err := ws.ReadMessage(); err != nil { // connected
		t.Fatal(err)
	}
	for range 1000 {
		b, _ := link.Encode(&link.Progress{MessageID: "m", Text: "progress, which only the server sends"})
		if err := ws.WriteMessage(websocket.TextMessage, b); err != nil {
			t.Fatal(err)
		}
	}
	// The honest device's own message is still answered after its flood.
	b, _ = link.Encode(&link.Message{MessageID: "after-the-flood", Text: "hi"})
	_ = ws.WriteMessage(websocket.TextMessage, b)
	for {
		_ = ws.SetReadDeadline(time.Now().Add(2 * time.Minute))
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("no answer to the message after the flood: %v", err)
		}
		if f, _ := link.Decode(data); f != nil {
			if r, ok := f.(*link.Message); ok && r.IsReply() && r.MessageID == "after-the-flood" {
				break
			}
		}
	}
	refused, rejected := channelEventCount(ts, events.TerminalRefused), channelEventCount(ts, events.InboundRejected)
	// Three kinds (401 before upgrade, connect refused: both terminal_refused;
	// bad frames: inbound_rejected), each at most the gate's kind burst.
	if bound := gateBound(throttle.DefaultKindBurst, start); refused > 2*bound || rejected > bound {
		t.Fatalf("%d terminal_refused and %d inbound_rejected events for 3,000 refusals, want at most %d and %d", refused, rejected, 2*bound, bound)
	}
	if refused == 0 || rejected == 0 {
		t.Fatalf("no refusal recorded at all (%d, %d): the operator must see the first ones", refused, rejected)
	}
	if !markSurvived(ts) {
		t.Fatal("the event recorded before the flood was pushed out")
	}
	if n, lines, last := logs.get(); n > 64<<10 {
		t.Fatalf("%d bytes in %d log lines for 3,000 refusals; last: %s", n, lines, last)
	}
}
