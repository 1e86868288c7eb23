package link_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/link"
)

// A server that refuses a connect sends an error frame and closes at
// once. The reason the device shows is the refusal, every time: the
// close that follows it says only that the connection ended. (The close
// could win the client's select over the queued error frame: a test of
// termd's offline reason saw "server closed the connection (4003)" once
// in five attempts.)
func TestRefusalReasonBeatsTheClose(t *testing.T) {
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := ws.ReadMessage(); err != nil { // connect
			return
		}
		deadline := time.Now().Add(5 * time.Second)
		_ = ws.SetWriteDeadline(deadline)
		_ = ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Error{Code: link.CodeUnauthorized,
			Error: "certificate is for peer kiosk-1, connect says kiosk-9"}))
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4003, "unauthorized"), deadline)
	}))
	defer srv.Close()
	d := newDevice(t, link.ClientConfig{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/api/channels/terminal-dev/ws",
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond})
	const attempts = 200
	d.waitFor("refused attempts", 60*time.Second, func() bool {
		n := 0
		for _, e := range d.states {
			if e.State == link.StateWaiting {
				n++
			}
		}
		return n >= attempts
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, e := range d.states {
		if e.State == link.StateWaiting && !strings.HasPrefix(e.Reason, "connect refused: certificate is for peer kiosk-1") {
			t.Fatalf("attempt %d: offline reason %q, want the server's refusal", i, e.Reason)
		}
	}
}
