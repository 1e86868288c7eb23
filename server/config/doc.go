// Package config loads and validates termserver's JSON configuration.
//
// The file names the address to listen on, the workspace directory, the
// channels devices connect to and the agents that answer them:
//
//	{
//	  "listen": "127.0.0.1:8080",
//	  "workspace": "./workspace",
//	  "channels": {
//	    "terminal-dev": {
//	      "enabled": true, "kind": "terminal", "mode": "websocket",
//	      "accountId": "local", "displayName": "Terminal Dev", "agent": "echo",
//	      "config": {"heartbeatSeconds": 30, "maxMessageChars": 20000}
//	    }
//	  },
//	  "agents": {
//	    "echo":   {"builtin": "echo"},
//	    "helper": {"terminal": {"enabled": true, "command": "python3 agent.py"}}
//	  }
//	}
//
// As in nanobot, every key is accepted in camelCase and in snake_case
// (accountId or account_id, passMedia or pass_media); giving both spellings
// of one key is an error. Keys that are names chosen by the user (channel
// ids, agent names, env variables, provider names, peer ids in tokens) are
// taken as written. The terminal agent block is nanobot's terminal block,
// unchanged (see spec/terminal-protocol-v1.md, "Configuration Reference").
//
// Parse refuses unknown keys, values of the wrong JSON type, numbers out of
// range and dangling references. It reports every problem it finds, not just
// the first, one per line, each starting with "config: " and naming the key's
// path, for example:
//
//	config: channels.terminal-dev.config.heartbeat_secs: unknown key (known: heartbeatSeconds, maxMessageChars, tokens, ...)
//	config: channels.terminal-dev.enrollment: unknown key (known: enabled, kind, ...); it belongs in channels.terminal-dev.config.enrollment
//	config: agents.helper.terminal.timeout: must be a positive integer, got "abc"
//
// An unknown key gets a "did you mean" for a near miss in its block, else
// the places of the other blocks that know it (the schema table lists
// every block and its keys).
//
// Each line is an *Error; use errors.As on the returned error to get one.
//
// A channel's "tokens" (devtokens.go) bind device tokens to peers: a list
// (each token bound to the first peer_id it connects with), or an object
// from a peer id or a glob of them to a token. A glob's token is shared:
// any holder may be any matching peer, so its peers are counted, at most
// its entry's "maxPeers" (default 1000, 1..100000), given as
//
//	"tokens": {"pi-1": "<secret>", "kiosk-*": {"token": "sha256:<64 hex>", "maxPeers": 50}}
//
// Past it a new peer id on that token is refused at connect (the device
// registry counts them), and its peers never take the place of a device
// with its own credential in a full registry.
//
// The "tls" block ({"certFile", "keyFile"}) and a channel config's
// "clientCA" (and "denyCerts", SHA-256 fingerprints of refused client
// certificates) name files: Load resolves relative ones against the config
// file's directory and refuses, with the key's path, one it cannot read or
// parse. Parse checks their shape only. So does the "releases" block's
// "publicKeyFile" (the release key uploads are checked against; its
// "maxBytes" and "maxReleases" bound the store: releases.go).
//
// The "metrics" block (metrics.go) says what /metrics may show beyond its
// fixed series: "healthTagKeys", up to 8 device tag keys (each a valid
// tag key, none twice) whose values label
// termserver_devices_health_by_tag, the online devices per health
// condition per value (authenticated devices' tags only, at most 100
// values per key and channel, the rest as "other"):
//
//	"metrics": {"healthTagKeys": ["site", "floor"]}
package config
