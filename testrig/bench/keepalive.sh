#!/usr/bin/env bash
# keepalive.sh [IDLE] [DEVICES]
# Descriptor exhaustion: IDLE (default 19000) idle keep-alive HTTP
# connections plus DEVICES (default 1000) connected devices against one
# termserver whose fd limit is 20000. Then: does /healthz answer, and can
# a new device connect and get an answer (termrig link-test)?
# TERMSERVER=path compares another build.
set -euo pipefail
IDLE=${1:-19000}
DEV=${2:-1000}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill $HPID $LPID $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
HPID= LPID= SPID=
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig ./testrig/bench/holdconns
TERMSERVER=${TERMSERVER:-$tmp/termserver}
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}}}
JSON
(ulimit -n 20000; exec "$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log") &
SPID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done
url=ws://127.0.0.1:$port/api/channels/terminal-dev/ws
"$tmp/termrig" load --server $url --devices "$DEV" --rate 0 --hold --connect-rate 1000 >"$tmp/load.out" 2>&1 &
LPID=$!
for _ in $(seq 1 60); do sleep 1; grep -q "connected $DEV devices" "$tmp/load.out" && break; done
echo "devices: $(grep -o "connected $DEV devices" "$tmp/load.out" || echo "not all connected")"
(ulimit -n 20000; exec "$tmp/holdconns" -addr 127.0.0.1:$port -n "$IDLE" -hold 60s) >"$tmp/hold.out" 2>&1 &
HPID=$!
for _ in $(seq 1 120); do sleep 1; grep -q holding "$tmp/hold.out" && break; done
cat "$tmp/hold.out"
echo "server fds: $(ls /proc/$SPID/fd | wc -l)"
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' 127.0.0.1:$port/healthz || true)
echo "/healthz: ${code:-no answer}"
"$tmp/termrig" link-test --server $url 2>&1 | head -3 || true
grep -c "too many open files" "$tmp/server.log" | sed 's/^/server log "too many open files" lines: /'
