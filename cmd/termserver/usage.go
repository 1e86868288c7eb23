package main

import (
	"flag"
	"fmt"
)

// usageHead is what `termserver --help` says before the flags.
const usageHead = `termserver is the termlink server: it serves the terminal WebSocket
channel that termd devices connect to and runs each message on an agent.

Example:

	termserver --listen 0.0.0.0:8080                # channel terminal-dev, echo agent
	termserver --config /etc/termlink/termserver.json
	termserver --check-config /etc/termlink/termserver.json   # exit 0, or 1 with every problem and its key path
	termserver --listen 0.0.0.0:8443 --tls-cert server.pem --tls-key server-key.pem   # wss://; kill -HUP reloads the certificate, clientCA and denyCerts

Without --config it serves channel terminal-dev (the built-in echo agent) on
127.0.0.1:8080 with its workspace (session logs) in ./workspace. With
--config, a relative "workspace" in the file, or none (default
"./workspace"), is taken from the directory of the config file. The
workspace in use is logged at start.

In a cluster (the config's "cluster" block), session history is in NATS
JetStream; export-sessions writes it as nanobot JSONL session files:

	termserver --config edge-1.json export-sessions ./sessions

Example configs (each one checked by the tests): cmd/termserver/examples/
in the termlink source; a hardened systemd unit: cmd/termserver/termserver.service,
and cmd/termserver/termserver.socket to keep the port open across restarts
(systemd socket activation: the passed socket replaces "listen").

Usage: termserver [--config FILE] [flags]
       termserver --config FILE export-sessions DIR
       termserver --check-config FILE
       termserver --version

Flags:
`

// printUsage prints the help: what termserver is, an example, the flags.
func printUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), usageHead)
	fs.PrintDefaults()
}
