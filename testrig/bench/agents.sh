#!/usr/bin/env bash
# agents.sh — figures for the agent runners, with termserver and termrig load
# on this machine:
#  1. Terminal Protocol v1 runner + Go echo agent: round trip through the
#     server at a low rate (1 device, 20 msg/s), beside the same agent binary
#     run directly with the same envelope (p50/p99 of 300 runs).
#  2. Nuum runner + Go nuum agent: 100 sessions at 1,000 messages/s; the
#     server's RSS afterwards.
# TERMSERVER=path runs another build (default: built from this tree).
# BASELINE=path also runs that build in part 1, alternating with
# TERMSERVER, ROUNDS times (default 1; medians are yours to take).
# DURATION (default 15s) is each round trip phase, RATE (default 20) its
# messages per second (one session runs one at a time: keep RATE below
# 1/round trip, or the figure is the queue); NUUM=0 skips part 2.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
SPID=
trap 'kill $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig ./testrig/agents/echoagent ./testrig/agents/nuumagent ./testrig/bench/direct
TERMSERVER=${TERMSERVER:-$tmp/termserver}
DURATION=${DURATION:-15s}
RATE=${RATE:-20}
port=$((20000 + RANDOM % 20000))

run_server() { # binary
  "$1" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
  SPID=$!
  sleep 1
}

cpu_ticks() { # utime+stime and cutime+cstime of pid, in clock ticks
  awk '{sub(/.*\) /, ""); print $12 + $13, $14 + $15}' /proc/$1/stat
}
cpu_ms() { # before after field(1 self, 2 children) messages
  echo "$1 $2" | awk -v f=$3 -v n=$4 -v hz="$(getconf CLK_TCK)" '{d = $(f + 2) - $f; printf "%.2f", n ? d * 1000 / hz / n : 0}'
}

p50() { # the p50 of a figure line, in ms
  sed -n 's/.*p50 \([0-9.]*\)\(ms\|s\|µs\) .*/\1 \2/p' | head -1 |
    awk '{print ($2 == "s") ? $1 * 1000 : ($2 == "µs") ? $1 / 1000 : $1}'
}

cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"echo-go"}},
 "agents":{"echo-go":{"terminal":{"enabled":true,"protocol":"rich","command":"$tmp/echoagent"}}}}
JSON
for round in $(seq "${ROUNDS:-1}"); do
  echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  direct=$("$tmp/direct" -n 300 -- "$tmp/echoagent")
  echo "direct (no shell):  $direct"
  echo "direct (sh -c):     $("$tmp/direct" -n 300 -- /bin/sh -c "$tmp/echoagent")"
  for bin in "$TERMSERVER" ${BASELINE:-}; do
    run_server "$bin"
    cpu0=$(cpu_ticks $SPID)
    out=$("$tmp/termrig" load --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --devices 1 --rate "$RATE" --duration "$DURATION" | grep -E "messages|round trip")
    cpu1=$(cpu_ticks $SPID)
    kill $SPID; wait $SPID 2>/dev/null || true
    replied=$(echo "$out" | sed -n 's/.*replied \([0-9]*\).*/\1/p')
    rm -rf "$tmp/ws"
    echo "through $bin (1 device, $RATE msg/s for $DURATION, terminal runner, same agent):"
    echo "$out"
    echo "cpu/message: server $(cpu_ms "$cpu0" "$cpu1" 1 "$replied") ms, its agents (the runs' processes) $(cpu_ms "$cpu0" "$cpu1" 2 "$replied") ms"
    echo "added p50 over direct (no shell): $(awk -v a="$(echo "$out" | grep 'round trip' | p50)" -v b="$(echo "$direct" | p50)" 'BEGIN{printf "%.2f ms", a-b}')"
  done
done
[ "${NUUM:-1}" = 0 ] && exit 0

cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws2","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"nuum"}},
 "agents":{"nuum":{"nuum":{"command":"$tmp/nuumagent","maxProcesses":128}}}}
JSON
run_server
echo "== nuum: 100 sessions, 1000 msg/s for 10 s"
"$tmp/termrig" load --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --devices 100 --rate 1000 --duration 10s | grep -E "messages|throughput|round trip"
echo "server RSS: $(awk '/VmRSS/{print $2}' /proc/$SPID/status) KiB with $(pgrep -c -f "$tmp/nuumagent" || true) nuum agent processes (their own RSS not included)"
