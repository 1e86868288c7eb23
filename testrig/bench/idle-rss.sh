#!/usr/bin/env bash
# idle-rss.sh [N] [HEARTBEAT_SECONDS]
# Server memory per idle connection: starts termserver (echo agent) and
# `termrig load --rate 0 --hold` with N heartbeating devices, then reports
# (RSS with N connections - RSS at start) / N.
set -euo pipefail
N=${1:-10000}
HB=${2:-5}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill $LPID $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig
TERMSERVER=${TERMSERVER:-$tmp/termserver} # another build to compare with
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","config":{"heartbeatSeconds":$HB}}}}
JSON
"$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
SPID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done # ready, however busy the machine
base=$(awk '/VmRSS/{print $2}' /proc/$SPID/status)
"$tmp/termrig" load --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --devices "$N" --rate 0 --hold --connect-rate 2000 >"$tmp/load.out" 2>&1 &
LPID=$!
for _ in $(seq 1 120); do sleep 1; grep -q "connected $N devices" "$tmp/load.out" && break; done
grep -q "connected $N devices" "$tmp/load.out" || { echo "devices did not all connect:"; cat "$tmp/load.out"; exit 1; }
sleep $((HB * 3))   # let every device heartbeat a few times
rss=$(awk '/VmRSS/{print $2}' /proc/$SPID/status)
peers=$(curl -s 127.0.0.1:$port/api/status | python3 -c 'import json,sys; print(json.load(sys.stdin)["connected_peers"])')
echo "devices=$N connected_peers=$peers heartbeat=${HB}s rss_start=${base}KiB rss_with_devices=${rss}KiB per_connection=$(( (rss - base) * 1024 / N ))B"
