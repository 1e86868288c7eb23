package device_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"termlink/device"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/servertest"
)

// apiCall sends a JSON request to the server's operator API.
func apiCall(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json") // the API takes JSON only
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, data)
	}
	return resp.StatusCode, out
}

// noticeState returns the delivery state of notice id for peer from the
// server's notice API.
func noticeState(t *testing.T, base, peer, id string) string {
	t.Helper()
	_, out := apiCall(t, "GET", base+"/api/channels/terminal-dev/peers/"+peer+"/notices?all=true", "")
	b, _ := json.Marshal(out)
	var list struct {
		Notices []struct {
			NoticeID string `json:"notice_id"`
			State    string `json:"state"`
		} `json:"notices"`
	}
	_ = json.Unmarshal(b, &list)
	for _, n := range list.Notices {
		if n.NoticeID == id {
			return n.State
		}
	}
	return ""
}

// End to end with termserver's notices and device registry: a notice
// posted while the kiosk is offline is shown once after it connects,
// mirrored to the registry's screen, acked on the server after the draw,
// not shown again by a restarted kiosk on the same state dir; one posted
// while online takes over and the conversation returns.
func TestKioskNoticesFromTermserver(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, nil)
	base := "http://" + srv.Addr
	// Shown until a key dismisses it: the registry's screen mirror is the
	// device's latest screen (a screen waiting to be sent is replaced by a
	// newer one), so a notice shown 1 s could leave the glass before its
	// screen was sent (seen under qemu and stress-ng in make test-arm: the
	// mirror went from the connect screen to the one after the notice).
	code, out := apiCall(t, "POST", base+"/api/channels/terminal-dev/peers/kiosk-1/notices",
		`{"text":"Posted while you were away","display_seconds":3600}`)
	if code != http.StatusCreated {
		t.Fatalf("POST notice: HTTP %d %v", code, out)
	}
	first := out["notice_ids"].([]any)[0].(string)

	caps := append(link.DefaultCapabilities(), link.CapNotice, link.CapScreen)
	state := t.TempDir()
	r := startKioskCaps(t, srv.URL, state, device.Kiosk{}, caps)
	r.waitGlass(t, "Posted while you")
	// The registry has the device's board, version and its screen mirror.
	testwait.UntilOK(t, "the registry to show the device's board, version and notice screen", func() error {
		_, peer := apiCall(t, "GET", base+"/api/channels/terminal-dev/peers/kiosk-1", "")
		b, _ := json.Marshal(peer["screen"])
		if peer["board"] == "test-lcd2004" && peer["version"] == "test" && strings.Contains(string(b), "Posted while you") {
			return nil
		}
		return fmt.Errorf("it shows %v", peer)
	})
	testwait.UntilOK(t, "the server to record the ack of "+first, func() error {
		if st := noticeState(t, base, "kiosk-1", first); st != "acked" {
			return fmt.Errorf("state %q", st)
		}
		return nil
	})
	r.press("*") // dismissed (the key is swallowed)
	r.waitNoGlass(t, "Posted while you")

	posted := time.Now()
	code, out = apiCall(t, "POST", base+"/api/channels/terminal-dev/notices", `{"text":"Everyone: lunch is served","display_seconds":1}`)
	if code != http.StatusCreated {
		t.Fatalf("broadcast: HTTP %d %v", code, out)
	}
	r.waitGlass(t, "Everyone: lunch is")
	t.Logf("broadcast to the glass (polled every 20 ms): %v", time.Since(posted).Round(time.Millisecond))
	r.waitNoGlass(t, "Everyone: lunch is")
	r.press("44 444 #") // the conversation works as before
	r.waitGlass(t, "You said: hi")
	r.cancel()
	<-r.done
	r.done <- nil

	r2 := startKioskCaps(t, srv.URL, state, device.Kiosk{}, caps)
	r2.waitGlass(t, "ok")
	code, _ = apiCall(t, "POST", base+"/api/channels/terminal-dev/peers/kiosk-1/notices", `{"text":"After the restart","display_seconds":1}`)
	if code != http.StatusCreated {
		t.Fatal(code)
	}
	r2.waitGlass(t, "After the restart")
	if n := r.view.count(first) + r2.view.count(first); n != 1 {
		t.Fatalf("the offline notice was shown %d times, want once", n)
	}
}
