#!/usr/bin/env bash
# ready.sh [MIB] [RUNS]
# Time to ready after kill -9 with a large workspace: fills session logs
# to about MIB MiB (default 1024) with 20,000-character messages from 50
# devices (the server's default bounds, but no rate limit), kills the server with SIGKILL mid-flood (so some messages are
# accepted and unanswered), then starts TERMSERVER (default: built from
# this tree; set it to an older build to compare) on a copy of that
# workspace RUNS times (default 3) and prints the time until /healthz
# answers and the RSS then. With BASELINE=path (an older build), each run
# also starts that build on a fresh copy, alternating with TERMSERVER.
# With FRESH=1, each run then sends one new message to every session and
# prints the time to its ack (testrig/bench/resend -fresh): what the first
# message of a session costs after the start.
set -euo pipefail
MIB=${1:-1024}
RUNS=${2:-3}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill -9 $SPID $LPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
SPID= LPID=
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig ./testrig/bench/resend
TERMSERVER=${TERMSERVER:-$tmp/termserver}
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
cat > "$tmp/gen.json" <<JSON
{"workspace":"$tmp/ws",
 "channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local",
   "config":{"ratePerPeer":100000,"rateBurst":100000}}}}
JSON
cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/run","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}}}
JSON
"$tmp/termserver" --config "$tmp/gen.json" --listen 127.0.0.1:$port --unsafe-no-fsync >/dev/null 2>"$tmp/gen.log" &
SPID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done
text=$(head -c 20000 /dev/zero | tr '\0' 'y')
"$tmp/termrig" load --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --devices 50 --rate 2000 \
  --duration 600s --drain 0 --peer-prefix fill --text "$text" >"$tmp/load.out" 2>&1 &
LPID=$!
until [ "$(du -sm "$tmp/ws" | cut -f1)" -ge "$MIB" ]; do sleep 1; done
kill -9 $SPID; wait $SPID 2>/dev/null || true
kill $LPID 2>/dev/null || true; wait $LPID 2>/dev/null || true
echo "workspace: $(du -sm "$tmp/ws" | cut -f1) MiB in $(ls "$tmp/ws/sessions" | wc -l) session files"
for i in $(seq 1 "$RUNS"); do
  for bin in "$TERMSERVER" ${BASELINE:-}; do
    rm -rf "$tmp/run"; cp -r "$tmp/ws" "$tmp/run"
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    t0=$(date +%s%N)
    "$bin" --config "$tmp/cfg.json" --listen 127.0.0.1:$port >/dev/null 2>"$tmp/run.log" &
    SPID=$!
    until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.01; done
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    rss=$(awk '/VmRSS/{print $2}' /proc/$SPID/status)
    echo "run $i $bin: ready in ${ms}ms rss=$((rss / 1024))MiB load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    if [ "${FRESH:-}" = 1 ]; then
      echo "  $("$tmp/resend" -fresh -parallel 50 -server ws://127.0.0.1:$port/api/channels/terminal-dev/ws -sessions "$tmp/run/sessions")" \
        "rss=$(( $(awk '/VmRSS/{print $2}' /proc/$SPID/status) / 1024 ))MiB"
    fi
    kill -9 $SPID; wait $SPID 2>/dev/null || true
  done
done
