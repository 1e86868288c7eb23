#!/usr/bin/env bash
# throughput.sh [DEVICES] [RATE...]
# Message throughput and round trip: termserver (echo agent, fsync on) and
# `termrig load` on this machine. The first pass creates every session's
# log file; the rates are then measured on the warm server.
set -euo pipefail
D=${1:-1000}
shift || true
RATES=${*:-2000 10000}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig
TERMSERVER=${TERMSERVER:-$tmp/termserver} # another build to compare with
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}}}
JSON
"$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
SPID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done # ready, however busy the machine
url=ws://127.0.0.1:$port/api/channels/terminal-dev/ws
echo "== warm-up: $D devices, one message each (creates the session logs)"
"$tmp/termrig" load --server $url --devices "$D" --rate "$D" --duration 1s --peer-prefix bench | grep -E "messages|round trip"
for r in $RATES; do
  echo "== $D devices, $r messages/s for 10s"
  "$tmp/termrig" load --server $url --devices "$D" --rate "$r" --duration 10s --peer-prefix bench | grep -E "messages|throughput|round trip|ack |result"
done
