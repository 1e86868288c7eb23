package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Defaults applied to keys that are absent.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultWorkspace         = "./workspace"
	DefaultMaxConcurrentRuns = 256
	DefaultChannelID         = "terminal-dev"
	DefaultAgent             = "echo"

	DefaultHeartbeatSeconds = 30
	DefaultMaxMessageChars  = 20000
	DefaultSendQueue        = 64

	// Bounds of the delivery contract (DESIGN.md, "Every queue has a bound").
	DefaultMaxWaitingRuns        = 4096     // messages waiting for a run, server-wide
	DefaultDedupeCacheBytes      = 64 << 20 // replies cached for dedupe, server-wide
	DefaultMaxWaitingPerSession  = 64       // messages waiting in one session
	DefaultRatePerPeer           = 20       // messages per second a peer may send, sustained
	DefaultRateBurst             = 40       // messages a peer may send at once
	DefaultConnectTimeoutSeconds = 10       // a WebSocket must send connect within this

	DefaultTerminalTimeout = 120
	DefaultMaxOutputBytes  = 4 << 20

	DefaultNuumIdleTimeout      = 600
	DefaultNuumMaxProcesses     = 32
	DefaultNuumStartTimeout     = 30
	DefaultNuumHeartbeatSeconds = 30
	DefaultNuumHeartbeatTimeout = 10

	DefaultHarnessTarget           = "tmux"
	DefaultHarnessMaxSteps         = 50
	DefaultHarnessMaxDuration      = 1800
	DefaultHarnessObservationBytes = 10000
	DefaultHarnessStepTimeout      = 120
)

// Config is termserver's configuration.
type Config struct {
	Listen            string             // address to listen on; default "127.0.0.1:8080"
	Workspace         string             // session and user data; default "./workspace", made absolute by Load
	MaxConcurrentRuns int                // sessions running at once; default 256
	MaxWaitingRuns    int                // messages waiting to run, server-wide; past it new messages get "busy"; default 4096
	MaxConnections    int                // open WebSocket connections; past it upgrades get HTTP 503; 0 (default): from the fd limit
	DedupeCacheBytes  int64              // memory for cached replies (dedupe); idle sessions are evicted and reloaded from disk; default 64 MiB
	Channels          map[string]Channel // by channel id
	Agents            map[string]Agent   // by agent name; always holds "echo"
	Admin             Admin              // operator API tokens; none: loopback clients only
	Discovery         Discovery          // mDNS/DNS-SD advertisement on the LAN; off by default
	TLS               TLS                // serve https and wss:// (tls.go); zero: plain http and ws://
	Cluster           Cluster            // NATS JetStream cluster (cluster.go); zero: the embedded single node
	Releases          Releases           // the store of signed termd releases (releases.go)
	Metrics           Metrics            // what /metrics may show beyond its fixed series (metrics.go)
}

// Channel is one channel devices connect to.
type Channel struct {
	Enabled     bool   // default true
	Kind        string // "terminal" (default; the only kind supported)
	Mode        string // "websocket" (default; the only mode supported)
	AccountID   string // required; same charset as a channel id
	DisplayName string // default: the channel id
	Agent       string // name in Config.Agents; default "echo"
	Config      ChannelConfig
}

// ChannelConfig is a channel's "config" block.
type ChannelConfig struct {
	HeartbeatSeconds int    // default 30, 1..3600
	MaxMessageChars  int    // default 20000, 1..1000000
	Tokens           Tokens // optional device authentication
	SendQueue        int    // frames queued per connection before the reader stops reading; default 64, 1..65536

	MaxWaitingPerSession  int // messages waiting in one session; past it "busy", no ack; default 64, 1..65536
	RatePerPeer           int // messages per second a peer may send, sustained; past it "busy"; default 20, 1..100000
	RateBurst             int // messages a peer may send at once; default 40, 1..100000
	ConnectTimeoutSeconds int // a WebSocket that sends no connect within this is closed; default 10, 1..3600

	MaxNoticesPerPeer int // notices a peer's mailbox holds not yet acked; past it the notice API answers 429; 0: 100; 1..10000

	// Mutual TLS (tls.go): devices must present a client certificate
	// signed by a CA in this PEM file, naming their peer_id; certificates
	// whose SHA-256 fingerprint is in DenyCerts are refused.
	ClientCA  string
	DenyCerts []Fingerprint
	// Enrollment lets a device with no token get one by a pairing code an
	// operator approves (package server/identity); the channel then
	// requires a token even when Tokens is empty.
	Enrollment            bool
	EnrollmentCodeSeconds int // a pairing code's lifetime; 0: 600; 1..3600
}

// Tokens are the credentials devices must present on a channel. In JSON it
// is either a list of tokens (lab mode: each binds to the first peer_id it
// connects with, trust on first use), or an object from a peer id, or a
// glob of peer ids ("kiosk-*"), to the token those peers must use. A token
// is a plain secret or "sha256:<64 hex>", the SHA-256 of the secret. A
// glob's entry may instead be {"token": ..., "maxPeers": N}: how many
// peers its shared token may have on the channel (default
// DefaultGlobMaxPeers). The zero value requires no token. Matching is in
// devtokens.go.
type Tokens struct {
	Any    []string          // from a list: any of these tokens, bound to a peer on first use
	ByPeer map[string]string // from an object: peer id or glob -> token (plain or sha256:<hex>)
	// MaxPeers is a glob's maxPeers where its entry gives one; GlobMax
	// reads it with the default.
	MaxPeers map[string]int
}

// Enabled reports whether the channel requires a token.
func (t Tokens) Enabled() bool { return len(t.Any) > 0 || len(t.ByPeer) > 0 }

// String describes t without revealing the tokens.
func (t Tokens) String() string {
	switch {
	case len(t.Any) > 0:
		return fmt.Sprintf("{Any:[%d redacted]}", len(t.Any))
	case len(t.ByPeer) > 0:
		peers := make([]string, 0, len(t.ByPeer))
		for p := range t.ByPeer {
			peers = append(peers, p)
		}
		sort.Strings(peers)
		return fmt.Sprintf("{ByPeer:%s redacted}", strings.Join(peers, ","))
	}
	return "{}"
}

// Agent is one agent. Exactly one of its fields is set.
type Agent struct {
	Builtin  *BuiltinAgent  // {"builtin": "echo"} or {"builtin": "echo", "delayMs": 5, "streamWordMs": 80}
	Terminal *TerminalAgent // agent protocol 1 (spec/terminal-protocol-v1.md)
	Nuum     *NuumAgent     // agent protocol 2 (spec/nuum-wire-protocol.md)
	Harness  *HarnessAgent  // agent protocol 3 (spec/term-challenge-protocol.md)
	ACP      *ACPAgent      // agent protocol 4: Agent Client Protocol v1
}

// BuiltinAgent is an agent built into the server.
type BuiltinAgent struct {
	Name    string // only "echo"
	DelayMs int    // delay before answering, >= 0; default 0
	// StreamWordMs, when positive, makes echo stream its reply to a
	// device that listed "stream": word by word, one every StreamWordMs
	// (after DelayMs). 0: the reply comes whole.
	StreamWordMs int
	// AskTimeoutSeconds is how long echo's "/ask TEXT" question stays
	// open (1 s to a day); 0: agent.DefaultQuestionTimeout.
	AskTimeoutSeconds int
}

// TerminalAgent is nanobot's "terminal" block: one process per message.
type TerminalAgent struct {
	Enabled        bool                // default false, as in nanobot; a channel may not use a disabled agent
	Command        string              // required; may contain {message}
	Timeout        int                 // seconds; default 120
	Protocol       string              // "plain" (default) or "rich"
	PassMedia      bool                // default true
	Env            map[string]string   // nil when empty
	Providers      map[string]Provider // by provider name; nil when empty
	MaxOutputBytes int                 // termlink addition; default 4 MiB
	// Questions (termlink addition, rich mode only): stdin stays open for
	// the run, so the agent can print question frames and read the
	// answers there (server/agent/terminal's doc); default false: stdin
	// is closed after the envelope, as nanobot does.
	Questions bool
}

// Provider is an LLM/API provider handed to a terminal agent.
type Provider struct {
	APIKeys []string // at least one
	Models  []string
	BaseURL string
}

// String describes p without revealing its keys.
func (p Provider) String() string {
	return fmt.Sprintf("{APIKeys:[%d redacted] Models:%v BaseURL:%s}", len(p.APIKeys), p.Models, p.BaseURL)
}

// NuumAgent is a long-lived NDJSON process per session.
type NuumAgent struct {
	Command          string // required
	IdleTimeout      int    // seconds; default 600
	MaxProcesses     int    // default 32
	StartTimeout     int    // seconds; default 30
	HeartbeatSeconds int    // default 30, 1..3600
	HeartbeatTimeout int    // seconds; default 10
	TurnTimeout      int    // seconds a turn may run before it is interrupted; 0 (default): no limit
	HeartbeatAck     string // "required" (default) or "optional": an agent that never answered a heartbeat is not killed for it
}

// HarnessAgent is an agent that drives a terminal, the server being the
// harness.
type HarnessAgent struct {
	Command          string // required
	Target           string // "tmux" (default), "pty" or "serial:PATH@BAUD"
	MaxSteps         int    // default 50
	MaxDuration      int    // seconds; default 1800
	ObservationBytes int    // default 10000
	StepTimeout      int    // seconds; default 120
}

// Serial returns the device path and baud rate of a "serial:PATH@BAUD"
// target; ok is false for other targets.
func (h HarnessAgent) Serial() (path string, baud int, ok bool) {
	path, baud, err := parseSerialTarget(h.Target)
	if err != nil {
		return "", 0, false
	}
	return path, baud, true
}

// parseSerialTarget parses "serial:PATH@BAUD".
func parseSerialTarget(target string) (string, int, error) {
	rest, ok := strings.CutPrefix(target, "serial:")
	if !ok {
		return "", 0, errors.New("not a serial target")
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return "", 0, errors.New(`missing "@BAUD"`)
	}
	path, b := rest[:at], rest[at+1:]
	if path == "" {
		return "", 0, errors.New("missing device path")
	}
	if strings.ContainsRune(path, 0) {
		return "", 0, errors.New("device path contains a NUL byte")
	}
	baud, err := strconv.Atoi(b)
	if err != nil || baud < 1 || baud > 10000000 || b[0] == '+' {
		return "", 0, fmt.Errorf("baud must be an integer between 1 and 10000000, got %q", truncate(b))
	}
	return path, baud, nil
}

// Default is the configuration used without a file: channel "terminal-dev"
// routed to the built-in echo agent, on 127.0.0.1:8080, with the workspace
// "./workspace" (relative to the working directory).
func Default() *Config {
	return &Config{
		Listen:            DefaultListen,
		Workspace:         DefaultWorkspace,
		MaxConcurrentRuns: DefaultMaxConcurrentRuns,
		MaxWaitingRuns:    DefaultMaxWaitingRuns,
		DedupeCacheBytes:  DefaultDedupeCacheBytes,
		Channels: map[string]Channel{
			DefaultChannelID: {
				Enabled:     true,
				Kind:        "terminal",
				Mode:        "websocket",
				AccountID:   "local",
				DisplayName: "Terminal Dev",
				Agent:       DefaultAgent,
				Config:      defaultChannelConfig(),
			},
		},
		Agents: map[string]Agent{DefaultAgent: echoAgent()},
	}
}

func defaultChannelConfig() ChannelConfig {
	return ChannelConfig{
		HeartbeatSeconds: DefaultHeartbeatSeconds,
		MaxMessageChars:  DefaultMaxMessageChars,
		SendQueue:        DefaultSendQueue,

		MaxWaitingPerSession:  DefaultMaxWaitingPerSession,
		RatePerPeer:           DefaultRatePerPeer,
		RateBurst:             DefaultRateBurst,
		ConnectTimeoutSeconds: DefaultConnectTimeoutSeconds,
	}
}

func echoAgent() Agent { return Agent{Builtin: &BuiltinAgent{Name: "echo"}} }

// Parse decodes and validates a config, applying defaults. The error lists
// every problem found, one *Error per line, sorted.
func Parse(data []byte) (*Config, error) {
	cfg, errs := parse(data)
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	return cfg, nil
}

// Load reads the config file at path and parses it. Each line of the error
// starts with path. A leading "~/" in the workspace is expanded to the home
// directory, and a relative workspace is resolved against the directory
// holding the file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		return nil, &Error{File: path, Msg: "cannot read: " + msg, Err: err}
	}
	cfg, errs := parse(data)
	if len(errs) > 0 {
		for _, e := range errs {
			e.File = path
		}
		return nil, joinErrors(errs)
	}
	ws, err := resolveWorkspace(cfg.Workspace, path)
	if err != nil {
		return nil, &Error{File: path, Path: "workspace", Msg: err.Error(), Err: err}
	}
	cfg.Workspace = ws
	if errs := append(checkTLSFiles(cfg, filepath.Dir(path)), checkReleaseKey(cfg, filepath.Dir(path))...); len(errs) > 0 {
		for _, e := range errs {
			e.File = path
		}
		return nil, joinErrors(errs)
	}
	return cfg, nil
}

func resolveWorkspace(ws, cfgPath string) (string, error) {
	if ws == "~" || strings.HasPrefix(ws, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot expand ~: %w", err)
		}
		ws = filepath.Join(home, strings.TrimPrefix(ws[1:], "/"))
	}
	if !filepath.IsAbs(ws) {
		dir, err := filepath.Abs(filepath.Dir(cfgPath))
		if err != nil {
			return "", fmt.Errorf("cannot make absolute: %w", err)
		}
		ws = filepath.Join(dir, ws)
	}
	return filepath.Clean(ws), nil
}
