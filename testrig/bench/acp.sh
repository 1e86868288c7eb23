#!/usr/bin/env bash
# acp.sh [SESSIONS] [TURNS] [ROUNDS]
# The ACP runner's figures: its added latency per turn over a direct
# JSON-RPC round trip to the same agent (testrig/agents/acpagent), in
# alternating rounds, and termserver's RSS with SESSIONS live ACP sessions
# (one agent process each).
set -euo pipefail
S=${1:-100}
N=${2:-500}
R=${3:-5}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./testrig/agents/acpagent ./testrig/bench/acpbench
cat /proc/loadavg
"$tmp/acpbench" latency -agent "$tmp/acpagent" -n "$N" -rounds "$R"
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","maxConcurrentRuns":256,
 "channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"coder"}},
 "agents":{"coder":{"acp":{"command":"$tmp/acpagent","args":[],"maxProcesses":$((S + 10))}}}}
JSON
"$tmp/termserver" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
SPID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done
"$tmp/acpbench" rss -server ws://127.0.0.1:$port/api/channels/terminal-dev/ws -pid $SPID -sessions "$S"
echo "agent processes: $(pgrep -c -f "$tmp/acpagent" || true)"
cat /proc/loadavg
