package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// walker checks decoded JSON against the config's shape, collecting errors.
type walker struct {
	errs []*Error
}

func (w *walker) errorf(path, format string, args ...any) {
	w.errs = append(w.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// entry is a known key as given in the file.
type entry struct {
	key string // as written (camelCase or snake_case)
	val *node
}

// snake converts a camelCase name to snake_case; a run of capitals is one
// word (clientCA: client_ca).
func snake(camel string) string {
	var b strings.Builder
	prevUpper := false
	for _, r := range camel {
		up := unicode.IsUpper(r)
		if up {
			if !prevUpper {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		prevUpper = up
		b.WriteRune(r)
	}
	return b.String()
}

// normalize folds a key for "did you mean" hints.
func normalize(key string) string {
	return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(key))
}

// object reports whether n is an object, recording an error if not, and
// records its duplicated keys.
func (w *walker) object(path string, n *node) bool {
	if n.kind != kObject {
		w.errorf(path, "must be an object, got %s", n.kind)
		return false
	}
	for _, d := range n.dups {
		w.errorf(join(path, d), "key given more than once")
	}
	return true
}

// fields matches the keys of object n, the block tmpl of the schema (at
// path), against its known keys (canonical camelCase names, in
// documentation order), each also accepted in snake_case. It returns the
// known keys present, by canonical name; nil if n is not an object. An
// unknown key's error names the known keys, a near miss, and the blocks
// that know the key.
func (w *walker) fields(path string, n *node, tmpl string) map[string]entry {
	known := known(tmpl)
	if !w.object(path, n) {
		return nil
	}
	out := make(map[string]entry, len(n.keys))
	for i, key := range n.keys {
		canon := ""
		for _, k := range known {
			if key == k || key == snake(k) {
				canon = k
				break
			}
		}
		if canon == "" {
			hint := ""
			for _, k := range known {
				if normalize(key) == normalize(k) {
					hint = fmt.Sprintf("; did you mean %s or %s?", k, snake(k))
					if k == snake(k) {
						hint = fmt.Sprintf("; did you mean %s?", k)
					}
					break
				}
			}
			if hint == "" {
				if places := belongs(path, tmpl, key); len(places) > 0 {
					hint = "; it belongs in " + strings.Join(places, " or ")
				}
			}
			w.errorf(join(path, key), "unknown key (known: %s)%s", strings.Join(known, ", "), hint)
			continue
		}
		if prev, dup := out[canon]; dup {
			w.errorf(path, "both %s and %s are set; use one", prev.key, key)
			continue
		}
		out[canon] = entry{key: key, val: n.vals[i]}
	}
	return out
}

// str decodes a string.
func (w *walker) str(path string, n *node) (string, bool) {
	if n.kind != kString {
		w.errorf(path, "must be a string, got %s", n.kind)
		return "", false
	}
	return n.str, true
}

// nonEmpty decodes a string that must not be empty or blank.
func (w *walker) nonEmpty(path string, n *node) (string, bool) {
	s, ok := w.str(path, n)
	if ok && strings.TrimSpace(s) == "" {
		w.errorf(path, "must not be empty")
		return "", false
	}
	return s, ok
}

// boolean decodes a boolean.
func (w *walker) boolean(path string, n *node) (bool, bool) {
	if n.kind != kBool {
		w.errorf(path, "must be a boolean (true or false), got %s", n.kind)
		return false, false
	}
	return n.b, true
}

// noMax marks an integer with no documented upper bound; such values are
// still capped so that seconds and byte counts cannot overflow.
const noMax = -1

const intCap = math.MaxInt32

// integer decodes an integer in [lo, hi] (hi == noMax: no documented bound).
func (w *walker) integer(path string, n *node, lo, hi int) (int, bool) {
	want := ""
	switch {
	case hi != noMax:
		want = fmt.Sprintf("an integer between %d and %d", lo, hi)
	case lo == 1:
		want = "a positive integer"
	case lo == 0:
		want = "a non-negative integer"
	default:
		want = fmt.Sprintf("an integer >= %d", lo)
	}
	if n.kind != kNumber {
		w.errorf(path, "must be %s, got %s", want, describe(n))
		return 0, false
	}
	v, err := strconv.ParseInt(n.num.String(), 10, 64)
	if err != nil {
		// Accept integral values written as 30.0 or 3e1.
		f, ferr := strconv.ParseFloat(n.num.String(), 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			if ferr == nil && f == math.Trunc(f) {
				w.errorf(path, "must be %s, got %s (out of range)", want, describe(n))
			} else {
				w.errorf(path, "must be %s, got %s", want, describe(n))
			}
			return 0, false
		}
		v = int64(f)
	}
	if v < int64(lo) || (hi != noMax && v > int64(hi)) {
		w.errorf(path, "must be %s, got %s", want, describe(n))
		return 0, false
	}
	if hi == noMax && v > intCap {
		w.errorf(path, "must be at most %d, got %s", intCap, describe(n))
		return 0, false
	}
	return int(v), true
}

// describe renders a value for a message.
func describe(n *node) string {
	switch n.kind {
	case kString:
		return quote(n.str)
	case kNumber:
		return truncate(n.num.String())
	case kBool:
		return strconv.FormatBool(n.b)
	}
	return n.kind.String()
}

// strList decodes an array of non-empty strings; nil if it is empty.
func (w *walker) strList(path string, n *node) ([]string, bool) {
	if n.kind != kArray {
		w.errorf(path, "must be an array of strings, got %s", n.kind)
		return nil, false
	}
	var out []string
	ok := true
	for i, e := range n.elems {
		s, good := w.nonEmpty(index(path, i), e)
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// parse decodes data into a validated Config.
func parse(data []byte) (*Config, []*Error) {
	root, err := decodeTree(data)
	if err != nil {
		return nil, []*Error{err}
	}
	w := &walker{}
	cfg := w.config(root)
	if len(w.errs) > 0 {
		return nil, w.errs
	}
	return cfg, nil
}

func (w *walker) config(root *node) *Config {
	cfg := &Config{
		Listen:            DefaultListen,
		Workspace:         DefaultWorkspace,
		MaxConcurrentRuns: DefaultMaxConcurrentRuns,
		MaxWaitingRuns:    DefaultMaxWaitingRuns,
		DedupeCacheBytes:  DefaultDedupeCacheBytes,
		Channels:          map[string]Channel{},
		Agents:            map[string]Agent{},
	}
	f := w.fields("", root, "")
	if f == nil {
		return nil
	}
	if e, ok := f["listen"]; ok {
		p := join("", e.key)
		if s, ok := w.nonEmpty(p, e.val); ok {
			if err := checkListen(s); err != "" {
				w.errorf(p, "%s", err)
			}
			cfg.Listen = s
		}
	}
	if e, ok := f["workspace"]; ok {
		p := join("", e.key)
		if s, ok := w.nonEmpty(p, e.val); ok {
			if strings.ContainsRune(s, 0) {
				w.errorf(p, "must not contain a NUL byte")
			}
			cfg.Workspace = s
		}
	}
	if e, ok := f["maxConcurrentRuns"]; ok {
		cfg.MaxConcurrentRuns, _ = w.integer(join("", e.key), e.val, 1, noMax)
	}
	if e, ok := f["maxWaitingRuns"]; ok {
		cfg.MaxWaitingRuns, _ = w.integer(join("", e.key), e.val, 1, noMax)
	}
	if e, ok := f["maxConnections"]; ok {
		cfg.MaxConnections, _ = w.integer(join("", e.key), e.val, 1, noMax)
	}
	if e, ok := f["dedupeCacheBytes"]; ok {
		n, _ := w.integer(join("", e.key), e.val, 1<<20, noMax)
		cfg.DedupeCacheBytes = int64(n)
	}
	if e, ok := f["admin"]; ok {
		cfg.Admin = w.admin(join("", e.key), e.val)
	}
	if e, ok := f["discovery"]; ok {
		cfg.Discovery = w.discovery(join("", e.key), e.val)
	}
	if e, ok := f["tls"]; ok {
		cfg.TLS = w.tls(join("", e.key), e.val)
	}
	if e, ok := f["cluster"]; ok {
		cfg.Cluster = w.cluster(join("", e.key), e.val)
	}
	if e, ok := f["releases"]; ok {
		cfg.Releases = w.releases(join("", e.key), e.val)
	}
	if e, ok := f["metrics"]; ok {
		cfg.Metrics = w.metrics(join("", e.key), e.val)
	}

	// Agents first, so channels can be checked against them.
	defined := map[string]bool{} // every agent name, even one with errors
	if e, ok := f["agents"]; ok {
		p := join("", e.key)
		if w.object(p, e.val) {
			for i, name := range e.val.keys {
				ap := join(p, name)
				defined[name] = true
				if !nameRE.MatchString(name) {
					w.errorf(ap, "invalid agent name %s: must match %s", quote(name), namePattern)
				}
				if a, ok := w.agent(ap, e.val.vals[i]); ok {
					cfg.Agents[name] = a
				}
			}
		}
	}
	if !defined[DefaultAgent] {
		defined[DefaultAgent] = true
		cfg.Agents[DefaultAgent] = echoAgent()
	}
	names := make([]string, 0, len(defined))
	for n := range defined {
		names = append(names, n)
	}
	sort.Strings(names)

	if e, ok := f["channels"]; !ok {
		w.errorf("channels", "no channel configured")
	} else {
		p := join("", e.key)
		if w.object(p, e.val) {
			if len(e.val.keys) == 0 {
				w.errorf(p, "no channel configured")
			}
			for i, id := range e.val.keys {
				cp := join(p, id)
				if !nameRE.MatchString(id) {
					w.errorf(cp, "invalid channel id %s: must match %s", quote(id), namePattern)
				}
				ch, agentKey, ok := w.channel(cp, id, e.val.vals[i])
				if !ok {
					continue
				}
				cfg.Channels[id] = ch
				ap := join(cp, agentKey)
				if !defined[ch.Agent] {
					w.errorf(ap, "unknown agent %s (defined: %s)", quote(ch.Agent), strings.Join(names, ", "))
					continue
				}
				if a, ok := cfg.Agents[ch.Agent]; ok && ch.Enabled && a.Terminal != nil && !a.Terminal.Enabled {
					w.errorf(ap, "agent %s is disabled (%s is false) but the channel is enabled",
						quote(ch.Agent), join(join("agents", ch.Agent), "terminal.enabled"))
				}
			}
		}
	}
	return cfg
}

// checkListen validates a listen address; "" if it is fine.
func checkListen(s string) string {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("must be host:port, got %s", quote(s))
	}
	if port == "" {
		return fmt.Sprintf("missing port in %s", quote(s))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		if strings.Trim(port, "0123456789") == "" {
			return fmt.Sprintf("port must be between 0 and 65535, got %s", quote(port))
		}
		// A service name such as "http" is resolved by net.Listen.
	}
	return ""
}

// channel decodes one channel. agentKey is the "agent" key as written.
func (w *walker) channel(path, id string, n *node) (ch Channel, agentKey string, ok bool) {
	ch = Channel{
		Enabled:     true,
		Kind:        "terminal",
		Mode:        "websocket",
		DisplayName: id,
		Agent:       DefaultAgent,
		Config:      defaultChannelConfig(),
	}
	agentKey = "agent"
	f := w.fields(path, n, "channels.*")
	if f == nil {
		return ch, agentKey, false
	}
	ok = true
	if e, has := f["enabled"]; has {
		ch.Enabled, _ = w.boolean(join(path, e.key), e.val)
	}
	if e, has := f["kind"]; has {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			if s != "terminal" {
				w.errorf(p, "unsupported kind %s (supported: terminal)", quote(s))
			}
			ch.Kind = s
		}
	}
	if e, has := f["mode"]; has {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			if s != "websocket" {
				w.errorf(p, "unsupported mode %s (supported: websocket)", quote(s))
			}
			ch.Mode = s
		}
	}
	if e, has := f["accountId"]; has {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			if !nameRE.MatchString(s) {
				w.errorf(p, "invalid account id %s: must match %s", quote(s), namePattern)
			}
			ch.AccountID = s
		}
	} else {
		w.errorf(join(path, "accountId"), "required (a non-empty string)")
	}
	if e, has := f["displayName"]; has {
		if s, good := w.str(join(path, e.key), e.val); good && strings.TrimSpace(s) != "" {
			ch.DisplayName = s
		}
	}
	if e, has := f["agent"]; has {
		agentKey = e.key
		if s, good := w.nonEmpty(join(path, e.key), e.val); good {
			ch.Agent = s
		} else {
			ok = false // do not also report the reference
		}
	}
	if e, has := f["config"]; has {
		ch.Config = w.channelConfig(join(path, e.key), e.val)
	}
	return ch, agentKey, ok
}

func (w *walker) channelConfig(path string, n *node) ChannelConfig {
	cc := defaultChannelConfig()
	f := w.fields(path, n, "channels.*.config")
	w.clientCerts(path, f, &cc)
	if e, ok := f["heartbeatSeconds"]; ok {
		cc.HeartbeatSeconds, _ = w.integer(join(path, e.key), e.val, 1, 3600)
	}
	if e, ok := f["maxMessageChars"]; ok {
		cc.MaxMessageChars, _ = w.integer(join(path, e.key), e.val, 1, 1000000)
	}
	if e, ok := f["tokens"]; ok {
		cc.Tokens = w.tokens(join(path, e.key), e.val)
	}
	if e, ok := f["sendQueue"]; ok {
		cc.SendQueue, _ = w.integer(join(path, e.key), e.val, 1, 65536)
	}
	if e, ok := f["maxWaitingPerSession"]; ok {
		cc.MaxWaitingPerSession, _ = w.integer(join(path, e.key), e.val, 1, 65536)
	}
	if e, ok := f["ratePerPeer"]; ok {
		cc.RatePerPeer, _ = w.integer(join(path, e.key), e.val, 1, 100000)
	}
	if e, ok := f["rateBurst"]; ok {
		cc.RateBurst, _ = w.integer(join(path, e.key), e.val, 1, 100000)
	}
	if e, ok := f["connectTimeoutSeconds"]; ok {
		cc.ConnectTimeoutSeconds, _ = w.integer(join(path, e.key), e.val, 1, 3600)
	}
	if e, ok := f["maxNoticesPerPeer"]; ok {
		cc.MaxNoticesPerPeer, _ = w.integer(join(path, e.key), e.val, 1, 10000)
	}
	if e, ok := f["enrollment"]; ok {
		cc.Enrollment, _ = w.boolean(join(path, e.key), e.val)
	}
	if e, ok := f["enrollmentCodeSeconds"]; ok {
		cc.EnrollmentCodeSeconds, _ = w.integer(join(path, e.key), e.val, 1, 3600)
	}
	return cc
}

func (w *walker) tokens(path string, n *node) Tokens {
	var t Tokens
	switch n.kind {
	case kArray:
		if len(n.elems) == 0 {
			w.errorf(path, "must not be empty (leave tokens out to accept any device)")
			return t
		}
		t.Any, _ = w.strList(path, n)
		seen := map[Digest]int{}
		for i, tok := range t.Any {
			if strings.TrimSpace(tok) == "" {
				continue // strList said so
			}
			d, err := ParseDeviceToken(tok)
			if err != nil {
				w.errorf(index(path, i), "%v", err) // never the value: it is a secret
				continue
			}
			if prev, dup := seen[d]; dup {
				w.errorf(index(path, i), "the same token as %s", index(path, prev))
			}
			seen[d] = i
		}
	case kObject:
		w.object(path, n)
		if len(n.keys) == 0 {
			w.errorf(path, "must not be empty (leave tokens out to accept any device)")
			return t
		}
		t.ByPeer = make(map[string]string, len(n.keys))
		for i, peer := range n.keys {
			p := join(path, peer)
			if err := validPeerPattern(peer); err != nil {
				w.errorf(p, "%v", err)
				continue
			}
			val := n.vals[i]
			if val.kind == kObject { // {"token": ..., "maxPeers": N}
				var ok bool
				if val, ok = w.tokenEntry(p, peer, val, &t); !ok {
					continue
				}
				p = join(p, "token")
			}
			if s, ok := w.nonEmpty(p, val); ok {
				if _, err := ParseDeviceToken(s); err != nil {
					w.errorf(p, "%v", err) // never the value: it is a secret
					continue
				}
				t.ByPeer[peer] = s
			}
		}
	default:
		w.errorf(path, "must be an array of tokens or an object from peer id (or glob) to token, got %s", n.kind)
	}
	return t
}

// tokenEntry decodes a tokens entry given as an object: its "token"
// node (required), and its "maxPeers" into t (a glob's only).
func (w *walker) tokenEntry(path, peer string, n *node, t *Tokens) (*node, bool) {
	f := w.fields(path, n, "channels.*.config.tokens.*")
	if f == nil {
		return nil, false
	}
	if e, ok := f["maxPeers"]; ok {
		p := join(path, e.key)
		if !IsGlob(peer) {
			w.errorf(p, "only a glob's entry (a shared token, like \"kiosk-*\") takes maxPeers; %s is one peer", quote(peer))
		} else if v, good := w.integer(p, e.val, 1, MaxGlobMaxPeers); good {
			if t.MaxPeers == nil {
				t.MaxPeers = map[string]int{}
			}
			t.MaxPeers[peer] = v
		}
	}
	e, ok := f["token"]
	if !ok {
		w.errorf(path, "an entry given as an object needs \"token\" (and may give \"maxPeers\")")
		return nil, false
	}
	return e.val, true
}

// agent decodes one agent definition.
func (w *walker) agent(path string, n *node) (Agent, bool) {
	var a Agent
	f := w.fields(path, n, "agents.*")
	if f == nil {
		return a, false
	}
	before := len(w.errs)
	var kinds []string
	for _, k := range []string{"builtin", "terminal", "nuum", "harness", "acp"} {
		if e, ok := f[k]; ok {
			kinds = append(kinds, e.key)
		}
	}
	switch len(kinds) {
	case 0:
		w.errorf(path, "must set exactly one of builtin, terminal, nuum, harness, acp; got none")
	case 1:
	default:
		w.errorf(path, "must set exactly one of builtin, terminal, nuum, harness, acp; got %s", strings.Join(kinds, ", "))
	}
	if e, ok := f["builtin"]; ok {
		b := &BuiltinAgent{}
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			if s != "echo" {
				w.errorf(p, "unknown builtin agent %s (known: echo)", quote(s))
			}
			b.Name = s
		}
		if d, ok := f["delayMs"]; ok {
			b.DelayMs, _ = w.integer(join(path, d.key), d.val, 0, noMax)
		}
		if d, ok := f["streamWordMs"]; ok {
			b.StreamWordMs, _ = w.integer(join(path, d.key), d.val, 0, 60_000)
		}
		if d, ok := f["askTimeoutSeconds"]; ok {
			b.AskTimeoutSeconds, _ = w.integer(join(path, d.key), d.val, 1, 24*60*60)
		}
		a.Builtin = b
	} else {
		for _, k := range []string{"delayMs", "streamWordMs", "askTimeoutSeconds"} {
			if d, ok := f[k]; ok {
				w.errorf(join(path, d.key), "only allowed with builtin")
			}
		}
	}
	if e, ok := f["terminal"]; ok {
		a.Terminal = w.terminal(join(path, e.key), e.val)
	}
	if e, ok := f["nuum"]; ok {
		a.Nuum = w.nuum(join(path, e.key), e.val)
	}
	if e, ok := f["harness"]; ok {
		a.Harness = w.harness(join(path, e.key), e.val)
	}
	if e, ok := f["acp"]; ok {
		a.ACP = w.acp(join(path, e.key), e.val)
	}
	return a, len(w.errs) == before
}

// required reports a missing required key.
func (w *walker) required(path, key, what string) {
	w.errorf(join(path, key), "required (%s)", what)
}

func (w *walker) terminal(path string, n *node) *TerminalAgent {
	t := &TerminalAgent{
		Timeout:        DefaultTerminalTimeout,
		Protocol:       "plain",
		PassMedia:      true,
		MaxOutputBytes: DefaultMaxOutputBytes,
	}
	f := w.fields(path, n, "agents.*.terminal")
	if f == nil {
		return t
	}
	if e, ok := f["enabled"]; ok {
		t.Enabled, _ = w.boolean(join(path, e.key), e.val)
	}
	if e, ok := f["command"]; ok {
		t.Command, _ = w.command(join(path, e.key), e.val)
	} else {
		w.required(path, "command", "a non-empty string")
	}
	if e, ok := f["timeout"]; ok {
		t.Timeout, _ = w.integer(join(path, e.key), e.val, 1, noMax)
	}
	if e, ok := f["protocol"]; ok {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			if s != "plain" && s != "rich" {
				w.errorf(p, `must be "plain" or "rich", got %s`, quote(s))
			}
			t.Protocol = s
		}
	}
	if e, ok := f["passMedia"]; ok {
		t.PassMedia, _ = w.boolean(join(path, e.key), e.val)
	}
	if e, ok := f["env"]; ok {
		t.Env = w.env(join(path, e.key), e.val)
	}
	if e, ok := f["providers"]; ok {
		t.Providers = w.providers(join(path, e.key), e.val)
	}
	if e, ok := f["maxOutputBytes"]; ok {
		t.MaxOutputBytes, _ = w.integer(join(path, e.key), e.val, 1, noMax)
	}
	if e, ok := f["questions"]; ok {
		t.Questions, _ = w.boolean(join(path, e.key), e.val)
		if t.Questions && t.Protocol != "rich" {
			w.errorf(join(path, e.key), `needs "protocol": "rich" (questions are frames)`)
		}
	}
	return t
}

// command decodes a command line.
func (w *walker) command(path string, n *node) (string, bool) {
	s, ok := w.nonEmpty(path, n)
	if ok && strings.ContainsRune(s, 0) {
		w.errorf(path, "must not contain a NUL byte")
		return s, false
	}
	return s, ok
}

func (w *walker) env(path string, n *node) map[string]string {
	if !w.object(path, n) || len(n.keys) == 0 {
		return nil
	}
	env := make(map[string]string, len(n.keys))
	for i, name := range n.keys {
		p := join(path, name)
		if name == "" || strings.ContainsAny(name, "=\x00") {
			w.errorf(p, "invalid variable name %s: must be non-empty, without '=' or NUL", quote(name))
		}
		if s, ok := w.str(p, n.vals[i]); ok {
			if strings.ContainsRune(s, 0) {
				w.errorf(p, "value must not contain a NUL byte")
			}
			env[name] = s
		}
	}
	return env
}

func (w *walker) providers(path string, n *node) map[string]Provider {
	if !w.object(path, n) || len(n.keys) == 0 {
		return nil
	}
	out := make(map[string]Provider, len(n.keys))
	for i, name := range n.keys {
		p := join(path, name)
		if strings.TrimSpace(name) == "" {
			w.errorf(p, "provider name must not be empty")
		}
		out[name] = w.provider(p, n.vals[i])
	}
	return out
}

func (w *walker) provider(path string, n *node) Provider {
	var pr Provider
	f := w.fields(path, n, "agents.*.terminal.providers.*")
	if f == nil {
		return pr
	}
	if e, ok := f["apiKeys"]; ok {
		p := join(path, e.key)
		pr.APIKeys, _ = w.strList(p, e.val)
		if e.val.kind == kArray && len(e.val.elems) == 0 {
			w.errorf(p, "must hold at least one key")
		}
	} else {
		w.required(path, "apiKeys", "an array of at least one key")
	}
	if e, ok := f["models"]; ok {
		pr.Models, _ = w.strList(join(path, e.key), e.val)
	}
	if e, ok := f["baseUrl"]; ok {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good && s != "" {
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				w.errorf(p, "must be an http or https URL, got %s", quote(s))
			}
			pr.BaseURL = s
		}
	}
	return pr
}

func (w *walker) nuum(path string, n *node) *NuumAgent {
	a := &NuumAgent{
		IdleTimeout:      DefaultNuumIdleTimeout,
		MaxProcesses:     DefaultNuumMaxProcesses,
		StartTimeout:     DefaultNuumStartTimeout,
		HeartbeatSeconds: DefaultNuumHeartbeatSeconds,
		HeartbeatTimeout: DefaultNuumHeartbeatTimeout,
		HeartbeatAck:     NuumHeartbeatAckRequired,
	}
	f := w.fields(path, n, "agents.*.nuum")
	if f == nil {
		return a
	}
	if e, ok := f["command"]; ok {
		a.Command, _ = w.command(join(path, e.key), e.val)
	} else {
		w.required(path, "command", "a non-empty string")
	}
	ints := []struct {
		key    string
		dst    *int
		lo, hi int
	}{
		{"idleTimeout", &a.IdleTimeout, 1, noMax},
		{"maxProcesses", &a.MaxProcesses, 1, noMax},
		{"startTimeout", &a.StartTimeout, 1, noMax},
		{"heartbeatSeconds", &a.HeartbeatSeconds, 1, 3600},
		{"heartbeatTimeout", &a.HeartbeatTimeout, 1, noMax},
		{"turnTimeout", &a.TurnTimeout, 0, noMax},
	}
	for _, in := range ints {
		if e, ok := f[in.key]; ok {
			*in.dst, _ = w.integer(join(path, e.key), e.val, in.lo, in.hi)
		}
	}
	if e, ok := f["heartbeatAck"]; ok {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			if s != NuumHeartbeatAckRequired && s != NuumHeartbeatAckOptional {
				w.errorf(p, `must be "required" or "optional", got %s`, quote(s))
			}
			a.HeartbeatAck = s
		}
	}
	return a
}

func (w *walker) harness(path string, n *node) *HarnessAgent {
	h := &HarnessAgent{
		Target:           DefaultHarnessTarget,
		MaxSteps:         DefaultHarnessMaxSteps,
		MaxDuration:      DefaultHarnessMaxDuration,
		ObservationBytes: DefaultHarnessObservationBytes,
		StepTimeout:      DefaultHarnessStepTimeout,
	}
	f := w.fields(path, n, "agents.*.harness")
	if f == nil {
		return h
	}
	if e, ok := f["command"]; ok {
		h.Command, _ = w.command(join(path, e.key), e.val)
	} else {
		w.required(path, "command", "a non-empty string")
	}
	if e, ok := f["target"]; ok {
		p := join(path, e.key)
		if s, good := w.str(p, e.val); good {
			switch {
			case s == "tmux" || s == "pty":
			case strings.HasPrefix(s, "serial:"):
				if _, _, err := parseSerialTarget(s); err != nil {
					w.errorf(p, "bad serial target %s: %v (want serial:PATH@BAUD)", quote(s), err)
				}
			default:
				w.errorf(p, `must be "tmux", "pty" or "serial:PATH@BAUD", got %s`, quote(s))
			}
			h.Target = s
		}
	}
	ints := []struct {
		key string
		dst *int
	}{
		{"maxSteps", &h.MaxSteps},
		{"maxDuration", &h.MaxDuration},
		{"observationBytes", &h.ObservationBytes},
		{"stepTimeout", &h.StepTimeout},
	}
	for _, in := range ints {
		if e, ok := f[in.key]; ok {
			*in.dst, _ = w.integer(join(path, e.key), e.val, 1, noMax)
		}
	}
	return h
}
