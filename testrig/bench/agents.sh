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
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)

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

cat > "$tmp/cfg-terminal.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"echo-go"}},
 "agents":{"echo-go":{"terminal":{"enabled":true,"protocol":"rich","command":"$tmp/echoagent"}}}}
JSON
# The same server path with the built-in echo agent (no process): what
# the server adds (two write-ahead log syncs among it) whatever the runner.
cat > "$tmp/cfg-builtin.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}}}
JSON
roundtrip() { # binary config: the load's output; the server's CPU ticks before and after in $tmp/cpu
  cp "$2" "$tmp/cfg.json"
  run_server "$1"
  cpu0=$(cpu_ticks $SPID)
  "$tmp/termrig" load --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --devices 1 --rate "$RATE" --duration "$DURATION" | grep -E "messages|round trip"
  echo "$cpu0" "$(cpu_ticks $SPID)" >"$tmp/cpu"
  kill $SPID; wait $SPID 2>/dev/null || true
  rm -rf "$tmp/ws"
}
for round in $(seq "${ROUNDS:-1}"); do
  echo "== round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  direct=$("$tmp/direct" -n 300 -- "$tmp/echoagent")
  echo "direct (no shell):  $direct"
  echo "direct (sh -c):     $("$tmp/direct" -n 300 -- /bin/sh -c "$tmp/echoagent")"
  for bin in "$TERMSERVER" ${BASELINE:-}; do
    builtin=$(roundtrip "$bin" "$tmp/cfg-builtin.json" | grep 'round trip')
    out=$(roundtrip "$bin" "$tmp/cfg-terminal.json")
    replied=$(echo "$out" | sed -n 's/.*replied \([0-9]*\).*/\1/p')
    read -r s0 c0 s1 c1 <"$tmp/cpu"
    cpu0="$s0 $c0" cpu1="$s1 $c1"
    echo "through $bin (1 device, $RATE msg/s for $DURATION, terminal runner, same agent):"
    echo "$out"
    echo "same server, built-in echo agent: $builtin"
    echo "cpu/message: server $(cpu_ms "$cpu0" "$cpu1" 1 "$replied") ms, its agents (the runs' processes) $(cpu_ms "$cpu0" "$cpu1" 2 "$replied") ms"
    a=$(echo "$out" | grep 'round trip' | p50) b=$(echo "$direct" | p50) c=$(echo "$builtin" | p50)
    echo "added p50 over direct (no shell): $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f ms", a-b}'); of which the server path (built-in echo) $(awk -v c="$c" 'BEGIN{printf "%.2f ms", c}'), the runner $(awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN{printf "%.2f ms", a-b-c}')"
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
