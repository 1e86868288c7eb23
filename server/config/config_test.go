package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// designExample is the example of DESIGN.md, "Server config", verbatim.
const designExample = `{
  "listen": "127.0.0.1:8080",
  "workspace": "./workspace",
  "channels": {
    "terminal-dev": {
      "enabled": true, "kind": "terminal", "mode": "websocket",
      "accountId": "local", "displayName": "Terminal Dev", "agent": "echo",
      "config": {"heartbeatSeconds": 30, "maxMessageChars": 20000}
    }
  },
  "agents": {
    "echo":    {"builtin": "echo"},
    "helper":  {"terminal": {"enabled": true, "command": "python3 agent.py", "timeout": 120,
                "protocol": "rich", "passMedia": true, "env": {}, "providers": {}}},
    "nuum":    {"nuum": {"command": "nuum --stdio", "idleTimeout": 600}},
    "bringup": {"harness": {"command": "./agent", "target": "tmux", "maxSteps": 50}},
    "coder":   {"acp": {"command": "gemini --acp", "permission": "reject"}}
  }
}`

const designExampleSnake = `{
  "listen": "127.0.0.1:8080",
  "workspace": "./workspace",
  "channels": {
    "terminal-dev": {
      "enabled": true, "kind": "terminal", "mode": "websocket",
      "account_id": "local", "display_name": "Terminal Dev", "agent": "echo",
      "config": {"heartbeat_seconds": 30, "max_message_chars": 20000}
    }
  },
  "agents": {
    "echo":    {"builtin": "echo"},
    "helper":  {"terminal": {"enabled": true, "command": "python3 agent.py", "timeout": 120,
                "protocol": "rich", "pass_media": true, "env": {}, "providers": {}}},
    "nuum":    {"nuum": {"command": "nuum --stdio", "idle_timeout": 600}},
    "bringup": {"harness": {"command": "./agent", "target": "tmux", "max_steps": 50}},
    "coder":   {"acp": {"command": "gemini --acp", "permission": "reject"}}
  }
}`

func designExpected() *Config {
	return &Config{
		Listen:            "127.0.0.1:8080",
		Workspace:         "./workspace",
		MaxConcurrentRuns: 256,
		MaxWaitingRuns:    DefaultMaxWaitingRuns,
		DedupeCacheBytes:  DefaultDedupeCacheBytes,
		Channels: map[string]Channel{
			"terminal-dev": {
				Enabled:     true,
				Kind:        "terminal",
				Mode:        "websocket",
				AccountID:   "local",
				DisplayName: "Terminal Dev",
				Agent:       "echo",
				Config:      defaultChannelConfig(),
			},
		},
		Agents: map[string]Agent{
			"echo": {Builtin: &BuiltinAgent{Name: "echo"}},
			"helper": {Terminal: &TerminalAgent{
				Enabled:        true,
				Command:        "python3 agent.py",
				Timeout:        120,
				Protocol:       "rich",
				PassMedia:      true,
				MaxOutputBytes: 4 << 20,
			}},
			"nuum": {Nuum: &NuumAgent{
				Command:          "nuum --stdio",
				IdleTimeout:      600,
				MaxProcesses:     32,
				StartTimeout:     30,
				HeartbeatSeconds: 30,
				HeartbeatTimeout: 10,
				HeartbeatAck:     "required",
			}},
			"coder": {ACP: &ACPAgent{
				Command: "gemini --acp", IdleTimeout: 600, MaxProcesses: 32, StartTimeout: 30,
				Permission: "reject", AskTimeout: 60,
			}},
			"bringup": {Harness: &HarnessAgent{
				Command:          "./agent",
				Target:           "tmux",
				MaxSteps:         50,
				MaxDuration:      1800,
				ObservationBytes: 10000,
				StepTimeout:      120,
			}},
		},
	}
}

// fullCamel sets every key, in camelCase; fullSnake is the same in
// snake_case. Names (channel ids, agents, env, providers, peers) are mixed
// case on purpose: they must be kept as written.
const fullCamel = `{
  "listen": ":9000",
  "workspace": "/srv/ws",
  "maxConcurrentRuns": 8, "maxWaitingRuns": 100, "maxConnections": 500, "dedupeCacheBytes": 2097152,
  "channels": {
    "devA": {"enabled": false, "kind": "terminal", "mode": "websocket", "accountId": "acct.1",
      "displayName": "Dev A", "agent": "myAgent",
      "config": {"heartbeatSeconds": 15, "maxMessageChars": 500,
                 "tokens": {"peerOne": "tok1", "peer_two": "tok2"}, "sendQueue": 8,
                 "maxWaitingPerSession": 3, "ratePerPeer": 5, "rateBurst": 6, "connectTimeoutSeconds": 7}},
    "dev_b": {"accountId": "x", "agent": "nu", "config": {"tokens": ["t1", "t2"]}}
  },
  "agents": {
    "myAgent": {"terminal": {"enabled": true, "command": "run {message}", "timeout": 5, "protocol": "plain",
      "passMedia": false, "env": {"myVar": "1", "OTHER_VAR": "2"},
      "providers": {"myProvider": {"apiKeys": ["k1", "k2"], "models": ["m1"], "baseUrl": "https://api.example.com/v1"}},
      "maxOutputBytes": 1024}},
    "nu": {"nuum": {"command": "nuum", "idleTimeout": 60, "maxProcesses": 2, "startTimeout": 3,
      "heartbeatSeconds": 4, "heartbeatTimeout": 5, "turnTimeout": 90, "heartbeatAck": "optional"}},
    "coder": {"acp": {"command": "node", "args": ["agent.js", "--acp", ""], "env": {"API_KEY": "k"}, "cwd": "proj",
      "idleTimeout": 11, "maxProcesses": 12, "startTimeout": 13, "permission": "ask", "askTimeout": 14}},
    "h": {"harness": {"command": "./a", "target": "serial:/dev/ttyUSB0@115200", "maxSteps": 7,
      "maxDuration": 8, "observationBytes": 9, "stepTimeout": 10}},
    "slow": {"builtin": "echo", "delayMs": 250, "streamWordMs": 40}
  }
}`

const fullSnake = `{
  "listen": ":9000",
  "workspace": "/srv/ws",
  "max_concurrent_runs": 8, "max_waiting_runs": 100, "max_connections": 500, "dedupe_cache_bytes": 2097152,
  "channels": {
    "devA": {"enabled": false, "kind": "terminal", "mode": "websocket", "account_id": "acct.1",
      "display_name": "Dev A", "agent": "myAgent",
      "config": {"heartbeat_seconds": 15, "max_message_chars": 500,
                 "tokens": {"peerOne": "tok1", "peer_two": "tok2"}, "send_queue": 8,
                 "max_waiting_per_session": 3, "rate_per_peer": 5, "rate_burst": 6, "connect_timeout_seconds": 7}},
    "dev_b": {"account_id": "x", "agent": "nu", "config": {"tokens": ["t1", "t2"]}}
  },
  "agents": {
    "myAgent": {"terminal": {"enabled": true, "command": "run {message}", "timeout": 5, "protocol": "plain",
      "pass_media": false, "env": {"myVar": "1", "OTHER_VAR": "2"},
      "providers": {"myProvider": {"api_keys": ["k1", "k2"], "models": ["m1"], "base_url": "https://api.example.com/v1"}},
      "max_output_bytes": 1024}},
    "nu": {"nuum": {"command": "nuum", "idle_timeout": 60, "max_processes": 2, "start_timeout": 3,
      "heartbeat_seconds": 4, "heartbeat_timeout": 5, "turn_timeout": 90, "heartbeat_ack": "optional"}},
    "coder": {"acp": {"command": "node", "args": ["agent.js", "--acp", ""], "env": {"API_KEY": "k"}, "cwd": "proj",
      "idle_timeout": 11, "max_processes": 12, "start_timeout": 13, "permission": "ask", "ask_timeout": 14}},
    "h": {"harness": {"command": "./a", "target": "serial:/dev/ttyUSB0@115200", "max_steps": 7,
      "max_duration": 8, "observation_bytes": 9, "step_timeout": 10}},
    "slow": {"builtin": "echo", "delay_ms": 250, "stream_word_ms": 40}
  }
}`

func fullExpected() *Config {
	return &Config{
		Listen:            ":9000",
		Workspace:         "/srv/ws",
		MaxConcurrentRuns: 8,
		MaxWaitingRuns:    100,
		MaxConnections:    500,
		DedupeCacheBytes:  2 << 20,
		Channels: map[string]Channel{
			"devA": {
				Enabled: false, Kind: "terminal", Mode: "websocket", AccountID: "acct.1",
				DisplayName: "Dev A", Agent: "myAgent",
				Config: ChannelConfig{
					HeartbeatSeconds: 15, MaxMessageChars: 500, SendQueue: 8,
					MaxWaitingPerSession: 3, RatePerPeer: 5, RateBurst: 6, ConnectTimeoutSeconds: 7,
					Tokens: Tokens{ByPeer: map[string]string{"peerOne": "tok1", "peer_two": "tok2"}},
				},
			},
			"dev_b": {
				Enabled: true, Kind: "terminal", Mode: "websocket", AccountID: "x",
				DisplayName: "dev_b", Agent: "nu",
				Config: ChannelConfig{
					HeartbeatSeconds: 30, MaxMessageChars: 20000, SendQueue: 64,
					MaxWaitingPerSession: 64, RatePerPeer: 20, RateBurst: 40, ConnectTimeoutSeconds: 10,
					Tokens: Tokens{Any: []string{"t1", "t2"}},
				},
			},
		},
		Agents: map[string]Agent{
			"echo": {Builtin: &BuiltinAgent{Name: "echo"}}, // implicit
			"myAgent": {Terminal: &TerminalAgent{
				Enabled: true, Command: "run {message}", Timeout: 5, Protocol: "plain", PassMedia: false,
				Env: map[string]string{"myVar": "1", "OTHER_VAR": "2"},
				Providers: map[string]Provider{"myProvider": {
					APIKeys: []string{"k1", "k2"}, Models: []string{"m1"}, BaseURL: "https://api.example.com/v1",
				}},
				MaxOutputBytes: 1024,
			}},
			"nu": {Nuum: &NuumAgent{Command: "nuum", IdleTimeout: 60, MaxProcesses: 2, StartTimeout: 3,
				HeartbeatSeconds: 4, HeartbeatTimeout: 5, TurnTimeout: 90, HeartbeatAck: "optional"}},
			"coder": {ACP: &ACPAgent{Command: "node", Args: []string{"agent.js", "--acp", ""},
				Env: map[string]string{"API_KEY": "k"}, Cwd: "proj", IdleTimeout: 11, MaxProcesses: 12,
				StartTimeout: 13, Permission: "ask", AskTimeout: 14}},
			"h": {Harness: &HarnessAgent{Command: "./a", Target: "serial:/dev/ttyUSB0@115200", MaxSteps: 7,
				MaxDuration: 8, ObservationBytes: 9, StepTimeout: 10}},
			"slow": {Builtin: &BuiltinAgent{Name: "echo", DelayMs: 250, StreamWordMs: 40}},
		},
	}
}

func TestParseValid(t *testing.T) {
	minimal := `{"channels": {"terminal-dev": {"accountId": "local", "displayName": "Terminal Dev"}}}`
	tests := []struct {
		name string
		in   string
		want *Config
	}{
		{"design example", designExample, designExpected()},
		{"design example snake_case", designExampleSnake, designExpected()},
		{"every key camelCase", fullCamel, fullExpected()},
		{"every key snake_case", fullSnake, fullExpected()},
		{"minimal equals Default", minimal, Default()},
		{"integral float accepted", `{"maxConcurrentRuns": 8.0, "channels": {"terminal-dev": {"accountId": "local",
			"displayName": "Terminal Dev"}}}`, func() *Config { c := Default(); c.MaxConcurrentRuns = 8; return c }()},
		{"empty displayName falls back to id", `{"channels": {"c1": {"accountId": "a", "displayName": ""}}}`,
			func() *Config {
				c := Default()
				ch := c.Channels["terminal-dev"]
				ch.AccountID, ch.DisplayName = "a", "c1"
				c.Channels = map[string]Channel{"c1": ch}
				return c
			}()},
		{"disabled channel may use disabled agent", `{"channels": {"c": {"enabled": false, "accountId": "a", "agent": "t"}},
			"agents": {"t": {"terminal": {"command": "x"}}}}`, &Config{
			Listen: DefaultListen, Workspace: DefaultWorkspace, MaxConcurrentRuns: 256,
			MaxWaitingRuns: DefaultMaxWaitingRuns, DedupeCacheBytes: DefaultDedupeCacheBytes,
			Channels: map[string]Channel{"c": {Kind: "terminal", Mode: "websocket", AccountID: "a", DisplayName: "c",
				Agent: "t", Config: defaultChannelConfig()}},
			Agents: map[string]Agent{
				"echo": echoAgent(),
				"t":    {Terminal: &TerminalAgent{Command: "x", Timeout: 120, Protocol: "plain", PassMedia: true, MaxOutputBytes: 4 << 20}},
			},
		}},
		{"echo may be redefined", `{"channels": {"c": {"accountId": "a"}}, "agents": {"echo": {"builtin": "echo", "delayMs": 3}}}`,
			&Config{
				Listen: DefaultListen, Workspace: DefaultWorkspace, MaxConcurrentRuns: 256,
				MaxWaitingRuns: DefaultMaxWaitingRuns, DedupeCacheBytes: DefaultDedupeCacheBytes,
				Channels: map[string]Channel{"c": {Enabled: true, Kind: "terminal", Mode: "websocket", AccountID: "a",
					DisplayName: "c", Agent: "echo", Config: defaultChannelConfig()}},
				Agents: map[string]Agent{"echo": {Builtin: &BuiltinAgent{Name: "echo", DelayMs: 3}}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse mismatch\n got: %s\nwant: %s", dump(got), dump(tt.want))
			}
		})
	}
}

// dump prints a config with the pointers followed.
func dump(c *Config) string {
	var b strings.Builder
	b.WriteString("listen=" + c.Listen + " workspace=" + c.Workspace + "\n")
	keys := func(m map[string]Agent) []string {
		var k []string
		for n := range m {
			k = append(k, n)
		}
		sort.Strings(k)
		return k
	}
	for id, ch := range c.Channels {
		b.WriteString("  channel " + id + ": ")
		b.WriteString(strings.ReplaceAll(sprint(ch), "\n", " ") + " tokens=" + sprint(ch.Config.Tokens.Any) + sprint(ch.Config.Tokens.ByPeer) + "\n")
	}
	for _, n := range keys(c.Agents) {
		a := c.Agents[n]
		b.WriteString("  agent " + n + ": ")
		switch {
		case a.Builtin != nil:
			b.WriteString(sprint(*a.Builtin))
		case a.Terminal != nil:
			b.WriteString(sprint(*a.Terminal))
			for pn, p := range a.Terminal.Providers {
				b.WriteString(" provider " + pn + sprint(p.APIKeys))
			}
		case a.Nuum != nil:
			b.WriteString(sprint(*a.Nuum))
		case a.Harness != nil:
			b.WriteString(sprint(*a.Harness))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestDefault(t *testing.T) {
	want := &Config{
		Listen:            "127.0.0.1:8080",
		Workspace:         "./workspace",
		MaxConcurrentRuns: 256,
		MaxWaitingRuns:    DefaultMaxWaitingRuns,
		DedupeCacheBytes:  DefaultDedupeCacheBytes,
		Channels: map[string]Channel{"terminal-dev": {
			Enabled: true, Kind: "terminal", Mode: "websocket", AccountID: "local",
			DisplayName: "Terminal Dev", Agent: "echo",
			Config: defaultChannelConfig(),
		}},
		Agents: map[string]Agent{"echo": {Builtin: &BuiltinAgent{Name: "echo"}}},
	}
	if got := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default() =\n%s\nwant\n%s", dump(got), dump(want))
	}
	// Each call returns a fresh value.
	a := Default()
	a.Channels["x"] = Channel{}
	if _, ok := Default().Channels["x"]; ok {
		t.Error("Default shares state between calls")
	}
}

// errLines splits an error into its lines.
func errLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

const ch = `"channels": {"terminal-dev": {"accountId": "local"}}`

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // every line of the error, in order
	}{
		// unknown keys at each level
		{"unknown top-level key", `{"lisen": "x", ` + ch + `}`, []string{
			"config: lisen: unknown key (known: listen, workspace, maxConcurrentRuns, maxWaitingRuns, maxConnections, dedupeCacheBytes, channels, agents, admin, discovery, tls, cluster, releases, metrics)"}},
		{"unknown channel key", `{"channels": {"terminal-dev": {"accountId": "local", "agnet": "echo"}}}`, []string{
			"config: channels.terminal-dev.agnet: unknown key (known: enabled, kind, mode, accountId, displayName, agent, config)"}},
		{"unknown channel config key", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"heartbeat_secs": 5}}}}`, []string{
			"config: channels.terminal-dev.config.heartbeat_secs: unknown key (known: heartbeatSeconds, maxMessageChars, tokens, sendQueue, maxWaitingPerSession, ratePerPeer, rateBurst, connectTimeoutSeconds, maxNoticesPerPeer, clientCA, denyCerts, enrollment, enrollmentCodeSeconds)"}},
		{"unknown agent key", `{` + ch + `, "agents": {"a": {"builtin": "echo", "colour": 1}}}`, []string{
			"config: agents.a.colour: unknown key (known: builtin, delayMs, streamWordMs, askTimeoutSeconds, terminal, nuum, harness, acp)"}},
		{"unknown terminal key with hint", `{` + ch + `, "agents": {"helper": {"terminal": {"command": "x", "timeOut": 5}}}}`, []string{
			"config: agents.helper.terminal.timeOut: unknown key (known: enabled, command, timeout, protocol, passMedia, env, providers, maxOutputBytes, questions); did you mean timeout?"}},
		{"wrong casing hints both spellings", `{"channels": {"terminal-dev": {"accountID": "local"}}}`, []string{
			"config: channels.terminal-dev.accountID: unknown key (known: enabled, kind, mode, accountId, displayName, agent, config); did you mean accountId or account_id?",
			"config: channels.terminal-dev.accountId: required (a non-empty string)"}},
		{"unknown provider key", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "providers": {"openai": {"apiKeys": ["k"], "api_key": "k"}}}}}}`, []string{
			"config: agents.h.terminal.providers.openai.api_key: unknown key (known: apiKeys, models, baseUrl)"}},
		{"unknown nuum key", `{` + ch + `, "agents": {"n": {"nuum": {"command": "x", "idle": 5}}}}`, []string{
			"config: agents.n.nuum.idle: unknown key (known: command, idleTimeout, maxProcesses, startTimeout, heartbeatSeconds, heartbeatTimeout, turnTimeout, heartbeatAck)"}},
		{"unknown acp key", `{` + ch + `, "agents": {"c": {"acp": {"command": "x", "permissions": "ask"}}}}`, []string{
			"config: agents.c.acp.permissions: unknown key (known: command, args, env, cwd, idleTimeout, maxProcesses, startTimeout, permission, askTimeout, permissionFallback)"}},
		{"bad acp permission", `{` + ch + `, "agents": {"c": {"acp": {"command": "x", "permission": "allow_always"}}}}`, []string{
			`config: agents.c.acp.permission: must be "reject", "allow_once", "ask" or "device", got "allow_always"`}},
		{"missing acp command", `{` + ch + `, "agents": {"c": {"acp": {"args": ["a"]}}}}`, []string{
			"config: agents.c.acp.command: required (a non-empty string)"}},
		{"bad acp args", `{` + ch + `, "agents": {"c": {"acp": {"command": "x", "args": ["a", 2]}}}}`, []string{
			"config: agents.c.acp.args[1]: must be a string, got number"}},
		{"acp args not array", `{` + ch + `, "agents": {"c": {"acp": {"command": "x", "args": "a b"}}}}`, []string{
			"config: agents.c.acp.args: must be an array of strings, got string"}},
		{"bad acp timeouts", `{` + ch + `, "agents": {"c": {"acp": {"command": "x", "idleTimeout": 0, "askTimeout": -1}}}}`, []string{
			"config: agents.c.acp.askTimeout: must be a positive integer, got -1",
			"config: agents.c.acp.idleTimeout: must be a positive integer, got 0"}},
		{"bad acp env", `{` + ch + `, "agents": {"c": {"acp": {"command": "x", "env": {"A=B": "1"}}}}}`, []string{
			`config: agents.c.acp.env."A=B": invalid variable name "A=B": must be non-empty, without '=' or NUL`}},
		{"bad nuum heartbeatAck", `{` + ch + `, "agents": {"n": {"nuum": {"command": "x", "heartbeatAck": "never"}}}}`, []string{
			`config: agents.n.nuum.heartbeatAck: must be "required" or "optional", got "never"`}},
		{"negative nuum turnTimeout", `{` + ch + `, "agents": {"n": {"nuum": {"command": "x", "turnTimeout": -5}}}}`, []string{
			"config: agents.n.nuum.turnTimeout: must be a non-negative integer, got -5"}},
		{"unknown harness key", `{` + ch + `, "agents": {"b": {"harness": {"command": "x", "steps": 5}}}}`, []string{
			"config: agents.b.harness.steps: unknown key (known: command, target, maxSteps, maxDuration, observationBytes, stepTimeout)"}},

		// wrong JSON types
		{"top level not an object", `[]`, []string{"config: must be an object, got array"}},
		{"top level null", `null`, []string{"config: must be an object, got null"}},
		{"listen not a string", `{"listen": 8080, ` + ch + `}`, []string{"config: listen: must be a string, got number"}},
		{"channels not an object", `{"channels": ["terminal-dev"]}`, []string{"config: channels: must be an object, got array"}},
		{"channel null", `{"channels": {"terminal-dev": null}}`, []string{"config: channels.terminal-dev: must be an object, got null"}},
		{"enabled not a boolean", `{"channels": {"terminal-dev": {"accountId": "local", "enabled": "yes"}}}`, []string{
			"config: channels.terminal-dev.enabled: must be a boolean (true or false), got string"}},
		{"enabled as number", `{"channels": {"terminal-dev": {"accountId": "local", "enabled": 1}}}`, []string{
			"config: channels.terminal-dev.enabled: must be a boolean (true or false), got number"}},
		{"timeout a string", `{` + ch + `, "agents": {"helper": {"terminal": {"command": "x", "timeout": "abc"}}}}`, []string{
			`config: agents.helper.terminal.timeout: must be a positive integer, got "abc"`}},
		{"timeout fractional", `{` + ch + `, "agents": {"helper": {"terminal": {"command": "x", "timeout": 30.5}}}}`, []string{
			`config: agents.helper.terminal.timeout: must be a positive integer, got 30.5`}},
		{"timeout object", `{` + ch + `, "agents": {"helper": {"terminal": {"command": "x", "timeout": {}}}}}`, []string{
			`config: agents.helper.terminal.timeout: must be a positive integer, got object`}},
		{"command a list", `{` + ch + `, "agents": {"helper": {"terminal": {"command": ["python3", "a.py"]}}}}`, []string{
			`config: agents.helper.terminal.command: must be a string, got array`}},
		{"apiKeys a string", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "providers": {"p": {"apiKeys": "k"}}}}}}`, []string{
			"config: agents.h.terminal.providers.p.apiKeys: must be an array of strings, got string"}},
		{"models element a number", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "providers": {"p": {"apiKeys": ["k"], "models": ["m", 4]}}}}}}`, []string{
			"config: agents.h.terminal.providers.p.models[1]: must be a string, got number"}},
		{"env value a number", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "env": {"N": 1}}}}}`, []string{
			"config: agents.h.terminal.env.N: must be a string, got number"}},
		{"agent null", `{` + ch + `, "agents": {"a": null}}`, []string{"config: agents.a: must be an object, got null"}},
		{"builtin not a string", `{` + ch + `, "agents": {"a": {"builtin": true}}}`, []string{
			"config: agents.a.builtin: must be a string, got boolean"}},

		// out of range
		{"heartbeat zero", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"heartbeatSeconds": 0}}}}`, []string{
			"config: channels.terminal-dev.config.heartbeatSeconds: must be an integer between 1 and 3600, got 0"}},
		{"heartbeat too big", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"heartbeat_seconds": 3601}}}}`, []string{
			"config: channels.terminal-dev.config.heartbeat_seconds: must be an integer between 1 and 3600, got 3601"}},
		{"maxMessageChars too big", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"maxMessageChars": 1000001}}}}`, []string{
			"config: channels.terminal-dev.config.maxMessageChars: must be an integer between 1 and 1000000, got 1000001"}},
		{"sendQueue zero", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"sendQueue": 0}}}}`, []string{
			"config: channels.terminal-dev.config.sendQueue: must be an integer between 1 and 65536, got 0"}},
		{"maxConcurrentRuns negative", `{"maxConcurrentRuns": -1, ` + ch + `}`, []string{
			"config: maxConcurrentRuns: must be a positive integer, got -1"}},
		{"huge integer", `{"max_concurrent_runs": 1e400, ` + ch + `}`, []string{
			"config: max_concurrent_runs: must be a positive integer, got 1e400"}},
		{"integer above cap", `{"maxConcurrentRuns": 4294967296, ` + ch + `}`, []string{
			"config: maxConcurrentRuns: must be at most 2147483647, got 4294967296"}},
		{"delayMs negative", `{` + ch + `, "agents": {"a": {"builtin": "echo", "delayMs": -5}}}`, []string{
			"config: agents.a.delayMs: must be a non-negative integer, got -5"}},
		{"nuum heartbeat too big", `{` + ch + `, "agents": {"n": {"nuum": {"command": "x", "heartbeatSeconds": 4000}}}}`, []string{
			"config: agents.n.nuum.heartbeatSeconds: must be an integer between 1 and 3600, got 4000"}},
		{"harness maxSteps zero", `{` + ch + `, "agents": {"b": {"harness": {"command": "x", "max_steps": 0}}}}`, []string{
			"config: agents.b.harness.max_steps: must be a positive integer, got 0"}},

		// bad values
		{"listen without port", `{"listen": "localhost", ` + ch + `}`, []string{
			`config: listen: must be host:port, got "localhost"`}},
		{"listen bad port", `{"listen": ":99999", ` + ch + `}`, []string{
			`config: listen: port must be between 0 and 65535, got "99999"`}},
		{"kind unsupported", `{"channels": {"terminal-dev": {"accountId": "local", "kind": "telegram"}}}`, []string{
			`config: channels.terminal-dev.kind: unsupported kind "telegram" (supported: terminal)`}},
		{"mode unsupported", `{"channels": {"terminal-dev": {"accountId": "local", "mode": "webhook"}}}`, []string{
			`config: channels.terminal-dev.mode: unsupported mode "webhook" (supported: websocket)`}},
		{"protocol unknown", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "protocol": "jsonl"}}}}`, []string{
			`config: agents.h.terminal.protocol: must be "plain" or "rich", got "jsonl"`}},
		{"builtin unknown", `{` + ch + `, "agents": {"a": {"builtin": "parrot"}}}`, []string{
			`config: agents.a.builtin: unknown builtin agent "parrot" (known: echo)`}},
		{"delayMs without builtin", `{` + ch + `, "agents": {"a": {"nuum": {"command": "x"}, "delayMs": 5}}}`, []string{
			"config: agents.a.delayMs: only allowed with builtin"}},
		{"streamWordMs without builtin", `{` + ch + `, "agents": {"a": {"nuum": {"command": "x"}, "streamWordMs": 5}}}`, []string{
			"config: agents.a.streamWordMs: only allowed with builtin"}},
		{"streamWordMs negative", `{` + ch + `, "agents": {"a": {"builtin": "echo", "streamWordMs": -1}}}`, []string{
			"config: agents.a.streamWordMs: must be an integer between 0 and 60000, got -1"}},
		{"env bad name", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "env": {"A=B": "1"}}}}}`, []string{
			`config: agents.h.terminal.env."A=B": invalid variable name "A=B": must be non-empty, without '=' or NUL`}},
		{"baseUrl not http", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "providers": {"p": {"apiKeys": ["k"], "base_url": "ftp://x"}}}}}}`, []string{
			`config: agents.h.terminal.providers.p.base_url: must be an http or https URL, got "ftp://x"`}},
		{"command blank", `{` + ch + `, "agents": {"h": {"terminal": {"command": "  "}}}}`, []string{
			"config: agents.h.terminal.command: must not be empty"}},

		// missing required
		{"missing accountId", `{"channels": {"terminal-dev": {}}}`, []string{
			"config: channels.terminal-dev.accountId: required (a non-empty string)"}},
		{"missing terminal command", `{` + ch + `, "agents": {"h": {"terminal": {"enabled": true}}}}`, []string{
			"config: agents.h.terminal.command: required (a non-empty string)"}},
		{"missing nuum command", `{` + ch + `, "agents": {"n": {"nuum": {}}}}`, []string{
			"config: agents.n.nuum.command: required (a non-empty string)"}},
		{"missing harness command", `{` + ch + `, "agents": {"b": {"harness": {"target": "pty"}}}}`, []string{
			"config: agents.b.harness.command: required (a non-empty string)"}},
		{"missing apiKeys", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "providers": {"p": {"models": ["m"]}}}}}}`, []string{
			"config: agents.h.terminal.providers.p.apiKeys: required (an array of at least one key)"}},
		{"empty apiKeys", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "providers": {"p": {"apiKeys": []}}}}}}`, []string{
			"config: agents.h.terminal.providers.p.apiKeys: must hold at least one key"}},
		{"no channels key", `{}`, []string{"config: channels: no channel configured"}},
		{"empty channels", `{"channels": {}}`, []string{"config: channels: no channel configured"}},

		// references
		{"unknown agent", `{"channels": {"terminal-dev": {"accountId": "local", "agent": "helpr"}},
			"agents": {"echo": {"builtin": "echo"}, "helper": {"terminal": {"enabled": true, "command": "x"}}}}`, []string{
			`config: channels.terminal-dev.agent: unknown agent "helpr" (defined: echo, helper)`}},
		{"unknown agent with implicit echo", `{"channels": {"terminal-dev": {"accountId": "local", "agent": "nope"}}}`, []string{
			`config: channels.terminal-dev.agent: unknown agent "nope" (defined: echo)`}},
		{"disabled terminal agent", `{"channels": {"terminal-dev": {"accountId": "local", "agent": "helper"}},
			"agents": {"helper": {"terminal": {"command": "x"}}}}`, []string{
			`config: channels.terminal-dev.agent: agent "helper" is disabled (agents.helper.terminal.enabled is false) but the channel is enabled`}},

		// agent kinds
		{"no agent kind", `{` + ch + `, "agents": {"a": {}}}`, []string{
			"config: agents.a: must set exactly one of builtin, terminal, nuum, harness, acp; got none"}},
		{"several agent kinds", `{` + ch + `, "agents": {"a": {"builtin": "echo", "nuum": {"command": "x"}}}}`, []string{
			"config: agents.a: must set exactly one of builtin, terminal, nuum, harness, acp; got builtin, nuum"}},

		// names
		{"channel id with space", `{"channels": {"bad id": {"accountId": "local"}}}`, []string{
			`config: channels."bad id": invalid channel id "bad id": must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`}},
		{"channel id leading dash", `{"channels": {"-dev": {"accountId": "local"}}}`, []string{
			`config: channels.-dev: invalid channel id "-dev": must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`}},
		{"channel id too long", `{"channels": {"` + strings.Repeat("a", 65) + `": {"accountId": "local"}}}`, []string{
			`config: channels.` + strings.Repeat("a", 65) + `: invalid channel id "` + strings.Repeat("a", 64) + `...": must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`}},
		{"account id bad", `{"channels": {"terminal-dev": {"accountId": "a:b"}}}`, []string{
			`config: channels.terminal-dev.accountId: invalid account id "a:b": must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`}},
		{"account id empty", `{"channels": {"terminal-dev": {"account_id": ""}}}`, []string{
			`config: channels.terminal-dev.account_id: invalid account id "": must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`}},
		{"agent name bad", `{` + ch + `, "agents": {"my agent": {"builtin": "echo"}}}`, []string{
			`config: agents."my agent": invalid agent name "my agent": must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`}},

		// harness targets
		{"harness target unknown", `{` + ch + `, "agents": {"b": {"harness": {"command": "x", "target": "ssh"}}}}`, []string{
			`config: agents.b.harness.target: must be "tmux", "pty" or "serial:PATH@BAUD", got "ssh"`}},
		{"harness serial no baud", `{` + ch + `, "agents": {"b": {"harness": {"command": "x", "target": "serial:/dev/ttyUSB0"}}}}`, []string{
			`config: agents.b.harness.target: bad serial target "serial:/dev/ttyUSB0": missing "@BAUD" (want serial:PATH@BAUD)`}},
		{"harness serial no path", `{` + ch + `, "agents": {"b": {"harness": {"command": "x", "target": "serial:@9600"}}}}`, []string{
			`config: agents.b.harness.target: bad serial target "serial:@9600": missing device path (want serial:PATH@BAUD)`}},
		{"harness serial bad baud", `{` + ch + `, "agents": {"b": {"harness": {"command": "x", "target": "serial:/dev/ttyS0@fast"}}}}`, []string{
			`config: agents.b.harness.target: bad serial target "serial:/dev/ttyS0@fast": baud must be an integer between 1 and 10000000, got "fast" (want serial:PATH@BAUD)`}},
		{"harness serial zero baud", `{` + ch + `, "agents": {"b": {"harness": {"command": "x", "target": "serial:/dev/ttyS0@0"}}}}`, []string{
			`config: agents.b.harness.target: bad serial target "serial:/dev/ttyS0@0": baud must be an integer between 1 and 10000000, got "0" (want serial:PATH@BAUD)`}},

		// tokens
		{"tokens wrong type", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"tokens": "secret"}}}}`, []string{
			"config: channels.terminal-dev.config.tokens: must be an array of tokens or an object from peer id (or glob) to token, got string"}},
		{"tokens empty list", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"tokens": []}}}}`, []string{
			"config: channels.terminal-dev.config.tokens: must not be empty (leave tokens out to accept any device)"}},
		{"tokens empty object", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"tokens": {}}}}}`, []string{
			"config: channels.terminal-dev.config.tokens: must not be empty (leave tokens out to accept any device)"}},
		{"tokens list element", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"tokens": ["a", 5, ""]}}}}`, []string{
			"config: channels.terminal-dev.config.tokens[1]: must be a string, got number",
			"config: channels.terminal-dev.config.tokens[2]: must not be empty"}},
		{"tokens map value", `{"channels": {"terminal-dev": {"accountId": "local", "config": {"tokens": {"dev1": 5, "dev2": ""}}}}}`, []string{
			"config: channels.terminal-dev.config.tokens.dev1: must be a string, got number",
			"config: channels.terminal-dev.config.tokens.dev2: must not be empty"}},

		// duplicates
		{"both spellings", `{"channels": {"terminal-dev": {"accountId": "local", "account_id": "local"}}}`, []string{
			"config: channels.terminal-dev: both accountId and account_id are set; use one"}},
		{"both spellings nested", `{` + ch + `, "agents": {"h": {"terminal": {"command": "x", "pass_media": true, "passMedia": false}}}}`, []string{
			"config: agents.h.terminal: both pass_media and passMedia are set; use one"}},
		{"same key twice", `{"channels": {"terminal-dev": {"accountId": "a", "accountId": "b"}}}`, []string{
			"config: channels.terminal-dev.accountId: key given more than once"}},
		{"same channel twice", `{"channels": {"c": {"accountId": "a"}, "c": {"accountId": "b"}}}`, []string{
			"config: channels.c: key given more than once"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse succeeded, want error; got %s", dump(cfg))
			}
			if cfg != nil {
				t.Error("Parse returned a config with an error")
			}
			got := errLines(err)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("error lines:\n got: %q\nwant: %q", got, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("errors.As(*Error) failed on %T", err)
			}
		})
	}
}

func TestParseCollectsAllErrors(t *testing.T) {
	in := `{
  "listen": 1,
  "lisen": "x",
  "channels": {
    "b": {"agent": "nope", "config": {"heartbeatSeconds": 0}},
    "a": {"accountId": "ok", "enabled": "yes"}
  },
  "agents": {"z": {}, "t": {"terminal": {"timeout": "abc"}}}
}`
	want := []string{
		"config: agents.t.terminal.command: required (a non-empty string)",
		`config: agents.t.terminal.timeout: must be a positive integer, got "abc"`,
		"config: agents.z: must set exactly one of builtin, terminal, nuum, harness, acp; got none",
		"config: channels.a.enabled: must be a boolean (true or false), got string",
		"config: channels.b.accountId: required (a non-empty string)",
		`config: channels.b.agent: unknown agent "nope" (defined: echo, t, z)`,
		"config: channels.b.config.heartbeatSeconds: must be an integer between 1 and 3600, got 0",
		"config: lisen: unknown key (known: listen, workspace, maxConcurrentRuns, maxWaitingRuns, maxConnections, dedupeCacheBytes, channels, agents, admin, discovery, tls, cluster, releases, metrics)",
		"config: listen: must be a string, got number",
	}
	_, err := Parse([]byte(in))
	if got := errLines(err); !reflect.DeepEqual(got, want) {
		t.Errorf("error lines:\n got: %q\nwant: %q", got, want)
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != len(want) {
		t.Errorf("want %d joined errors, got %v", len(want), err)
	}
	for _, e := range joined.Unwrap() {
		var ce *Error
		if !errors.As(e, &ce) || ce.Path == "" {
			t.Errorf("%v: not an *Error with a path", e)
		}
	}
	// Stable output.
	for range 5 {
		if _, err2 := Parse([]byte(in)); err2.Error() != err.Error() {
			t.Fatalf("unstable error output:\n%v\n---\n%v", err, err2)
		}
	}
}

func TestParseSyntaxErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // prefix of the message
	}{
		{"empty", ``, "config: line 1, column 1: invalid JSON: unexpected end of JSON input"},
		{"bad literal", "{\n  \"listen\": tru}", "config: line 2, column 16: invalid JSON: invalid character '}' in literal true"},
		{"missing colon", `{"a" 1}`, "config: line 1, column 6: invalid JSON: invalid character '1' after object key"},
		{"truncated", "{\n", "config: line 2, column 1: invalid JSON: unexpected end of JSON input"},
		{"trailing comma", "{\"a\": 1,\n}", "config: line 2, column 1: invalid JSON: invalid character '}'"},
		{"two values", "{}\n{}", "config: line 2, column 1: invalid JSON: invalid character '{' after top-level value"},
		{"columns count characters", `{"é": x}`, "config: line 1, column 7: invalid JSON: invalid character 'x'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("got %v, want prefix %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("syntax error has several lines: %q", err)
			}
		})
	}
}

func TestTokens(t *testing.T) {
	parse := func(tokens string) Tokens {
		t.Helper()
		cfg, err := Parse([]byte(`{"channels": {"c": {"accountId": "a", "config": {"tokens": ` + tokens + `}}}}`))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		return cfg.Channels["c"].Config.Tokens
	}
	list := parse(`["alpha", "beta"]`)
	if !reflect.DeepEqual(list, Tokens{Any: []string{"alpha", "beta"}}) {
		t.Errorf("list tokens = %#v", list)
	}
	byPeer := parse(`{"dev-1": "alpha", "Dev_2": "beta"}`)
	if !reflect.DeepEqual(byPeer, Tokens{ByPeer: map[string]string{"dev-1": "alpha", "Dev_2": "beta"}}) {
		t.Errorf("peer tokens = %#v", byPeer)
	}

	tests := []struct {
		name           string
		tok            Tokens
		peer, token    string
		enabled, known bool
		allows         bool
	}{
		{"none", Tokens{}, "p", "x", false, false, false},
		{"none empty token", Tokens{}, "p", "", false, false, false},
		{"list match", list, "anyone", "beta", true, true, true},
		{"list miss", list, "anyone", "gamma", true, false, false},
		{"list prefix", list, "anyone", "alph", true, false, false},
		{"list empty token", list, "anyone", "", true, false, false},
		{"peer match", byPeer, "dev-1", "alpha", true, true, true},
		{"peer names not normalised", byPeer, "dev_2", "beta", true, true, false},
		{"other peer's token", byPeer, "dev-1", "beta", true, true, false},
		{"unknown peer", byPeer, "dev-3", "alpha", true, true, false},
		{"peer wrong token", byPeer, "Dev_2", "nope", true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tok.Enabled(); got != tt.enabled {
				t.Errorf("Enabled() = %v", got)
			}
			if got := tt.tok.Known(tt.token); got != tt.known {
				t.Errorf("Known(%q) = %v", tt.token, got)
			}
			if got := tt.tok.Allows(tt.peer, tt.token); got != tt.allows {
				t.Errorf("Allows(%q, %q) = %v", tt.peer, tt.token, got)
			}
		})
	}
}

func TestSecretsNotPrinted(t *testing.T) {
	cfg, err := Parse([]byte(fullCamel))
	if err != nil {
		t.Fatal(err)
	}
	s := sprint(cfg.Channels["devA"]) + sprint(cfg.Channels["dev_b"]) + sprint(*cfg.Agents["myAgent"].Terminal)
	for _, secret := range []string{"tok1", "tok2", "t1", "t2", "k1", "k2"} {
		if strings.Contains(s, `"`+secret+`"`) || strings.Contains(s, secret+" ") || strings.Contains(s, secret+"]") {
			t.Errorf("%q printed: %s", secret, s)
		}
	}
	if !strings.Contains(s, "https://api.example.com/v1") || !strings.Contains(s, "peerOne") {
		t.Errorf("non-secret fields missing: %s", s)
	}
}

func TestHarnessSerial(t *testing.T) {
	tests := []struct {
		target string
		path   string
		baud   int
		ok     bool
	}{
		{"serial:/dev/ttyUSB0@115200", "/dev/ttyUSB0", 115200, true},
		{"serial:/dev/serial/by-id/usb-a@b-if00@9600", "/dev/serial/by-id/usb-a@b-if00", 9600, true},
		{"serial:COM3@9600", "COM3", 9600, true},
		{"tmux", "", 0, false},
		{"pty", "", 0, false},
		{"serial:/dev/ttyS0", "", 0, false},
		{"serial:/dev/ttyS0@+9600", "", 0, false},
		{"serial:/dev/ttyS0@-1", "", 0, false},
	}
	for _, tt := range tests {
		path, baud, ok := HarnessAgent{Target: tt.target}.Serial()
		if path != tt.path || baud != tt.baud || ok != tt.ok {
			t.Errorf("Serial(%q) = %q, %d, %v; want %q, %d, %v", tt.target, path, baud, ok, tt.path, tt.baud, tt.ok)
		}
		in := `{` + ch + `, "agents": {"b": {"harness": {"command": "x", "target": "` + tt.target + `"}}}}`
		if _, err := Parse([]byte(in)); (err == nil) != (tt.ok || tt.target == "tmux" || tt.target == "pty") {
			t.Errorf("Parse with target %q: %v", tt.target, err)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	t.Run("design example", func(t *testing.T) {
		p := writeFile(t, dir, "design.json", designExample)
		cfg, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		want := designExpected()
		want.Workspace = filepath.Join(dir, "workspace")
		if !reflect.DeepEqual(cfg, want) {
			t.Errorf("Load =\n%s\nwant\n%s", dump(cfg), dump(want))
		}
	})

	t.Run("relative path, default workspace", func(t *testing.T) {
		sub := filepath.Join(dir, "etc")
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, sub, "min.json", `{`+ch+`}`)
		t.Chdir(dir)
		cfg, err := Load(filepath.Join("etc", "min.json"))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(sub, "workspace"); cfg.Workspace != want {
			t.Errorf("Workspace = %q, want %q", cfg.Workspace, want)
		}
	})

	t.Run("absolute workspace kept", func(t *testing.T) {
		ws := filepath.Join(dir, "elsewhere")
		p := writeFile(t, dir, "abs.json", `{"workspace": "`+filepath.ToSlash(ws)+`/./", `+ch+`}`)
		cfg, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Workspace != ws {
			t.Errorf("Workspace = %q, want %q", cfg.Workspace, ws)
		}
	})

	t.Run("home workspace", func(t *testing.T) {
		home := t.TempDir()
		t.Setenv("HOME", home)
		p := writeFile(t, dir, "home.json", `{"workspace": "~/ws", `+ch+`}`)
		cfg, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(home, "ws"); cfg.Workspace != want {
			t.Errorf("Workspace = %q, want %q", cfg.Workspace, want)
		}
	})

	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(dir, "nope.json")
		_, err := Load(p)
		if err == nil {
			t.Fatal("no error")
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("error %v is not fs.ErrNotExist", err)
		}
		if want := p + ": config: cannot read: no such file or directory"; err.Error() != want {
			t.Errorf("error = %q, want %q", err, want)
		}
	})

	t.Run("invalid JSON", func(t *testing.T) {
		p := writeFile(t, dir, "bad.json", "{\n  \"listen\": \"x\",\n  \"channels\": {,}\n}")
		_, err := Load(p)
		want := p + ":3:16: config: invalid JSON: invalid character ',' looking for beginning of object key string"
		if err == nil || err.Error() != want {
			t.Errorf("error = %v, want %q", err, want)
		}
		var ce *Error
		if !errors.As(err, &ce) || ce.Line != 3 || ce.Column != 16 || ce.File != p {
			t.Errorf("*Error = %+v", ce)
		}
	})

	t.Run("every line names the file", func(t *testing.T) {
		p := writeFile(t, dir, "errs.json", `{"listen": 1, "channels": {"c": {}}}`)
		_, err := Load(p)
		want := []string{
			p + ": config: channels.c.accountId: required (a non-empty string)",
			p + ": config: listen: must be a string, got number",
		}
		if got := errLines(err); !reflect.DeepEqual(got, want) {
			t.Errorf("error lines:\n got: %q\nwant: %q", got, want)
		}
	})
}
