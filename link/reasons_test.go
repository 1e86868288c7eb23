package link_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"termlink/link"
)

// Each reason the client writes has a short form that fits a 16x2
// display's text field.
func TestShortReason(t *testing.T) {
	tests := []struct{ reason, want string }{
		{"", ""},
		{`dial: server certificate is signed by an unknown authority (issuer "CN=lab") (check --ca-file)`, "unknown CA"},
		{"dial: server certificate expired on 2020-01-01T00:00:00Z", "cert expired"},
		{"dial: server certificate is for a.example, not 127.0.0.1", "cert for host"},
		{"dial: the server refused the TLS handshake: remote error: tls: certificate required", "TLS refused"},
		{"dial: tls: first record does not look like a TLS handshake", "not TLS"},
		{"dial: server answered HTTP 401 Unauthorized: unauthorized: the bearer token is not valid for channel terminal-dev", "token refused"},
		{"dial: server answered HTTP 401 Unauthorized: no client certificate: this channel requires one", "cert needed"},
		{"dial: server answered HTTP 403 Forbidden: client certificate is revoked (on the channel's denyCerts list)", "cert revoked"},
		{"dial: server answered HTTP 403 Forbidden: client certificate is signed by an unknown authority", "cert refused"},
		{"dial: server answered HTTP 404 Not Found: no channel", "no channel"},
		{"dial: server answered HTTP 502 Bad Gateway", "HTTP 502"},
		{"connect refused: certificate is for peer kiosk-2, connect says kiosk-1", "peer mismatch"},
		{"connect refused: unauthorized", "refused"},
		{"server closed the connection (4001): replaced by a newer connection for peer_id k", "replaced"},
		{"server closed the connection (1001)", "server closed"},
		{"dial: dial tcp 127.0.0.1:1: connect: connection refused", "no server"},
		{"dial: dial tcp: lookup nowhere.invalid: no such host", "unknown host"},
		{"dial: no answer within the connect timeout (i/o timeout)", "no answer"},
		{"no frame from the server for 1m15s: link dead", "link dead"},
		{`dial: server answered HTTP 503 Service Unavailable: {"error":"edge e1 has lost the NATS cluster since 2026-11-26T19:00:00Z; connect to another edge"}`, "no cluster"},
		{"server closed the connection (1013): edge e1 has lost the NATS cluster since 2026-11-26T19:00:00Z; connect to another edge", "no cluster"},
		{"something new", "offline"},
	}
	for _, tt := range tests {
		got := link.ShortReason(tt.reason)
		if got != tt.want {
			t.Errorf("ShortReason(%q) = %q, want %q", tt.reason, got, tt.want)
		}
		if n := utf8.RuneCountInString(got); n > link.MaxShortReason {
			t.Errorf("ShortReason(%q) = %q: %d characters, more than %d", tt.reason, got, n, link.MaxShortReason)
		}
	}
}

// Whatever the reason, its short form fits the 16x2 text field and is
// empty only for an empty reason.
func FuzzShortReason(f *testing.F) {
	f.Add("dial: server answered HTTP 599 Whatever")
	f.Add("connect refused: certificate is for peer a, connect says b")
	f.Add("")
	f.Fuzz(func(t *testing.T, reason string) {
		got := link.ShortReason(reason)
		if n := utf8.RuneCountInString(got); n > link.MaxShortReason || (got == "") != (reason == "") {
			t.Fatalf("ShortReason(%q) = %q", reason, got)
		}
	})
}

// The glass's form of a reason is one line and never carries a server's
// body: an HTTP answer shows as its status and short reason; other
// reasons stay as they are, on one line, cut to MaxGlassReason.
func TestGlassReason(t *testing.T) {
	long := strings.Repeat("word ", 60)
	for _, tt := range []struct{ reason, want string }{
		{"", ""},
		{"dial: server answered HTTP 404 Not Found: {\n  \"error\": \"no route /wss\"\n}", "server: 404 not found (no channel)"},
		{"dial: server answered HTTP 401 Unauthorized: no client certificate: this channel requires one", "server: 401 unauthorized (cert needed)"},
		{"dial: server answered HTTP 502 Bad Gateway: <html><body>nginx</body></html>", "server: 502 bad gateway"},
		{"dial: server answered HTTP 418", "server: 418"},
		{`dial: server answered HTTP 503 Service Unavailable: {"error":"edge e1 has lost the NATS cluster since 2026-11-26T19:00:00Z"}`, "server: 503 service unavailable (no cluster)"},
		{"edge ws://b: dial: server answered HTTP 404 Not Found: x", "edge ws://b: server: 404 not found (no channel)"},
		{"dial: dial tcp 127.0.0.1:1: connect: connection refused", "dial: dial tcp 127.0.0.1:1: connect: connection refused"},
		{"server closed the connection (1013):\nedge e1\tgone", "server closed the connection (1013): edge e1 gone"},
		{"dial: " + long, "dial: " + strings.TrimSpace(long)[:link.MaxGlassReason-9] + "..."},
	} {
		got := link.GlassReason(tt.reason)
		if got != tt.want {
			t.Errorf("GlassReason(%q) = %q, want %q", tt.reason, got, tt.want)
		}
		if utf8.RuneCountInString(got) > link.MaxGlassReason || strings.ContainsAny(got, "\n{") {
			t.Errorf("GlassReason(%q) = %q: not one short line", tt.reason, got)
		}
	}
}
