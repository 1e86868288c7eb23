package config_test

import (
	"fmt"

	"termlink/server/config"
)

func ExampleParse() {
	cfg, err := config.Parse([]byte(`{
	  "channels": {"desk": {"account_id": "home", "agent": "helper",
	                        "config": {"heartbeat_seconds": 10, "tokens": {"pi-1": "s3cret"}}}},
	  "agents": {"helper": {"terminal": {"enabled": true, "command": "python3 agent.py", "protocol": "rich"}}}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ch := cfg.Channels["desk"]
	t := cfg.Agents[ch.Agent].Terminal
	fmt.Println(cfg.Listen, ch.DisplayName, ch.Config.HeartbeatSeconds, ch.Config.Tokens.Allows("pi-1", "s3cret"))
	fmt.Println(t.Command, t.Protocol, t.Timeout, t.PassMedia)
	// Output:
	// 127.0.0.1:8080 desk 10 true
	// python3 agent.py rich 120 true
}

func ExampleParse_errors() {
	_, err := config.Parse([]byte(`{
	  "channels": {"terminal-dev": {"accountId": "local", "agent": "helpr",
	                                "config": {"heartbeat_secs": 5}}},
	  "agents": {"helper": {"terminal": {"command": "./agent", "timeout": "abc"}}}
	}`))
	fmt.Println(err)
	// Output:
	// config: agents.helper.terminal.timeout: must be a positive integer, got "abc"
	// config: channels.terminal-dev.agent: unknown agent "helpr" (defined: echo, helper)
	// config: channels.terminal-dev.config.heartbeat_secs: unknown key (known: heartbeatSeconds, maxMessageChars, tokens, sendQueue, maxWaitingPerSession, ratePerPeer, rateBurst, connectTimeoutSeconds, maxNoticesPerPeer)
}
