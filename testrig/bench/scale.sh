#!/usr/bin/env bash
# scale.sh — is termserver's CPU per message flat in the number of devices?
#
# Usage: [TERMSERVER=path] [ROUNDS=3] [RATE=2000] [PHASE=8s]
#        [COUNTS="100 1000 5000"] testrig/bench/scale.sh
#
# The same message rate (RATE msg/s, below capacity so nothing queues) is
# spread over each number of devices in COUNTS; the figure is the server
# process's CPU (utime+stime from /proc/PID/stat, read by termrig load
# --server-pid) per reply over the sending window. Each round starts a
# fresh termserver (echo agent, fsync on, workspace under $TMPDIR) per
# device count, warms every session with one message, then measures; the
# order of the counts rotates from round to round. Per-peer rate limits
# are raised (RATE/100 msg/s per device at 100 devices is above the
# default 20). Prints a line per run, then the median per count and its
# ratio to the smallest count, with the load average.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-2000}
PHASE=${PHASE:-8s}
COUNTS=${COUNTS:-100 1000 5000}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
SPID=
trap 'kill $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig
TERMSERVER=${TERMSERVER:-$tmp/termserver}
results=$tmp/results.tsv
: >"$results"

measure() { # devices
	local d=$1 port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
	rm -rf "$tmp/ws"
	cat >"$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","config":{"ratePerPeer":1000,"rateBurst":1000}}}}
JSON
	"$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
	SPID=$!
	until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do
		kill -0 $SPID 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
		sleep 0.05
	done
	local url=ws://127.0.0.1:$port/api/channels/terminal-dev/ws
	"$tmp/termrig" load --server "$url" --devices "$d" --rate "$d" --duration 1s --connect-rate 2000 --peer-prefix s >/dev/null 2>&1 || true
	"$tmp/termrig" load --server "$url" --devices "$d" --rate "$RATE" --duration "$PHASE" --connect-rate 2000 --peer-prefix s \
		--server-pid $SPID --json >"$tmp/rep.json" 2>/dev/null || true
	python3 - "$tmp/rep.json" "$d" "$round" "$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
us = r.get("server_cpu_per_reply_us", 0)
print(f"  {sys.argv[2]:>5} devices: {us:.1f} µs CPU/reply, {r['throughput_per_sec']:.0f} replies/s, "
      f"p50 {r['round_trip_ms']['p50']:.2f} ms p99 {r['round_trip_ms']['p99']:.2f} ms, lost {r['lost']}")
open(sys.argv[4], "a").write(f"{sys.argv[3]}\t{sys.argv[2]}\t{us}\n")
PY
	kill $SPID 2>/dev/null || true
	wait $SPID 2>/dev/null || true
	SPID=
}

echo "termserver: $TERMSERVER; $RATE msg/s for $PHASE over $COUNTS devices, $ROUNDS rounds"
echo "load average before: $(cat /proc/loadavg)"
read -r -a counts <<<"$COUNTS"
for round in $(seq 1 "$ROUNDS"); do
	echo "round $round, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	n=${#counts[@]}
	for i in $(seq 0 $((n - 1))); do
		measure "${counts[$(((i + round - 1) % n))]}"
	done
done
echo "load average after: $(cat /proc/loadavg)"
python3 - "$results" "$COUNTS" <<'PY'
import statistics, sys
vals = {}
for line in open(sys.argv[1]):
    _, d, us = line.split("\t")
    vals.setdefault(int(d), []).append(float(us))
counts = [int(c) for c in sys.argv[2].split()]
base = statistics.median(vals[counts[0]])
print(f"{'devices':>8} {'CPU/reply µs (median)':>22} {'ratio':>6}   per round")
for d in counts:
    m = statistics.median(vals[d])
    print(f"{d:>8} {m:22.1f} {m / base:6.2f}   {' '.join(f'{x:g}' for x in vals[d])}")
PY
