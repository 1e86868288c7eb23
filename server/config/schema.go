package config

import (
	"fmt"
	"regexp"
	"strings"
)

// schema lists every object block of the config: its place (a template:
// "*" is any map key, "[]" any array index) and its keys, canonical
// camelCase, in documentation order. The decoder checks each block against
// its entry, and an unknown key is told where it belongs when another
// block knows it ("channels.x.enrollment: unknown key ...; it belongs in
// channels.x.config.enrollment").
var schema = map[string][]string{
	"": {"listen", "workspace", "maxConcurrentRuns", "maxWaitingRuns", "maxConnections", "dedupeCacheBytes",
		"channels", "agents", "admin", "discovery", "tls", "cluster", "releases", "metrics"},
	"channels.*": {"enabled", "kind", "mode", "accountId", "displayName", "agent", "config"},
	"channels.*.config": {"heartbeatSeconds", "maxMessageChars", "tokens", "sendQueue",
		"maxWaitingPerSession", "ratePerPeer", "rateBurst", "connectTimeoutSeconds", "maxNoticesPerPeer",
		"clientCA", "denyCerts", "enrollment", "enrollmentCodeSeconds"},
	"channels.*.config.tokens.*":    {"token", "maxPeers"},
	"agents.*":                      {"builtin", "delayMs", "streamWordMs", "askTimeoutSeconds", "terminal", "nuum", "harness", "acp"},
	"agents.*.terminal":             {"enabled", "command", "timeout", "protocol", "passMedia", "env", "providers", "maxOutputBytes", "questions"},
	"agents.*.terminal.providers.*": {"apiKeys", "models", "baseUrl"},
	"agents.*.nuum": {"command", "idleTimeout", "maxProcesses", "startTimeout", "heartbeatSeconds",
		"heartbeatTimeout", "turnTimeout", "heartbeatAck"},
	"agents.*.harness": {"command", "target", "maxSteps", "maxDuration", "observationBytes", "stepTimeout"},
	"agents.*.acp": {"command", "args", "env", "cwd", "idleTimeout", "maxProcesses", "startTimeout",
		"permission", "askTimeout", "permissionFallback"},
	"admin":           {"tokens", "metricsRequireToken", "allowedHosts"},
	"admin.tokens.[]": {"token", "role", "name"},
	"discovery":       {"enabled", "instance", "interface"},
	"tls":             {"certFile", "keyFile"},
	"releases":        {"publicKeyFile", "maxBytes", "maxReleases"},
	"metrics":         {"healthTagKeys"},
	"cluster": {"nats", "role", "name", "partitions", "replicas", "credentials", "tls",
		"ackWaitSeconds", "leaseSeconds", "duplicateWindowSeconds", "dedupeHours",
		"historyMaxAgeDays", "historyMaxMegabytes", "consumerStuckSeconds"},
	"cluster.tls": {"caFile", "certFile", "keyFile"},
}

// unhinted are blocks an unknown key elsewhere is not sent to: a device
// token's entry object (its "token" would be every misplaced "token").
var unhinted = map[string]bool{"channels.*.config.tokens.*": true}

// known returns the keys of block tmpl; an unlisted template is a bug.
func known(tmpl string) []string {
	k, ok := schema[tmpl]
	if !ok {
		panic(fmt.Sprintf("config: no schema for block %q", tmpl))
	}
	return k
}

func segments(tmpl string) []string {
	if tmpl == "" {
		return nil
	}
	return strings.Split(tmpl, ".")
}

var indexRE = regexp.MustCompile(`\[[0-9]+\]$`)

// belongs returns the paths where key, unknown in block tmpl at path,
// would be known: the place of every other block that has it, written
// from the part of path both share ("<channel>", "<agent>", "<name>",
// "[N]" where the file does not say which).
func belongs(path, tmpl, key string) []string {
	var out []string
	for _, other := range sortedTemplates() {
		if other == tmpl || unhinted[other] || !hasKey(schema[other], key) {
			continue
		}
		out = append(out, placeIn(path, tmpl, other)+sep(other)+key)
	}
	return out
}

// sep is what joins a key to a block's path.
func sep(tmpl string) string {
	if tmpl == "" {
		return ""
	}
	return "."
}

func hasKey(keys []string, key string) bool {
	for _, k := range keys {
		if key == k || key == snake(k) {
			return true
		}
	}
	return false
}

// placeIn writes block template to as a path, sharing with path (the
// place of block from) what their templates share.
func placeIn(path, from, to string) string {
	f, t := segments(from), segments(to)
	common := 0
	for common < len(f) && common < len(t) && f[common] == t[common] {
		common++
	}
	// Walk path up to the shared part; a map key cannot be told from
	// the dots in it, so above one the place is written from the root.
	p := path
	for i := len(f) - 1; i >= common; i-- {
		switch s := f[i]; s {
		case "*":
			p, common = "", 0
		case "[]":
			p = indexRE.ReplaceAllString(p, "")
		default:
			switch {
			case strings.HasSuffix(p, "."+s):
				p = strings.TrimSuffix(p, "."+s)
			case strings.HasSuffix(p, "."+snake(s)):
				p = strings.TrimSuffix(p, "."+snake(s))
			default: // the top level
				p = ""
			}
		}
		if common == 0 && p == "" {
			break
		}
	}
	for i := common; i < len(t); i++ {
		switch s := t[i]; s {
		case "*":
			ph := "<name>"
			if i > 0 && t[i-1] == "channels" {
				ph = "<channel>"
			} else if i > 0 && t[i-1] == "agents" {
				ph = "<agent>"
			}
			p = joinSeg(p, ph)
		case "[]":
			p += "[N]"
		default:
			p = joinSeg(p, s)
		}
	}
	return p
}

func joinSeg(p, s string) string {
	if p == "" {
		return s
	}
	return p + "." + s
}

func sortedTemplates() []string {
	out := make([]string, 0, len(schema))
	for t := range schema {
		out = append(out, t)
	}
	// Shallow blocks first, then by name: the nearest place leads.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && lessTmpl(out[j], out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func lessTmpl(a, b string) bool {
	if la, lb := len(segments(a)), len(segments(b)); la != lb {
		return la < lb
	}
	return a < b
}
