#!/usr/bin/env bash
# cluster-speed.sh — how fast the cluster's hot path is, and where its time
# goes, beside the embedded termserver in the same run (issue 25, item 3).
#
# Usage: [ROUNDS=3] [DEVICES=1000] [RATE=400] [SAT_RATE=15000] [PHASE=8s]
#        [PARTITIONS=16] [PROF_SECONDS=5] [TERMSERVER=path] [OUT=dir]
#        [COMPARE=path] [IDLE_WIN=3] [SKIP=1.5] [NATS_JS='sync_interval: always']
#        testrig/bench/cluster-speed.sh
#
# Every node is a real process on loopback, as in cluster-failover.sh: 3
# nats-server nodes (built from the module go.mod pins, each with its
# monitoring port and prof_port), 2 termserver edges and 2 workers
# (built-in echo agent, PARTITIONS partitions, replicas default 3). The
# embedded server is one termserver with no cluster block (same channel and
# agent, fsync default). TERMSERVER is the termserver binary for both
# (default: built from this tree); termrig load is always built from this
# tree. COMPARE=path, another termserver binary, adds a third server: the
# same cluster with that build (compare), so that two builds are measured
# side by side under the same machine load. Each round measures every
# server, fresh, in an order that turns by one each round:
#   warm-up     DEVICES devices, one message each (creates the sessions).
#   fixed rate  DEVICES devices (device i on edge i mod 2) at RATE msg/s for
#               PHASE: p50/p99 round trip, replies/s, lost and duplicate
#               replies (termrig load's report).
#   saturated   SAT_RATE msg/s offered for PHASE (+3 s drain): replies/s
#               (termrig load's throughput), p50/p99, lost, duplicates; the
#               ratio cluster/embedded of the replies/s (goal >= 0.4).
# Each loaded phase starts once every process is idle again. Inside each
# phase the script measures a steady-state window: from SKIP (1.5) s after
# termrig load's "connect phase done" (every device connected, sending
# starts) for PHASE less 3 s, so connects, the registry writes they cause
# and disconnects are outside it. Over the window:
#   replies     the termservers' termlink_outbound_delivered_total.
#   writes      per stream (its last sequence on the NATS nodes; a KV
#               bucket is the stream KV_<bucket>) per reply: the replicated
#               writes per message (issue: 4 today, goal <= 2). What the
#               cluster writes with DEVICES devices connected and idle
#               (heartbeats, leases, presence and registry refreshes),
#               measured for IDLE_WIN before the fixed phase, is subtracted.
#               At saturation more messages are accepted than answered in
#               the window (a backlog grows): the total is also given per
#               accepted message (termlink_inbound_total).
#   API         JetStream API requests (/jsz api.total, all nodes) and NATS
#               messages in/out (/varz, all nodes, routes included) per
#               reply.
#   CPU         CPU seconds of each process (/proc/PID/stat utime+stime):
#               each nats-server, each edge, each worker, termrig load.
#   profile     saturated phase only: a PROF_SECONDS CPU profile of each
#               NATS node (prof_port), from the window's start; `go tool
#               pprof -top` (25 lines, flat and cumulative) of each is saved
#               in OUT, and the top of the node leading TERMLINK_IN (and
#               which node is the meta leader) is printed.
# Output: a few lines per server per round, then the medians over the
# rounds with the ratio cluster/embedded, and the load average before and
# after (the machine is shared: the figures include CPU contention, and the
# load generator runs on the same cores). Everything measured (load
# reports, snapshots, profiles, logs) stays in OUT.
# Edge and worker kills are measured by cluster-failover.sh.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
DEVICES=${DEVICES:-1000}
RATE=${RATE:-400}
SAT_RATE=${SAT_RATE:-15000}
PHASE=${PHASE:-8s}
PARTITIONS=${PARTITIONS:-16}
PROF_SECONDS=${PROF_SECONDS:-5}
IDLE_WIN=${IDLE_WIN:-3}
NATS_JS=${NATS_JS:-}
if ! [[ $PHASE =~ ^[0-9]+s$ ]]; then
	echo "PHASE=$PHASE: want whole seconds, like 8s" >&2
	exit 2
fi
phase_s=${PHASE%s}
SKIP=${SKIP:-1.5} # seconds from "every device connected" to the window
win=$((phase_s > 5 ? phase_s - 3 : 2)) # the steady-state window, seconds
[ -n "${TERMSERVER:-}" ] && TERMSERVER=$(realpath "$TERMSERVER")
COMPARE=${COMPARE:-}
[ -n "$COMPARE" ] && COMPARE=$(realpath "$COMPARE")
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d /tmp/cluster-speed.XXXXXX)}
mkdir -p "$OUT"
tmp=$(mktemp -d)
declare -A LIVE=() # pid -> 1 for every process this script started and has not reaped
cleanup() {
	local p
	for p in "${!LIVE[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	for p in "${!LIVE[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
echo "building into $tmp; results in $OUT"
. testrig/bench/lib.sh # natsnode; field and record are this script's own (below)
NATSNODE=$(natsnode)
if [ -n "${TERMSERVER:-}" ]; then
	go build -o "$tmp/" ./cmd/termrig
else
	go build -o "$tmp/" ./cmd/termserver ./cmd/termrig
	TERMSERVER=$tmp/termserver
fi
PY=testrig/bench/cluster-speed.py
results=$OUT/results.tsv # round server figure value
: >"$results"
if python3 -c "import sys; sys.exit(0 if $SAT_RATE / $DEVICES > 20 else 1)"; then
	echo "warning: SAT_RATE/DEVICES is over the default 20 messages/s per device: the saturated phase measures the rate limit" >&2
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
track() { LIVE[$1]=1; }
# stop_all: SIGKILL to every process started for this server, reaped.
stop_all() {
	local p
	for p in "${!LIVE[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	for p in "${!LIVE[@]}"; do
		wait "$p" 2>/dev/null || true
		unset "LIVE[$p]"
	done
}

# Per server: PIDS (name=pid), SNAP_ARGS (for cluster-speed.py snap), URLS
# (--server arguments), HTTP (name=addr of the termservers).
declare -A PID=() MON=() PROF=()

start_nats() {
	local d=$1 i cp=() rp=() routes=""
	for i in 1 2 3; do
		cp[i]=$(free_port) rp[i]=$(free_port) MON[n$i]=$(free_port) PROF[n$i]=$(free_port)
	done
	for i in 1 2 3; do routes="$routes nats-route://127.0.0.1:${rp[i]},"; done
	NATS_URLS=""
	for i in 1 2 3; do
		mkdir -p "$d/n$i"
		cat >"$d/n$i.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:${cp[i]}
http: 127.0.0.1:${MON[n$i]}
prof_port: ${PROF[n$i]}
jetstream { store_dir: "$d/n$i" $NATS_JS }
cluster { name: speed, listen: 127.0.0.1:${rp[i]}, routes: [${routes%,}] }
EOF
		"$NATSNODE" -c "$d/n$i.conf" >"$LOGS/n$i.log" 2>&1 &
		track $!
		PID[n$i]=$!
		NATS_URLS="$NATS_URLS,nats://127.0.0.1:${cp[i]}"
	done
	NATS_URLS=${NATS_URLS#,}
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:${MON[n1]}/jsz" | grep -q '"leader": *"n' && return
		sleep 0.2
	done
	echo "NATS has no meta leader after 20 s; logs in $LOGS" >&2
	exit 1
}

# start_node DIR NAME [ROLE]: a termserver; no ROLE: no cluster block.
start_node() {
	local d=$1 name=$2 role=${3:-} cl=""
	mkdir -p "$d/$name"
	[ -n "$role" ] && cl=", \"cluster\": {\"nats\": \"$NATS_URLS\", \"role\": \"$role\", \"name\": \"$name\", \"partitions\": $PARTITIONS}"
	cat >"$d/$name.json" <<EOF
{"listen": "127.0.0.1:0", "workspace": "$d/$name",
 "channels": {"terminal-dev": {"kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "echo"}},
 "agents": {"echo": {"builtin": "echo"}}$cl}
EOF
	"$BIN" -config "$d/$name.json" >"$LOGS/$name.log" 2>&1 &
	track $!
	PID[$name]=$!
}

addr_of() { sed -n 's/.*termserver listening"\{0,1\} addr=\([^ ]*\).*/\1/p' "$LOGS/$1.log" | head -1; }

# wait_addrs NAME...: every node listening; sets ADDR[name].
declare -A ADDR=()
wait_addrs() {
	local name n=0
	for _ in $(seq 240); do
		n=0
		for name in "$@"; do
			ADDR[$name]=$(addr_of "$name")
			[ -n "${ADDR[$name]}" ] && n=$((n + 1))
		done
		[ "$n" = $# ] && return
		sleep 0.25
	done
	echo "nodes did not start; logs in $LOGS" >&2
	tail -n 5 "$LOGS"/*.log >&2
	exit 1
}

# cluster_ready: edge-1 sees 4 nodes and all partitions owned (up to 60 s).
cluster_ready() {
	for _ in $(seq 120); do
		curl -s "http://${ADDR[edge-1]}/api/status" | python3 -c "
import json, sys
c = json.load(sys.stdin).get('cluster') or {}
n = c.get('nodes') or []
sys.exit(0 if len(n) == 4 and sum(x.get('partitionsOwned', 0) for x in n) == $PARTITIONS else 1)" 2>/dev/null && return
		sleep 0.5
	done
	echo "  cluster: not every node and partition seen after 60 s; going on" >&2
}

snap() { # FILE: one snapshot of everything of this server
	local args=() k
	for k in "${!PID[@]}"; do args+=(--pid "$k=${PID[$k]}"); done
	for k in "${!MON[@]}"; do args+=(--nats "$k=${MON[$k]}"); done
	for k in "${!ADDR[@]}"; do args+=(--http "$k=${ADDR[$k]}"); done
	python3 "$PY" snap "${args[@]}" >"$1"
}

# ticks: CPU clock ticks of every process of this server over half a second.
sum_ticks() {
	local p t=0
	for p in "${PID[@]}"; do
		[ -r "/proc/$p/stat" ] && t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
	done
	echo "$t"
}
ticks() {
	local a b
	a=$(sum_ticks)
	sleep 0.5
	b=$(sum_ticks)
	echo $((b - a))
}
baseline() {
	local a b
	a=$(ticks)
	b=$(ticks)
	IDLE=$((a < b ? a : b))
}
# settle waits (up to 20 s) until the processes are back at their idle
# baseline (+2 ticks per half second).
settle() {
	for _ in $(seq 40); do
		[ "$(ticks)" -le $((IDLE + 2)) ] && return
	done
	echo "  $srv: still busy 20 s after the last phase" >&2
}

# run_load NAME ARGS...: termrig load in the background (LP), its JSON
# report in $RD/NAME.json, its stderr (-v) in $RD/NAME.err.
run_load() {
	local name=$1
	shift
	"$tmp/termrig" load "${URLS[@]}" --connect-rate 2000 --peer-prefix bench --json -v "$@" >"$RD/$name.json" 2>"$RD/$name.err" &
	LP=$!
	track $LP
	PID[load]=$LP
}
# wait_connected: until termrig load says every device is connected (its
# sending starts), up to 60 s.
wait_connected() {
	for _ in $(seq 600); do
		grep -q "connect phase done" "$RD/$1.err" && return
		kill -0 "$LP" 2>/dev/null || break
		sleep 0.1
	done
	echo "  $srv: termrig load did not finish connecting" >&2
}
# window NAME: snapshots NAME-a.snap and NAME-b.snap, win seconds apart
# (counted from the time the first was taken); until_b waits for the second.
window() {
	snap "$RD/$1-a.snap"
	until_b "$1"
}
until_b() {
	sleep "$(python3 -c "import json, sys, time; print(max(0, $win - (time.time() - json.load(open(sys.argv[1]))['t'])))" "$RD/$1-a.snap")"
	snap "$RD/$1-b.snap"
}
end_load() {
	wait "$LP" || true
	unset "LIVE[$LP]" "PID[load]"
	[ -s "$RD/$1.json" ] || {
		echo "termrig load ($1): no report" >&2
		cat "$RD/$1.err" >&2
		exit 1
	}
}
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$RD/$1.json"; }
record() { printf '%s\t%s\t%s\t%s\n' "$round" "$srv" "$1" "$2" >>"$results"; }
summary() {
	field "$1" '"p50 %.1f ms, p99 %.1f ms, %d replies/s, sent %d replied %d lost %d dup %d, errors %d, devices %d/%d" % (r["round_trip_ms"]["p50"], r["round_trip_ms"]["p99"], r["throughput_per_sec"], r["sent"], r["replied"], r["lost"], r["duplicate_replies"], r["error_frames"], r["devices_connected"], r["devices_requested"]) + "".join("; %d× %s" % (e["count"], e["text"]) for e in (r.get("error_texts") or [])[:2])'
}

measure() {
	RD=$OUT/r$round/$srv
	LOGS=$RD/logs
	mkdir -p "$LOGS"
	local d=$tmp/r$round-$srv
	PID=() MON=() PROF=() ADDR=()
	BIN=$TERMSERVER
	[ "$srv" = compare ] && BIN=$COMPARE
	if [ "$srv" != embedded ]; then
		start_nats "$d"
		start_node "$d" edge-1 edge
		start_node "$d" edge-2 edge
		start_node "$d" worker-1 worker
		start_node "$d" worker-2 worker
		wait_addrs edge-1 edge-2 worker-1 worker-2
		cluster_ready
		URLS=(--server "ws://${ADDR[edge-1]}/api/channels/terminal-dev/ws" --server "ws://${ADDR[edge-2]}/api/channels/terminal-dev/ws")
	else
		start_node "$d" embedded
		wait_addrs embedded
		URLS=(--server "ws://${ADDR[embedded]}/api/channels/terminal-dev/ws")
	fi
	baseline
	run_load warmup --devices "$DEVICES" --rate "$DEVICES" --duration 1s
	end_load warmup
	settle

	local bg=()
	if [ "$srv" != embedded ]; then
		# the background: DEVICES devices connected and idle
		run_load idle --devices "$DEVICES" --rate 0 --duration "$((IDLE_WIN + 4))s"
		wait_connected idle
		sleep "$SKIP"
		snap "$RD/idle-a.snap"
		sleep "$IDLE_WIN"
		snap "$RD/idle-b.snap"
		end_load idle
		bg=(--bg "$RD/idle-a.snap" "$RD/idle-b.snap")
		settle
	fi
	run_load fixed --devices "$DEVICES" --rate "$RATE" --duration "$PHASE"
	wait_connected fixed
	sleep "$SKIP"
	window fixed
	end_load fixed
	record "p50 ms @$RATE/s" "$(field fixed 'r["round_trip_ms"]["p50"]')"
	record "p99 ms @$RATE/s" "$(field fixed 'r["round_trip_ms"]["p99"]')"
	record "replies/s @$RATE/s" "$(field fixed 'round(r["throughput_per_sec"])')"
	record "lost @$RATE/s" "$(field fixed 'r["lost"]')"
	record "dup replies @$RATE/s" "$(field fixed 'r["duplicate_replies"]')"
	echo "  $srv $RATE msg/s: $(summary fixed)"
	python3 "$PY" window "$RD/fixed-a.snap" "$RD/fixed-b.snap" "${bg[@]}" --round "$round" --srv "$srv" --phase fixed --results "$results" | sed 's/^/    /'

	settle
	run_load saturated --devices "$DEVICES" --rate "$SAT_RATE" --duration "$PHASE" --drain 3s
	wait_connected saturated
	sleep "$SKIP"
	snap "$RD/sat-a.snap"
	local profs=() n
	if [ "$srv" != embedded ]; then
		for n in n1 n2 n3; do
			curl -s -o "$RD/$n.pprof" "http://127.0.0.1:${PROF[$n]}/debug/pprof/profile?seconds=$PROF_SECONDS" &
			profs+=($!)
		done
	fi
	until_b sat
	for n in "${profs[@]}"; do wait "$n" || true; done
	end_load saturated
	record "replies/s saturated" "$(field saturated 'round(r["throughput_per_sec"])')"
	record "p50 ms saturated" "$(field saturated 'r["round_trip_ms"]["p50"]')"
	record "p99 ms saturated" "$(field saturated 'r["round_trip_ms"]["p99"]')"
	record "lost saturated" "$(field saturated 'r["lost"]')"
	record "dup replies saturated" "$(field saturated 'r["duplicate_replies"]')"
	echo "  $srv saturated ($SAT_RATE msg/s offered): $(summary saturated)"
	python3 "$PY" window "$RD/sat-a.snap" "$RD/sat-b.snap" "${bg[@]}" --round "$round" --srv "$srv" --phase saturated --results "$results" | sed 's/^/    /'
	if [ "$srv" != embedded ]; then
		local lead meta
		read -r lead meta < <(python3 "$PY" leader "$RD/sat-a.snap" TERMLINK_IN)
		local traces=()
		for n in n1 n2 n3; do
			[ -s "$RD/$n.pprof" ] || continue
			go tool pprof -top -nodecount=25 "$RD/$n.pprof" >"$RD/$n.top.txt" 2>/dev/null || true
			go tool pprof -top -cum -nodecount=25 "$RD/$n.pprof" >"$RD/$n.topcum.txt" 2>/dev/null || true
			go tool pprof -traces "$RD/$n.pprof" >"$RD/$n.traces.txt" 2>/dev/null && traces+=("$RD/$n.traces.txt")
		done
		if [ ${#traces[@]} -gt 0 ]; then
			echo "    NATS CPU profile, $PROF_SECONDS s of the saturated window, all 3 nodes: $(python3 "$PY" prof --rec "$round" "$srv" "$results" "${traces[@]}" | paste -sd';' | sed 's/;/; /g')"
		fi
		if [ -s "$RD/$lead.top.txt" ]; then
			echo "    $lead (TERMLINK_IN's leader; meta leader $meta): $(python3 "$PY" prof "$RD/$lead.traces.txt" | paste -sd';' | sed 's/;/; /g')"
			echo "      top by flat time ($RD/$lead.top.txt):"
			awk '/^ *flat/ {on = 1; next} on && n < 6 {printf "      %s\n", $0; n++}' "$RD/$lead.top.txt" | cut -c1-150
		fi
	fi
	stop_all
	rm -rf "$d"
}

load_before=$(cat /proc/loadavg)
js=""
[ -n "$NATS_JS" ] && js="; NATS: jetstream { $NATS_JS }"
echo "cluster: 3 nats-server ($NATSNODE), 2 edges, 2 workers, $PARTITIONS partitions, separate processes; embedded: one termserver; TERMSERVER=$TERMSERVER$js"
[ -n "$COMPARE" ] && echo "compare: the same cluster with COMPARE=$COMPARE"
servers=(cluster embedded)
[ -n "$COMPARE" ] && servers+=(compare)
echo "$DEVICES devices, $RATE msg/s fixed, $SAT_RATE msg/s saturated, $PHASE phases (${win} s windows), $ROUNDS rounds"
echo "load average before: $load_before; uptime: $(uptime)"
for round in $(seq 1 "$ROUNDS"); do
	# the order turns by one server each round
	k=$(((round - 1) % ${#servers[@]}))
	order="${servers[*]:k} ${servers[*]:0:k}"
	order=${order% }
	echo "round $round ($order), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	for srv in $order; do
		measure
	done
	python3 - "$results" "$round" <<'PY'
import sys
v = {}
for line in open(sys.argv[1]):
    r, srv, fig, val = line.rstrip("\n").split("\t")
    if r == sys.argv[2] and fig == "replies/s saturated":
        v[srv] = float(val)
if v.get("embedded"):
    print(f"  saturated replies/s cluster/embedded: {v.get('cluster', 0) / v['embedded']:.2f} (goal >= 0.4)" +
          (f"; compare/embedded: {v['compare'] / v['embedded']:.2f}" if "compare" in v else ""))
PY
done
echo "load average after: $(cat /proc/loadavg); uptime: $(uptime)"
echo
{
	python3 "$PY" table "$results" embedded
	echo
	python3 "$PY" goals "$results" "$RATE" cluster
	[ -z "$COMPARE" ] || python3 "$PY" goals "$results" "$RATE" compare
} | tee "$OUT/medians.txt"
echo "everything measured is in $OUT"
