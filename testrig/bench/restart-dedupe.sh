#!/usr/bin/env bash
# restart-dedupe.sh [DEVICES] [SECONDS] [RUNS]
# Dedupe after kill -9 (issue 22 row 6): DEVICES lean devices (default
# 2000) flood termserver for SECONDS (default 5) at 100 messages/s each
# in total up to 20,000/s, the server is killed with SIGKILL mid-flood,
# started again on the same workspace, and every answered message id is
# resent (testrig/bench/resend): "second-runs" counts those run again.
# TERMSERVER (default: built from this tree) is the build under test; with
# BASELINE=path each run also measures that build, alternating.
set -euo pipefail
DEVICES=${1:-2000}
SECS=${2:-5}
RUNS=${3:-1}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill -9 $SPID $LPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
SPID= LPID=
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig ./testrig/bench/resend
TERMSERVER=${TERMSERVER:-$tmp/termserver}
port=$((20000 + RANDOM % 12000))
url=ws://127.0.0.1:$port/api/channels/terminal-dev/ws
for i in $(seq 1 "$RUNS"); do
  for bin in "$TERMSERVER" ${BASELINE:-}; do
    rm -rf "$tmp/ws"
    cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local",
  "config":{"ratePerPeer":100000,"rateBurst":100000}}}}
JSON
    "$bin" --config "$tmp/cfg.json" --listen 127.0.0.1:$port >/dev/null 2>"$tmp/srv.log" &
    SPID=$!
    until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done
    "$tmp/termrig" load --server "$url" --devices "$DEVICES" --rate 20000 --duration 600s --drain 0 \
      --peer-prefix flood >"$tmp/load.out" 2>&1 &
    LPID=$!
    sleep "$SECS"
    kill -9 $SPID; wait $SPID 2>/dev/null || true
    kill $LPID 2>/dev/null || true; wait $LPID 2>/dev/null || true
    t0=$(date +%s%N)
    "$bin" --config "$tmp/cfg.json" --listen 127.0.0.1:$port >/dev/null 2>"$tmp/srv2.log" &
    SPID=$!
    until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.01; done
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    out=$("$tmp/resend" -server "$url" -sessions "$tmp/ws/sessions")
    echo "run $i $bin: ready in ${ms}ms; $out; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    kill -9 $SPID; wait $SPID 2>/dev/null || true
  done
done
