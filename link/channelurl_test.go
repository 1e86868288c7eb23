package link_test

import (
	"net/url"
	"strings"
	"testing"

	"termlink/link"
)

func TestChannelURL(t *testing.T) {
	tests := []struct {
		raw, channel, want, err string
	}{
		{"ws://127.0.0.1:8080/api/channels/terminal-dev/ws", "", "ws://127.0.0.1:8080/api/channels/terminal-dev/ws", ""},
		{"ws://h:1/api/channels/x/ws", "terminal-dev", "ws://h:1/api/channels/x/ws", ""},
		{"http://127.0.0.1:8080", "", "ws://127.0.0.1:8080/api/channels/terminal-dev/ws", ""},
		{"http://h:8080", "terminal-dev", "ws://h:8080/api/channels/terminal-dev/ws", ""},
		{"http://127.0.0.1:8080/", "lab", "ws://127.0.0.1:8080/api/channels/lab/ws", ""},
		{"https://example.com", "", "wss://example.com/api/channels/terminal-dev/ws", ""},
		{"https://h", "terminal-dev", "wss://h/api/channels/terminal-dev/ws", ""},
		{"wss://example.com/custom/path", "lab", "wss://example.com/custom/path", ""},
		{"127.0.0.1:8080", "", "ws://127.0.0.1:8080/api/channels/terminal-dev/ws", ""},
		{"127.0.0.1:8080", "terminal-dev", "ws://127.0.0.1:8080/api/channels/terminal-dev/ws", ""},
		{"  ws://h:1  ", "", "ws://h:1/api/channels/terminal-dev/ws", ""},
		{"HTTP://h:1", "", "ws://h:1/api/channels/terminal-dev/ws", ""},
		{"WSS://h:1/x", "", "wss://h:1/x", ""},
		{"ws://[::1]:8/", "c", "ws://[::1]:8/api/channels/c/ws", ""},
		{"ws://h:1?x=1", "c", "ws://h:1/api/channels/c/ws?x=1", ""},
		{"", "", "", "required"},
		{"   ", "", "", "required"},
		{"ftp://h", "", "", "scheme must be ws, wss, http or https"},
		{"ftp://x", "", "", "scheme must be ws, wss, http or https"},
		{"http://", "", "", "has no host"},
		{"ws:///api/channels/x/ws", "", "", "has no host"},
		{"h:notaport", "", "", "is not a URL"},
		{"http://h:1", "a/b", "", "must not contain"},
		{"http://h:1", "a?b", "", "must not contain"},
		{"http://h:1", "a#b", "", "must not contain"},
	}
	for _, tt := range tests {
		got, err := link.ChannelURL(tt.raw, tt.channel)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ChannelURL(%q, %q) = %q, %v; want an error saying %q", tt.raw, tt.channel, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ChannelURL(%q, %q) = %q, %v; want %q", tt.raw, tt.channel, got, err, tt.want)
		}
	}
}

// ChannelURL on any input: no panic; on success a ws:// or wss:// URL
// with a host and a path, that ChannelURL keeps as it is.
func FuzzChannelURL(f *testing.F) {
	for _, s := range []string{"ws://a:1", "a:1", "http://h/x/ws", "https://h2", "ftp://x", "ws://[::1]:8/", " a:1 ", "", "http://", "h:x", "ws://h/%zz"} {
		f.Add(s, "terminal-dev")
	}
	f.Add("h:1", "a/b")
	f.Fuzz(func(t *testing.T, raw, channel string) {
		u, err := link.ChannelURL(raw, channel)
		if err != nil {
			if u != "" {
				t.Fatalf("ChannelURL(%q, %q) = %q with error %v", raw, channel, u, err)
			}
			return
		}
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "ws" && pu.Scheme != "wss") || pu.Host == "" || pu.Path == "" {
			t.Fatalf("ChannelURL(%q, %q) = %q: scheme, host or path missing (%v)", raw, channel, u, err)
		}
		if again, err := link.ChannelURL(u, channel); err != nil || again != u {
			t.Fatalf("ChannelURL(%q) = %q, %v; want it kept as is", u, again, err)
		}
	})
}
