package termd

import (
	"strings"
	"testing"
)

// The --server forms: one URL, the edges of a cluster (empty entries
// skipped), auto with and without a fallback; and the errors, naming the
// flag.
func TestServerURLs(t *testing.T) {
	tests := []struct {
		cfg           Config
		first, edges  string
		fallback, err string
	}{
		{cfg: Config{Server: "127.0.0.1:8080", Channel: "terminal-dev"}, first: "ws://127.0.0.1:8080/api/channels/terminal-dev/ws"},
		{cfg: Config{Server: "h:1, https://h2,,ws://h3/x/ws", Channel: "lab"},
			first: "ws://h:1/api/channels/lab/ws", edges: "wss://h2/api/channels/lab/ws ws://h3/x/ws"},
		{cfg: Config{Server: ServerAuto, Channel: "lab"}},
		{cfg: Config{Server: ServerAuto, Channel: "lab", ServerFallback: "h:9"}, fallback: "ws://h:9/api/channels/lab/ws"},
		{cfg: Config{Server: ServerAuto, ServerFallback: "ftp://h"}, err: "--server-fallback: "},
		{cfg: Config{Server: ""}, err: "--server is required"},
		{cfg: Config{Server: "  "}, err: "--server is required"},
		{cfg: Config{Server: "ftp://x"}, err: "scheme must be ws, wss, http or https"},
		{cfg: Config{Server: "h:1,ftp://x"}, err: `--server "ftp://x": `},
		{cfg: Config{Server: "h:1", Channel: "a/b"}, err: "must not contain"},
	}
	for _, tt := range tests {
		edges, first, fallback, err := serverURLs(tt.cfg)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("serverURLs(%+v): %v, want an error saying %q", tt.cfg, err, tt.err)
			}
			continue
		}
		if err != nil || first != tt.first || strings.Join(edges, " ") != tt.edges || fallback != tt.fallback {
			t.Errorf("serverURLs(%q) = %q %q %q, %v; want %q %q %q", tt.cfg.Server, first, edges, fallback, err, tt.first, tt.edges, tt.fallback)
		}
	}
}
