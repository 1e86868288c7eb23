package kiosk_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"termlink/internal/testwait"
	"termlink/link/enroll"
	"termlink/server/config"
	"termlink/server/servertest"
)

// Issue 22, row 2, in a real browser: a page served from another origin
// (another 127.0.0.1 port the test serves) tries everything a page may
// send another origin without the server's consent — a text/plain form
// POST (whose body is made to be JSON), no-cors fetch with and without a
// body, sendBeacon, and a JSON fetch (which needs a CORS preflight) — at
// the enrollment approval and the notice API of a termserver on the same
// machine, with and without admin tokens. Chromium's own network log
// (DevTools) shows what termserver answered each request; the server's
// state shows that nothing was approved or sent. A page whose DNS name
// was rebound to the server (evil.example -> 127.0.0.1) is refused too.

const attackerPage = `<!doctype html>
<html><head><title>a page on another origin</title></head><body>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<form id="form-approve" method="POST" enctype="text/plain" target="sink1" action="{{APPROVE}}">
  <input name='{"peer_id":"evil-1","x":"' value='"}'></form>
<form id="form-notice" method="POST" enctype="text/plain" target="sink2" action="{{NOTICE}}">
  <input name='{"text":"pwned by a form","x":"' value='"}'></form>
<script>
window.results = {};
async function attempt(name, fn) {
  try { const r = await fn(); results[name] = 'answered: ' + r.type + ' ' + r.status; }
  catch (e) { results[name] = 'failed: ' + e.message; }
}
window.attack = async function (token) {
  const auth = token ? {Authorization: 'Bearer ' + token} : {};
  const targets = [['approve', '{{APPROVE}}', '{"peer_id":"evil-1"}'], ['notice', '{{NOTICE}}', '{"text":"pwned"}']];
  for (const [what, url, body] of targets) {
    await attempt(what + ': no-cors text/plain', () => fetch(url, {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body}));
    await attempt(what + ': no-cors without a body', () => fetch(url, {method: 'POST', mode: 'no-cors'}));
    await attempt(what + ': cors JSON', () => fetch(url, {method: 'POST', headers: Object.assign({'Content-Type': 'application/json'}, auth), body}));
    results[what + ': sendBeacon'] = navigator.sendBeacon(url, body) ? 'queued' : 'not queued';
  }
  document.getElementById('form-approve').submit();
  document.getElementById('form-notice').submit();
  return JSON.stringify(results);
};
</script></body></html>`

// netLog records, from chromium's DevTools events, the requests the page
// made to one host and the status each got from it.
type netLog struct {
	host string
	mu   sync.Mutex
	reqs map[network.RequestID]*netEntry
}

type netEntry struct {
	method, url string
	status      int64 // 0 until answered
}

func listenNetwork(b *browser, host string) *netLog {
	l := &netLog{host: host, reqs: map[network.RequestID]*netEntry{}}
	chromedp.ListenTarget(b.ctx, func(ev any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			if strings.Contains(e.Request.URL, "//"+l.host+"/") {
				l.reqs[e.RequestID] = &netEntry{method: e.Request.Method, url: e.Request.URL}
			}
		case *network.EventResponseReceivedExtraInfo: // the status even when CORS hides the response
			if r := l.reqs[e.RequestID]; r != nil {
				r.status = e.StatusCode
			}
		case *network.EventResponseReceived:
			if r := l.reqs[e.RequestID]; r != nil && r.status == 0 {
				r.status = e.Response.Status
			}
		}
	})
	b.must("enabling the network log", network.Enable())
	return l
}

// posts are the POSTs to path the page made: how many got an answer,
// and the statuses.
func (l *netLog) posts(path string) (answered int, statuses []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.reqs {
		if r.method == http.MethodPost && strings.HasSuffix(r.url, path) && r.status != 0 {
			answered++
			statuses = append(statuses, r.status)
		}
	}
	return answered, statuses
}

func TestCrossOriginPageCannotActAsOperator(t *testing.T) {
	parallel(t)
	chromium := chromiumPath(t)
	for _, mode := range []struct {
		name  string
		admin bool
	}{{"no admin tokens", false}, {"admin tokens", true}} {
		t.Run(mode.name, func(t *testing.T) {
			srv := servertest.Start(t, func(c *config.Config) {
				ch := c.Channels[channelID]
				ch.Config.Enrollment = true
				c.Channels[channelID] = ch
				if mode.admin {
					sum := sha256.Sum256([]byte(adminToken))
					tok, err := config.NewAdminToken("sha256:"+hex.EncodeToString(sum[:]), config.RoleOperator, "e2e")
					if err != nil {
						t.Fatal(err)
					}
					c.Admin.Tokens = []config.AdminToken{tok}
				}
			})
			token := ""
			if mode.admin {
				token = adminToken
			}
			base := "http://" + srv.Addr

			// A device waits to be paired.
			ec := enroll.Client{Endpoint: base + "/api/channels/" + channelID + "/enroll"}
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			grant, err := ec.Start(ctx, enroll.StartRequest{PeerID: "attacker-pi", DeviceName: "attacker"})
			if err != nil {
				t.Fatal(err)
			}
			approvePath := "/api/enrollments/" + grant.Code + "/approve"
			noticePath := "/api/channels/" + channelID + "/peers/kiosk-1/notices"

			// The attacker's page, on another origin of the same machine.
			page := strings.NewReplacer("{{APPROVE}}", base+approvePath, "{{NOTICE}}", base+noticePath).Replace(attackerPage)
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				_, _ = io.WriteString(w, page)
			}))
			defer evil.Close()

			b := startBrowser(t, chromium)
			nl := listenNetwork(b, srv.Addr)
			b.must("opening the attacker's page", chromedp.Navigate(evil.URL+"/"), chromedp.WaitReady(`#form-notice`, chromedp.ByQuery))
			var results string
			b.must("running the attacks", chromedp.Evaluate(fmt.Sprintf(`attack(%q)`, token), &results, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
				return p.WithAwaitPromise(true)
			}))
			t.Logf("what the page saw: %s", results)
			var seen map[string]string
			if err := json.Unmarshal([]byte(results), &seen); err != nil || len(seen) != 8 {
				t.Fatalf("the page's attack did not run: %q %v", results, err)
			}
			for name, r := range seen {
				if strings.HasSuffix(name, "cors JSON") && !strings.HasPrefix(r, "failed") {
					t.Errorf("%s: %s; want the preflight refused", name, r)
				}
			}

			// Every POST the page made reached termserver (no-cors fetch
			// twice, the beacon, the form: 4 each) and was refused.
			for _, path := range []string{approvePath, noticePath} {
				var statuses []int64
				testwait.UntilOK(t, "chromium logging 4 answered POSTs to "+path, func() error {
					var n int
					n, statuses = nl.posts(path)
					if n < 4 {
						return fmt.Errorf("%d answered (%v): the attack has not reached the server", n, statuses)
					}
					return nil
				})
				for _, st := range statuses {
					if st != http.StatusForbidden {
						t.Errorf("POST %s from the other origin: HTTP %d, want 403 (all: %v)", path, st, statuses)
					}
				}
				t.Logf("POST %s from the other origin: %v", path, statuses)
			}

			// Nothing happened on the server: the code is still waiting,
			// no notice exists.
			// (Under load the code may be gone: dropped as no poll came
			// for a while, as only a code not approved is; the poll below
			// tells the two apart. make test saw it: the test was wrong.)
			if got := operatorGet(t, base+"/api/enrollments", token); strings.Contains(got, "evil-1") {
				t.Errorf("enrollments after the attack: %s", got)
			}
			if got := operatorGet(t, base+noticePath+"?all=true", token); strings.Contains(got, "pwned") {
				t.Errorf("a notice from the other origin was stored: %s", got)
			}
			// The device's poll gets no token: its code still waits for an
			// approval, or was dropped as no poll came for a while (as only
			// a code not approved is).
			if st, answer := pollToken(ec.Endpoint, grant.DeviceCode); st != http.StatusBadRequest || (answer != enroll.Pending && answer != enroll.Expired) {
				t.Fatalf("the attacker's device polling for its token: HTTP %d %q, want %s or %s (no token)", st, answer, enroll.Pending, enroll.Expired)
			}

			// DNS rebinding: a page of evil.example whose name now points at
			// the server. Its requests are same-origin for the browser, and
			// termserver refuses the Host.
			_, port, _ := net.SplitHostPort(srv.Addr)
			rb := startBrowser(t, chromium) // chromium maps evil.example to 127.0.0.1
			rebound := "http://evil.example:" + port
			var consoleStatus int64
			rnl := listenNetwork(rb, "evil.example:"+port)
			rb.must("opening the rebound page", chromedp.Navigate(rebound+"/healthz")) // open: a probe's route
			var codes string
			rb.must("calling the API from the rebound page", chromedp.Evaluate(fmt.Sprintf(`(async () => {
				const auth = %q ? {Authorization: 'Bearer ' + %q} : {};
				const post = await fetch(%q, {method: 'POST', headers: Object.assign({'Content-Type': 'application/json'}, auth), body: '{"text":"pwned"}'});
				const get = await fetch('/api/status', {headers: auth});
				const approve = await fetch(%q, {method: 'POST', headers: Object.assign({'Content-Type': 'application/json'}, auth), body: '{"peer_id":"evil-2"}'});
				return post.status + ' ' + get.status + ' ' + approve.status + ' ' + (await post.text()).includes('DNS rebinding');
			})()`, token, token, noticePath, approvePath), &codes, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
			if codes != "421 421 421 true" {
				t.Errorf("the rebound page's POST notice, GET status, POST approve: %q, want 421 421 421 with the reason", codes)
			}
			rb.must("opening the console under the rebound name", chromedp.Navigate(rebound+"/"))
			rnl.mu.Lock()
			for _, r := range rnl.reqs {
				if r.method == http.MethodGet && strings.HasSuffix(r.url, ":"+port+"/") {
					consoleStatus = r.status
				}
			}
			rnl.mu.Unlock()
			if consoleStatus != http.StatusMisdirectedRequest {
				t.Errorf("the console under the rebound name: HTTP %d, want 421", consoleStatus)
			}
			if got := operatorGet(t, base+noticePath+"?all=true", token); strings.Contains(got, "pwned") {
				t.Errorf("a notice from the rebound page was stored: %s", got)
			}
		})
	}
}

// operatorGet is a GET as the operator's own tools make it (no browser).
func operatorGet(t *testing.T, url, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}
