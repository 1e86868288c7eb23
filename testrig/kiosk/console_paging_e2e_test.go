package kiosk_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"termlink/link"
	"termlink/server/servertest"
)

// The live stream's hello carries the first 100 devices only: the
// console pages the rest (next_cursor) and lists all 150.
func TestConsolePagesPeers(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	srv := servertest.Start(t, nil)
	const n = 150
	for i := range n {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+srv.Addr+"/api/channels/"+channelID+"/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
		_ = ws.SetWriteDeadline(time.Now().Add(waitLong))
		_ = ws.SetReadDeadline(time.Now().Add(waitLong))
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: fmt.Sprintf("dev-%03d", i),
			Capabilities: []string{link.CapText}})); err != nil {
			t.Fatal(err)
		}
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if f, err := link.Decode(b); err != nil || f.FrameType() != link.TypeConnected {
			t.Fatalf("device %d: %s (%v)", i, b, err)
		}
	}
	b := startBrowser(t, chromium)
	b.must("opening the console", chromedp.Navigate("http://"+srv.Addr+"/"))
	b.waitFor("the last device is listed", peerRow(fmt.Sprintf("dev-%03d", n-1), true))
	b.waitFor("every device is listed", fmt.Sprintf(`document.querySelectorAll('[data-testid=peer-row]').length === %d && document.getElementById('fleet-count').textContent === '%d of %d online'`, n, n, n))
}
