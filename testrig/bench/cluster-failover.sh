#!/usr/bin/env bash
# cluster-failover.sh — how long a termserver cluster takes to come back
# from a killed edge and from a killed worker (issue 15's figures).
#
# Usage: [ROUNDS=3] [DEVICES=1000] [WDEVICES=200] [RUN_MS=2000]
#        testrig/bench/cluster-failover.sh
#
# Every node is a real process on loopback: 3 nats-server nodes (built
# from the pinned module), 2 termserver edges and 2 workers. Per round:
#   edge kill    DEVICES termrig load --client devices over both edges
#                (each has the other edge as its link fallback), 100 msg/s;
#                after 8 s edge-1 gets SIGKILL. Reported: seconds from the
#                kill until edge-2's /api/status counts every device, and
#                the load's lost and duplicate replies, with each
#                device's reconnect time (and the backoff part of it).
#   worker kill  the workers run the built-in echo with RUN_MS per run;
#                WDEVICES devices send 50 msg/s; after 6 s worker-1 gets
#                SIGKILL. Reported: seconds from the kill to the last and
#                the median reply of the runs it cut short (their
#                run_interrupted records, from export-sessions), how many
#                ran again, and lost and duplicate replies.
# Medians over the rounds, with the load average. The machine is shared
# by everything (NATS, edges, workers, the devices): the figures include
# CPU contention.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
DEVICES=${DEVICES:-1000}
WDEVICES=${WDEVICES:-200}
RUN_MS=${RUN_MS:-2000}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
cleanup() {
	pkill -9 -f "$tmp/" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
echo "building into $tmp"
. testrig/bench/lib.sh # natsnode (its field is replaced below)
cp "$(natsnode)" "$tmp/flnats"
go build -o "$tmp/flnode" ./cmd/termserver
go build -o "$tmp/termrig" ./cmd/termrig

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

start_nats() {
	local d=$1 cp=() rp=() routes="" i
	for i in 1 2 3; do cp[$i]=$(free_port); rp[$i]=$(free_port); done
	for i in 1 2 3; do routes="$routes nats-route://127.0.0.1:${rp[$i]},"; done
	NATS_URLS=""
	for i in 1 2 3; do
		mkdir -p "$d/n$i"
		cat > "$d/n$i.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:${cp[$i]}
jetstream { store_dir: "$d/n$i" }
cluster { name: fl, listen: 127.0.0.1:${rp[$i]}, routes: [${routes%,}] }
EOF
		"$tmp/flnats" -c "$d/n$i.conf" > "$d/n$i.log" 2>&1 &
		NATS_URLS="$NATS_URLS,nats://127.0.0.1:${cp[$i]}"
	done
	NATS_URLS=${NATS_URLS#,}
}

# start_node DIR NAME ROLE AGENTJSON: a termserver process; sets ADDR.
start_node() {
	local d=$1 name=$2 role=$3 agent=$4
	mkdir -p "$d/$name"
	cat > "$d/$name.json" <<EOF
{"listen": "127.0.0.1:0", "workspace": "$d/$name",
 "channels": {"terminal-dev": {"kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "echo"}},
 "agents": {"echo": $agent},
 "cluster": {"nats": "$NATS_URLS", "role": "$role", "name": "$name", "partitions": 16}}
EOF
	"$tmp/flnode" -config "$d/$name.json" > "$d/$name.log" 2>&1 &
}

addr_of() { sed -n 's/.*termserver listening" addr=\([^ ]*\).*/\1/p' "$1/$2.log" | head -1; }

wait_nodes() {
	local d=$1 i n
	for i in $(seq 120); do
		n=0
		for name in edge-1 edge-2 worker-1 worker-2; do [ -n "$(addr_of "$d" $name)" ] && n=$((n + 1)); done
		[ $n = 4 ] && break
		sleep 0.5
	done
	[ $n = 4 ] || { echo "nodes did not start; logs in $d" >&2; tail -n 5 "$d"/*.log >&2; exit 1; }
	sleep 3 # partitions taken
}

peers() { curl -s "http://$1/api/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connected_peers"])' 2>/dev/null || echo 0; }
field() { sed -n "s/^$1 *\(.*\)/\1/p" "$2" | head -1; }

cluster_up() { # DIR AGENTJSON
	start_nats "$1"
	sleep 2
	start_node "$1" edge-1 edge '{"builtin": "echo"}'
	start_node "$1" edge-2 edge '{"builtin": "echo"}'
	start_node "$1" worker-1 worker "$2"
	start_node "$1" worker-2 worker "$2"
	wait_nodes "$1"
}

edge_round() {
	local d=$tmp/edge$1 e1 e2 t0 t1 n=0
	mkdir -p "$d"
	cluster_up "$d" '{"builtin": "echo"}'
	e1=$(addr_of "$d" edge-1) e2=$(addr_of "$d" edge-2)
	"$tmp/termrig" load --client --server "ws://$e1/api/channels/terminal-dev/ws" --server "ws://$e2/api/channels/terminal-dev/ws" \
		--devices "$DEVICES" --rate 100 --duration 25s --drain 60s --connect-rate 500 > "$d/load.txt" 2>&1 &
	local lp=$!
	sleep 8
	pkill -9 -f "$d/edge-1.json"
	t0=$(date +%s.%N)
	for _ in $(seq 1200); do
		n=$(peers "$e2")
		[ "$n" -ge "$DEVICES" ] && break
		sleep 0.05
	done
	t1=$(date +%s.%N)
	wait $lp || true
	local back
	back=$(python3 -c "print(f'{$t1-$t0:.2f}')")
	[ "$n" -ge "$DEVICES" ] || back="never($n)"
	echo "  edge kill: all $DEVICES devices on edge-2 after ${back} s; $(field messages "$d/load.txt"); $(field duplicates "$d/load.txt")"
	EDGE_BACK+=("$back")
	# each device's time from its link dropping to connected again, and
	# the part of it spent waiting in the client's backoff
	grep -E '^(reconnect|[[:space:]]+waiting in backoff)' "$d/load.txt" | sed 's/^ */    /' || true
	pkill -9 -f "$d/" 2>/dev/null || true
	sleep 1
}

worker_round() {
	local d=$tmp/worker$1 e1 e2 t0
	mkdir -p "$d"
	cluster_up "$d" "{\"builtin\": \"echo\", \"delayMs\": $RUN_MS}"
	e1=$(addr_of "$d" edge-1) e2=$(addr_of "$d" edge-2)
	"$tmp/termrig" load --client --server "ws://$e1/api/channels/terminal-dev/ws" --server "ws://$e2/api/channels/terminal-dev/ws" \
		--devices "$WDEVICES" --rate 50 --duration 15s --drain 60s > "$d/load.txt" 2>&1 &
	local lp=$!
	sleep 6
	pkill -9 -f "$d/worker-1.json"
	t0=$(date +%s.%N)
	wait $lp || true
	"$tmp/flnode" -config "$d/edge-2.json" export-sessions "$d/export" > /dev/null 2>&1
	local r
	r=$(python3 - "$d/export" "$t0" <<'EOF'
import datetime, glob, json, statistics, sys
kill = float(sys.argv[2])
cut, done = set(), {}
for f in glob.glob(sys.argv[1] + "/*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        if r.get("event") == "run_interrupted":
            cut.add((f, r["message_id"]))
        if r.get("role") == "assistant":
            done[(f, r["message_id"])] = datetime.datetime.fromisoformat(r["timestamp"]).timestamp()
lat = sorted(done[k] - kill for k in cut if k in done)
if lat:
    print(f"{lat[-1]:.2f} {statistics.median(lat):.2f} {len(cut)}")
else:
    print(f"- - {len(cut)}")
EOF
)
	set -- $r
	echo "  worker kill: $3 runs cut short; their replies stored $2 s (median) and $1 s (last) after the kill; $(field messages "$d/load.txt"); $(field duplicates "$d/load.txt")"
	# when worker-2 took worker-1's partitions (its log), after the kill
	python3 - "$d/worker-2.log" "$t0" <<'EOF'
import datetime, re, sys
kill, taken = float(sys.argv[2]), []
for line in open(sys.argv[1]):
    m = re.match(r'time=(\S+) .*msg="cluster: partition taken"', line)
    if m:
        at = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() - kill
        if at > 0:
            taken.append(at)
if taken:
    print(f"    worker-2 took {len(taken)} partitions {min(taken):.2f}-{max(taken):.2f} s after the kill (lease 5 s)")
EOF
	WORKER_LAST+=("$1")
	WORKER_MED+=("$2")
	pkill -9 -f "$d/" 2>/dev/null || true
	sleep 1
}

median() { printf '%s\n' "$@" | grep -v -- - | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print "-"}'; }

EDGE_BACK=() WORKER_LAST=() WORKER_MED=()
echo "load average before: $(cat /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
	echo "round $r, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	edge_round "$r"
	worker_round "$r"
done
echo "load average after: $(cat /proc/loadavg)"
echo "median over $ROUNDS rounds: edge kill -> all $DEVICES devices back: $(median "${EDGE_BACK[@]}") s;" \
	"worker kill -> interrupted runs answered: median $(median "${WORKER_MED[@]}") s, last $(median "${WORKER_LAST[@]}") s (runs of $RUN_MS ms)"
