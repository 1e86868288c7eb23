package kiosk_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"termlink/link"
)

// startFleetKiosk is a text-console device that lists capability and
// gives each fleet frame the server sends it to answer, with its client
// to report on, until the client stops.
func startFleetKiosk(t *testing.T, addr, peerID, capability string, answer func(*link.Client, link.Frame)) {
	t.Helper()
	done := make(chan struct{})
	var client *link.Client
	t.Cleanup(func() { // after the kiosk's own cleanup, which stops the client
		if client != nil {
			<-done
		}
	})
	client = startTextKiosk(t, addr, peerID, capability)
	go func() { // until the client stops: Fleet is closed
		defer close(done)
		for f := range client.Fleet() {
			answer(client, f)
		}
	}()
}

// startDiagKiosk is a text-console device that lists "diag" and answers
// a logs request with its log's last lines and a self-test with a
// passing report (the console shows what the API answers; termd's own
// answers are tested in device/termd).
func startDiagKiosk(t *testing.T, addr, peerID string) {
	t.Helper()
	startFleetKiosk(t, addr, peerID, link.CapDiag, func(client *link.Client, f link.Frame) {
		q, ok := f.(*link.Diag)
		if !ok {
			return
		}
		res := &link.DiagResult{RequestID: q.RequestID, Kind: q.Kind, OK: true}
		if q.Kind == link.DiagLogs {
			res.Text = fmt.Sprintf("level=INFO msg=\"termd starting\" peer_id=%s\nlevel=INFO msg=\"link up\" bytes_asked=%d\n", peerID, q.Bytes)
		} else {
			res.Text = "CHECK      RESULT  SUMMARY\nstate-dir  PASS    writable\nclock      PASS    set\n\nselftest: PASS (2 checks)\n"
		}
		_ = client.Report(res)
	})
}

// A device's page offers an operator Log and Self-test: each shows the
// device's answer (the log with the bytes asked, the report with its
// verdict), and a device that does not list "diag" gets the API's reason.
// A viewer is not offered them (a log may hold secrets). At 1280 and
// 400 px wide, nothing leaves the window.
func TestConsoleDiagnostics(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	addr := startRoleServer(t)
	base := "http://" + addr
	startDiagKiosk(t, addr, "kiosk-diag")
	startTextKiosk(t, addr, "kiosk-old")
	waitOnline(t, base, "kiosk-diag")
	waitOnline(t, base, "kiosk-old")

	for _, width := range widths {
		t.Run(fmt.Sprintf("%dpx", width), func(t *testing.T) {
			b := startBrowserSized(t, chromium, width, 1000)
			b.login(base, adminToken)
			b.waitFor("the fleet is loaded", `document.getElementById('fleet-count').textContent === '2 of 2 online'`)
			b.must("opening the device", chromedp.Navigate(base+"/#/peer/"+channelID+"/kiosk-diag"))
			b.waitFor("the diagnostics are offered", `!document.getElementById('diag-logs').closest('[data-write]').hidden`)
			b.must("asking for 2048 bytes of log", setValue(`#diag-bytes`, "2048"), clickListed(`#diag-logs`))
			b.waitFor("the log is shown", `document.getElementById('diag-output').textContent.includes('bytes_asked=2048') &&
				!document.getElementById('diag-output').hidden && document.getElementById('diag-status').textContent.startsWith('The last ')`)
			b.checkFits("the log shown")
			b.screenshot(fmt.Sprintf("%dpx-diag-log", width))
			b.must("running the self-test", clickListed(`#diag-selftest`))
			b.waitFor("the report is shown", `document.getElementById('diag-output').textContent.includes('selftest: PASS (2 checks)') &&
				document.getElementById('diag-status').textContent.startsWith('Self-test passed (took ')`)
			b.checkFits("the report shown")
			b.screenshot(fmt.Sprintf("%dpx-diag-selftest", width))

			// Another device, an older termd: the API's reason, and the
			// previous device's output is gone. The buttons are clicked
			// where they are at the click (clickListed): at 400 px the
			// page's sections above them still fill in after it opens,
			// and a click by position landed elsewhere (stress run 41:
			// no request was made, the status stayed empty).
			b.must("opening the old device", chromedp.Navigate(base+"/#/peer/"+channelID+"/kiosk-old"))
			b.waitFor("its page", `document.getElementById('peer-title').textContent.startsWith('kiosk-old') && document.getElementById('diag-output').hidden`)
			b.must("asking for its log", clickListed(`#diag-logs`))
			b.waitFor("the refusal is shown", `document.getElementById('diag-status').textContent.includes('does not list the capability "diag"') &&
				document.getElementById('diag-status').classList.contains('bad')`)
		})
	}

	b := startBrowserSized(t, chromium, 1280, 1000)
	b.login(base, viewerToken)
	b.waitFor("the fleet is loaded", `document.getElementById('fleet-count').textContent === '2 of 2 online'`)
	b.must("opening the device", chromedp.Navigate(base+"/#/peer/"+channelID+"/kiosk-diag"))
	b.waitFor("its page", `document.getElementById('peer-title').textContent.startsWith('kiosk-diag')`)
	var shown bool
	b.must("looking for the diagnostics", chromedp.Evaluate(`(() => { const r = document.getElementById('diag-logs').getBoundingClientRect(); return r.width > 0 && r.height > 0 })()`, &shown))
	if shown {
		t.Errorf("a viewer is offered the device's log")
	}
}
