package wschannel

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A handshake is refused as gorilla's Upgrader refused it: each check in
// its order, with its status and reason, and the open WebSocket count
// given back.
func TestUpgradeRefusals(t *testing.T) {
	r := newPollRig(t, false, nil)
	valid := func() http.Header {
		return http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"WebSocket"}, "Sec-Websocket-Version": {"13"},
			"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	}
	for _, tc := range []struct {
		name   string
		method string
		edit   func(http.Header)
		status int
		reason string
	}{
		{"no connection upgrade", "GET", func(h http.Header) { h.Set("Connection", "keep-alive") }, 400,
			"websocket: the client is not using the websocket protocol: 'upgrade' token not found in 'Connection' header"},
		{"upgrade as a quoted word", "GET", func(h http.Header) { h.Set("Connection", `"upgrade"`) }, 400,
			"'upgrade' token not found in 'Connection' header"},
		{"no upgrade header", "GET", func(h http.Header) { h.Del("Upgrade") }, 400,
			"websocket: the client is not using the websocket protocol: 'websocket' token not found in 'Upgrade' header"},
		{"post", "POST", nil, 405, "websocket: the client is not using the websocket protocol: request method is not GET"},
		{"version 8", "GET", func(h http.Header) { h.Set("Sec-Websocket-Version", "8") }, 400,
			"websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header"},
		{"no key", "GET", func(h http.Header) { h.Del("Sec-Websocket-Key") }, 400,
			"websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length"},
		{"short key", "GET", func(h http.Header) { h.Set("Sec-Websocket-Key", "c2hvcnQ=") }, 400,
			"'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length"},
		{"not a hijacker", "GET", nil, 500, "the HTTP connection cannot be taken over for a WebSocket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "/api/channels/terminal-dev/ws", nil)
			req.Header = valid()
			if tc.edit != nil {
				tc.edit(req.Header)
			}
			w := httptest.NewRecorder() // not a Hijacker: a valid handshake fails at the hijack
			r.a.ServeUpgrade(w, req, 100)
			if body := w.Body.String(); w.Code != tc.status || !strings.HasPrefix(body, "websocket upgrade failed: ") || !strings.Contains(body, tc.reason) {
				t.Fatalf("answered %d %q, want %d with %q", w.Code, w.Body.String(), tc.status, tc.reason)
			}
			if n := r.a.m.WebSockets.Value(""); n != 0 {
				t.Fatalf("%d open WebSockets counted after a refused handshake, want 0", n)
			}
		})
	}
}

// The handshake's answer carries RFC 6455's accept key (section 1.3's
// example).
func TestAcceptKey(t *testing.T) {
	if got := string(appendAcceptKey(nil, "dGhlIHNhbXBsZSBub25jZQ==")); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("accept key %q, want s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", got)
	}
}
