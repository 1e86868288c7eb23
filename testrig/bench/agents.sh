#!/usr/bin/env bash
# agents.sh — figures for the agent runners, with termserver and termrig load
# on this machine:
#  1. Terminal Protocol v1 runner + Go echo agent: round trip through the
#     server at a low rate (1 device, 20 msg/s), beside the same agent binary
#     run directly with the same envelope (p50/p99 of 300 runs).
#  2. Nuum runner + Go nuum agent: 100 sessions at 1,000 messages/s; the
#     server's RSS afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig ./testrig/agents/echoagent ./testrig/agents/nuumagent ./testrig/bench/direct
port=$((20000 + RANDOM % 20000))

run_server() {
  "$tmp/termserver" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
  SPID=$!
  sleep 1
}

echo "== direct: echoagent run 300 times with an envelope on stdin (sh -c, as the runner does)"
"$tmp/direct" -n 300 -- /bin/sh -c "$tmp/echoagent"

cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"echo-go"}},
 "agents":{"echo-go":{"terminal":{"enabled":true,"protocol":"rich","command":"$tmp/echoagent"}}}}
JSON
run_server
echo "== through termserver: 1 device, 20 msg/s for 15 s (terminal runner, same agent)"
"$tmp/termrig" load --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --devices 1 --rate 20 --duration 15s | grep -E "messages|round trip"
kill $SPID; wait $SPID 2>/dev/null || true

cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws2","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"nuum"}},
 "agents":{"nuum":{"nuum":{"command":"$tmp/nuumagent","maxProcesses":128}}}}
JSON
run_server
echo "== nuum: 100 sessions, 1000 msg/s for 10 s"
"$tmp/termrig" load --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --devices 100 --rate 1000 --duration 10s | grep -E "messages|throughput|round trip"
echo "server RSS: $(awk '/VmRSS/{print $2}' /proc/$SPID/status) KiB with $(pgrep -c -f "$tmp/nuumagent" || true) nuum agent processes (their own RSS not included)"
