package console_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"termlink/link"
)

// Issue 42: the device page shows the question open on the device,
// read-only (its options, no way to answer: the person at the device
// answers), and fits a narrow window with a long question.
func TestConsoleShowsOpenQuestion(t *testing.T) {
	chromium := chromiumPath(t)
	addr := startOperatorServer(t)
	base := "http://" + addr
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/api/channels/"+channelID+"/ws", http.Header{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	send := func(f link.Frame) {
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
			t.Fatal(err)
		}
	}
	send(&link.Connect{PeerID: "desk", DeviceName: "Desk", Capabilities: []string{link.CapText, link.CapChoice}})
	text := longWord("Deploy-", 600)
	send(&link.Message{MessageID: "m1", Text: "/ask " + text})
	for asked := false; !asked; {
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		f, err := link.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		_, asked = f.(*link.Question)
	}
	waitOnline(t, base, "desk")

	b := startBrowser(t, chromium)
	b.login(base)
	b.viewport(400, 900)
	b.must("opening the device", chromedp.Evaluate(`location.hash = '#/peer/`+channelID+`/desk'`, nil))
	b.waitFor("its open question", `(() => { const q = document.querySelector('[data-testid=peer-question]');
		return !!q && q.textContent.includes('`+text[:40]+`') && q.querySelectorAll('[data-option-id]').length === 2 &&
			q.textContent.includes('answered on the device') && !q.querySelector('button') })()`)
	b.checkWidth(400, "400 px, a device's page with a long open question")
	b.screenshot("400px-open-question")
}
