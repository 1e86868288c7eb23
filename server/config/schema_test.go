package config

import (
	"strings"
	"testing"
)

// An unknown key that another block knows is told where it belongs
// (issue 23 row 4: the README once put enrollment beside agent).
func TestUnknownKeyBelongsElsewhere(t *testing.T) {
	ch := func(extra string) string {
		return `{"channels": {"kiosk": {"kind": "terminal", "mode": "websocket", "accountId": "local"` + extra + `}}}`
	}
	tests := []struct{ name, config, want string }{
		{"channel key in the channel's config", ch(`, "enrollment": true`),
			"channels.kiosk.enrollment: unknown key (known: enabled, kind, mode, accountId, displayName, agent, config); it belongs in channels.kiosk.config.enrollment"},
		{"snake_case kept", ch(`, "enrollment_code_seconds": 60`),
			"; it belongs in channels.kiosk.config.enrollment_code_seconds"},
		{"config key at the channel", ch(`, "config": {"agent": "echo"}`),
			"channels.kiosk.config.agent: unknown key (known: heartbeatSeconds, maxMessageChars, tokens, sendQueue, maxWaitingPerSession, ratePerPeer, rateBurst, connectTimeoutSeconds, maxNoticesPerPeer, clientCA, denyCerts, enrollment, enrollmentCodeSeconds); it belongs in channels.kiosk.agent"},
		{"channel key at the top", `{"enrollment": true, ` + ch("")[1:],
			"config: enrollment: unknown key (known: listen, workspace, maxConcurrentRuns, maxWaitingRuns, maxConnections, dedupeCacheBytes, channels, agents, admin, discovery, tls, cluster, releases, metrics); it belongs in channels.<channel>.config.enrollment"},
		{"two places", `{"tokens": [], ` + ch("")[1:],
			"config: tokens: unknown key (known: listen, workspace, maxConcurrentRuns, maxWaitingRuns, maxConnections, dedupeCacheBytes, channels, agents, admin, discovery, tls, cluster, releases, metrics); it belongs in admin.tokens or channels.<channel>.config.tokens"},
		{"agent command without its kind", `{"agents": {"h": {"command": "x"}}, ` + ch(`, "agent": "h"`)[1:],
			"agents.h.command: unknown key (known: builtin, delayMs, streamWordMs, askTimeoutSeconds, terminal, nuum, harness, acp); it belongs in agents.h.acp.command or agents.h.harness.command or agents.h.nuum.command or agents.h.terminal.command"},
		{"sibling block", `{"agents": {"h": {"terminal": {"command": "x", "idleTimeout": 5}}}, ` + ch(`, "agent": "h"`)[1:],
			"agents.h.terminal.idleTimeout: unknown key (known: enabled, command, timeout, protocol, passMedia, env, providers, maxOutputBytes, questions); it belongs in agents.h.acp.idleTimeout or agents.h.nuum.idleTimeout"},
		{"up from a map key", `{"agents": {"h": {"terminal": {"command": "x", "providers": {"p": {"timeout": 5}}}}}, ` + ch(`, "agent": "h"`)[1:],
			"agents.h.terminal.providers.p.timeout: unknown key (known: apiKeys, models, baseUrl); it belongs in agents.<agent>.terminal.timeout"},
		{"up from an array element", `{"admin": {"tokens": [{"token": "0123456789abcdef0", "role": "viewer", "metricsRequireToken": true}]}, ` + ch("")[1:],
			"admin.tokens[0].metricsRequireToken: unknown key (known: token, role, name); it belongs in admin.metricsRequireToken"},
		{"a near miss wins", ch(`, "config": {"Heartbeat_Seconds": 5}`),
			"; did you mean heartbeatSeconds or heartbeat_seconds?"},
		{"known nowhere", ch(`, "colour": "red"`),
			"channels.kiosk.colour: unknown key (known: enabled, kind, mode, accountId, displayName, agent, config)\n"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.config))
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if got := err.Error() + "\n"; !strings.Contains(got, tt.want) {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}
