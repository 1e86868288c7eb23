#!/usr/bin/env bash
# flood.sh [SECONDS] [PEERS]
# The delivery contract's flood: PEERS devices (default 10) send
# 20,000-character messages as fast as the server takes them against an
# agent that needs 1 s per message, for SECONDS (default 60). Prints the
# server's peak RSS (VmHWM), the waiting runs it reached, the session log
# size, and then kills the server with SIGKILL and times the restart until
# /healthz answers.
# TERMSERVER=path and TERMRIG=path use given binaries (e.g. an older build
# to compare with); by default both are built from this tree.
set -euo pipefail
SECS=${1:-60}
PEERS=${2:-10}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill -9 $SPID $LPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
SPID= LPID=
if [ -z "${TERMSERVER:-}" ] || [ -z "${TERMRIG:-}" ]; then
  go build -o "$tmp/" ./cmd/termserver ./cmd/termrig
fi
TERMSERVER=${TERMSERVER:-$tmp/termserver}
TERMRIG=${TERMRIG:-$tmp/termrig}
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}},
 "agents":{"echo":{"builtin":"echo","delayMs":1000}}}
JSON
# start runs the server and sets SPID and READY_MS (until /healthz answers).
start() {
  local t0; t0=$(date +%s%N)
  "$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port >/dev/null 2>>"$tmp/server.log" &
  SPID=$!
  until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.01; done
  READY_MS=$(( ($(date +%s%N) - t0) / 1000000 ))
}
start
text=$(head -c 20000 /dev/zero | tr '\0' 'x')
"$TERMRIG" load --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --devices "$PEERS" --rate 100000 \
  --duration "${SECS}s" --drain 0 --peer-prefix flood --text "$text" >"$tmp/load.out" 2>&1 &
LPID=$!
maxwait=0
for _ in $(seq 1 "$SECS"); do
  sleep 1
  w=$(curl -s -m 2 127.0.0.1:$port/api/status | python3 -c 'import json,sys; print(json.load(sys.stdin)["runs_waiting"])' 2>/dev/null || echo 0)
  [ "$w" -gt "$maxwait" ] && maxwait=$w
done
hwm=$(awk '/VmHWM/{print $2}' /proc/$SPID/status)
logs=$(du -sm "$tmp/ws/sessions" | cut -f1)
kill -9 $SPID; wait $SPID 2>/dev/null || true
kill $LPID 2>/dev/null || true; wait $LPID 2>/dev/null || true
echo "flood: peers=$PEERS seconds=$SECS peak_rss=$((hwm / 1024))MiB max_runs_waiting=$maxwait session_logs=${logs}MiB"
start
rss=$(awk '/VmRSS/{print $2}' /proc/$SPID/status)
echo "restart after kill -9: ready in ${READY_MS}ms, rss=$((rss / 1024))MiB, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
