#!/usr/bin/env bash
# peers.sh — termserver side by side with what a user of device fleets
# runs instead: Mosquitto (the distribution's package) with a small Go
# responder, on the same job.
#
# Usage: [TERMSERVER=path] [ROUNDS=3] [DEVICES=1000] [IDLE=10000] [PHASE=8s]
#        [SAT_RATE=40000] [RATES="2000 10000" (empty: skipped)] [SAT=1]
#        [RESPONDERS=2] [MQ_INFLIGHT=20] [MQ_QUEUED=1000]
#        [SERVERS="mosquitto termserver"] [SMOKE=0]
#        testrig/bench/peers.sh
# SMOKE=1 changes the defaults to DEVICES=100 IDLE=1000 ROUNDS=1 PHASE=2s
# RATES="200 1000" SAT_RATE=4000 (a check that everything runs, about a
# minute once built on a quiet machine; its figures mean little).
# Variables set explicitly win over SMOKE's.
#
# Mosquitto: installed with `apt-get install -y mosquitto` when the
# mosquitto binary is missing (as root; otherwise the script says so and
# exits 2). Each run of it is a fresh broker in a temp dir on a free
# loopback port, persistence on with the default autosave (autosave_interval
# 1800: an acknowledged message is on disk at the next autosave, not
# before), anonymous clients allowed, TCP_NODELAY on (Go's default for
# termserver and every client here), every other setting Mosquitto's
# default: max_inflight_messages MQ_INFLIGHT (20) and max_queued_messages
# MQ_QUEUED (1000) per client. Those two bind the responder, the client
# every request goes to: beyond its 1,000 queued requests the broker
# drops them (they show as lost), Mosquitto's load shedding where
# termserver answers busy. Raising them (MQ_INFLIGHT=1000
# MQ_QUEUED=100000) did not help in one run on a loaded machine (load
# average 13 on 2 cores): at 5,000 msg/s over 100 devices p50 1,040 ms
# vs 71 ms with the defaults, 3,729 vs 4,628 replies/s; at 40,000
# offered the broker acked most requests and answered almost none within
# the phase.
# The responder (testrig/bench/mqttpeer respond, the paho client): RESPONDERS
# connections sharing $share/responders/dev/+/req at QoS 1, each request
# answered "You said: <text>" on its device's dev/ID/rep at QoS 1.
# The devices (mqttpeer load): termrig load's lean mode over MQTT 3.1.1,
# one connection per device, persistent sessions (clean session off),
# keepalive 5 s (PINGREQ every 5 s), QoS 1 requests (the broker's PUBACK
# is the ack), subscribed to their reply topic at QoS 1; the round trip
# is the publish to the reply.
# termserver: as compare.sh runs it — built from this tree, the echo
# agent, fsync on (always), its workspace in a temp dir under $TMPDIR,
# ratePerPeer/rateBurst 1000, heartbeatSeconds 5 — driven by `termrig
# load` built from this tree with the same parameters.
#
# Each round starts each server fresh (the order alternates from round to
# round) and runs:
#   warm-up      DEVICES devices, one message each (creates the sessions);
#                not reported.
#   fixed rates  DEVICES devices, each of RATES msg/s for PHASE: p50 and
#                p99 of the round trip.
#   saturated    (SAT=0: skipped) DEVICES devices, SAT_RATE msg/s offered
#                for PHASE, then up to 3 s of drain: "replies/s" (replies
#                over the sending window, or until the last reply);
#                "CPU/reply µs": utime+stime (/proc/PID/stat) of the
#                server's processes — termserver; the broker plus the
#                responder — from the start of sending to the end of the
#                drain over the replies in that window; "broker share"
#                the broker's part of it; "lost saturated" the messages
#                never answered.
#   (each phase starts once the server's processes are idle again)
#   idle RSS     (IDLE=0: skipped) a second fresh server; IDLE devices
#                connect (2,000 a second, 30 s allowed each) and heartbeat
#                for 3 heartbeats (15 s; idle-rss.sh waits as long): the
#                steady state, after termserver's first memory trim (internal/memtrim)
#                can come: (VmRSS then - VmRSS before) / the devices
#                connected, of termserver or of the broker; fewer than
#                99% of IDLE connected stops the script.
# Every device is a descriptor in the load generator and in the server:
# the soft ulimit -n is raised to the hard one, and the script stops
# unless it is at least the largest device count * 7/6 + 200.
#
# Output: one line per measurement as it goes, then a table with the
# median of each figure per server over ROUNDS, the ratio
# termserver/mosquitto, the per-round values, and the load average
# (/proc/loadavg) before and after the run and at each round.
set -euo pipefail
SMOKE=${SMOKE:-0}
if [ "$SMOKE" = 1 ]; then
	: "${DEVICES:=100}" "${IDLE:=1000}" "${ROUNDS:=1}" "${PHASE:=2s}" "${RATES=200 1000}" "${SAT_RATE:=4000}"
fi
ROUNDS=${ROUNDS:-3}
DEVICES=${DEVICES:-1000}
IDLE=${IDLE:-10000}
PHASE=${PHASE:-8s}
SAT_RATE=${SAT_RATE:-40000}
RATES=${RATES-2000 10000}
SAT=${SAT:-1}
RESPONDERS=${RESPONDERS:-2}
MQ_INFLIGHT=${MQ_INFLIGHT:-20}
MQ_QUEUED=${MQ_QUEUED:-1000}
SERVERS=${SERVERS:-mosquitto termserver}
HB=5

if ! command -v mosquitto >/dev/null && [ ! -x /usr/sbin/mosquitto ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "peers.sh: mosquitto is not installed and installing it needs root: run 'apt-get install -y mosquitto' as root, or this script as root" >&2
		exit 2
	fi
	echo "peers.sh: installing mosquitto from the distribution's packages" >&2
	if ! apt-get install -y mosquitto >&2; then
		apt-get update >&2 && apt-get install -y mosquitto >&2 || {
			echo "peers.sh: apt-get install -y mosquitto failed" >&2
			exit 2
		}
	fi
fi
MOSQUITTO=$(command -v mosquitto || echo /usr/sbin/mosquitto)

hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=1048576
ulimit -n "$hard" 2>/dev/null || true
maxdev=$IDLE
[ "$DEVICES" -gt "$maxdev" ] && maxdev=$DEVICES
need=$((maxdev * 7 / 6 + 200))
if [ "$(ulimit -n)" -lt "$need" ]; then
	echo "peers.sh: $maxdev devices need ulimit -n >= $need (now $(ulimit -n), hard $hard): raise the hard limit (limits.conf, systemd LimitNOFILE or ulimit -Hn as root)" >&2
	exit 1
fi
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
SPID= RPID= LPID=
cleanup() {
	[ -n "$LPID" ] && kill "$LPID" 2>/dev/null || true
	[ -n "$RPID" ] && kill "$RPID" 2>/dev/null || true
	[ -n "$SPID" ] && kill "$SPID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig ./testrig/bench/mqttpeer
TERMSERVER=${TERMSERVER:-$tmp/termserver}
results=$tmp/results.tsv # round server figure value
: >"$results"

# load, field, record and loadavg are in lib.sh.
. testrig/bench/lib.sh # the scripts run from the repository root (cd above)

# mload ARGS...: mqttpeer load against the broker, JSON report in
# $tmp/rep.json (field reads it as it reads termrig load's).
mload() {
	"$tmp/mqttpeer" load --broker "127.0.0.1:$port" --connect-rate 2000 --keepalive ${HB}s --json "$@" >"$tmp/rep.json" 2>"$tmp/load.err" || true
	[ -s "$tmp/rep.json" ] || { echo "mqttpeer load $*: no report" >&2; cat "$tmp/load.err" >&2; exit 1; }
}

# drive ARGS...: the server's load generator with termrig load's flags
# that both take; --server-pid gets the server's processes.
drive() {
	local args=() a
	for a in "$@"; do
		case $a in
		--server-pid) args+=(--server-pid "$PIDS") ;;
		*) args+=("$a") ;;
		esac
	done
	case $srv in
	termserver) load "${args[@]}" ;;
	mosquitto) mload "${args[@]}" ;;
	esac
}

# start NAME: runs server NAME on a free port (SPID, PIDS, port; RPID the
# responder). A port taken meanwhile makes the server exit with "address
# already in use", and another port is tried.
start() {
	local try
	for try in 1 2 3 4 5; do
		launch "$1"
		for _ in $(seq 1 100); do
			up "$1" && break
			kill -0 $SPID 2>/dev/null || break
			sleep 0.1
		done
		if up "$1"; then
			if [ "$1" = mosquitto ]; then responder; fi
			return 0
		fi
		kill $SPID 2>/dev/null || true
		wait $SPID 2>/dev/null || true
		grep -qi "address already in use" "$tmp/server.log" || break
	done
	echo "$1 did not start:" >&2
	cat "$tmp/server.log" >&2
	exit 1
}

up() {
	case $1 in
	termserver) curl -sf "127.0.0.1:$port/healthz" >/dev/null ;;
	mosquitto) grep -q " running$" "$tmp/server.log" && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null ;;
	esac
}

launch() {
	port=$((20000 + RANDOM % 12000)) # below Linux's ephemeral range (32768-)
	case $1 in
	termserver)
		rm -rf "$tmp/ws"
		cat >"$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","config":{"heartbeatSeconds":$HB,"ratePerPeer":1000,"rateBurst":1000}}}}
JSON
		"$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
		SPID=$!
		PIDS=$SPID
		URL=ws://127.0.0.1:$port/api/channels/terminal-dev/ws
		;;
	mosquitto)
		rm -rf "$tmp/mq"
		mkdir "$tmp/mq"
		# user: as root, Mosquitto would otherwise switch to the
		# mosquitto user, who cannot write the temp dir.
		cat >"$tmp/mosquitto.conf" <<CONF
user $(id -un)
persistence true
persistence_location $tmp/mq/
autosave_interval 1800
listener $port 127.0.0.1
allow_anonymous true
set_tcp_nodelay true
max_inflight_messages $MQ_INFLIGHT
max_queued_messages $MQ_QUEUED
log_dest stderr
CONF
		"$MOSQUITTO" -c "$tmp/mosquitto.conf" 2>"$tmp/server.log" &
		SPID=$!
		;;
	esac
}

# responder starts mqttpeer respond on the broker and waits until it is
# subscribed (RPID, PIDS).
responder() {
	"$tmp/mqttpeer" respond --broker "127.0.0.1:$port" --conns "$RESPONDERS" >"$tmp/resp.out" 2>"$tmp/resp.err" &
	RPID=$!
	for _ in $(seq 1 100); do
		grep -q ready "$tmp/resp.out" && break
		kill -0 $RPID 2>/dev/null || break
		sleep 0.1
	done
	grep -q ready "$tmp/resp.out" || { echo "the responder did not start:" >&2; cat "$tmp/resp.err" >&2; exit 1; }
	PIDS=$SPID,$RPID
}

# stop ends the server (and the responder): SIGTERM, SIGKILL after 5 s.
stop() {
	local p
	for p in $RPID $SPID; do
		kill "$p" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	SPID= RPID=
}

# cputicks: utime+stime of the server's processes, in ticks.
cputicks() {
	local p s=0
	for p in ${PIDS//,/ }; do
		s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo $s
}

# settle waits (up to 15 s) until the server's processes are idle —
# under 3% of a core over half a second.
settle() {
	local a b
	for _ in $(seq 1 30); do
		a=$(cputicks)
		sleep 0.5
		b=$(cputicks)
		[ $((b - a)) -le 1 ] && return
	done
	echo "  $srv: still busy 15 s after the last phase" >&2
}

measure() {
	start "$srv"
	drive --devices "$DEVICES" --rate "$DEVICES" --duration 1s --peer-prefix bench
	for rate in $RATES; do
		settle
		drive --devices "$DEVICES" --rate "$rate" --duration "$PHASE" --peer-prefix bench
		record "p50 ms @$rate/s" "$(field 'r["round_trip_ms"]["p50"]')"
		record "p99 ms @$rate/s" "$(field 'r["round_trip_ms"]["p99"]')"
		echo "  $srv $rate msg/s: $(field '"round trip p50 %.2f ms p99 %.2f ms, %d replies/s, lost %d" % (r["round_trip_ms"]["p50"], r["round_trip_ms"]["p99"], r["throughput_per_sec"], r["lost"])')"
	done
	if [ "$SAT" = 1 ]; then
		settle
		drive --devices "$DEVICES" --rate "$SAT_RATE" --duration "$PHASE" --drain 3s --peer-prefix bench --server-pid
		record "replies/s saturated" "$(field 'round(r["throughput_per_sec"])')"
		record "CPU/reply µs" "$(field 'round(r.get("server_cpu_per_reply_us", 0), 1)')"
		if [ "$srv" = mosquitto ]; then
			record "broker share of CPU" "$(field "round(r['server_cpu_ms_by_pid']['$SPID'] / max(r['server_cpu_ms'], 1), 3)")"
		fi
		record "lost saturated" "$(field 'r["lost"]')"
		echo "  $srv saturated: $(field '"%d replies/s, sent %d acked %d replied %d lost %d, error frames %d, disconnected %d; cpu %d ms for %d replies" % (r["throughput_per_sec"], r["sent"], r["acked"], r["replied"], r["lost"], r["error_frames"], r["disconnected"], r.get("server_cpu_ms", 0), r.get("server_cpu_replies", 0))')"
	fi
	stop
	[ "$IDLE" -gt 0 ] || return 0

	start "$srv"
	local base rss gen n
	base=$(awk '/VmRSS/{print $2}' "/proc/$SPID/status")
	case $srv in
	termserver) gen=("$tmp/termrig" load --server "$URL") ;;
	mosquitto) gen=("$tmp/mqttpeer" load --broker "127.0.0.1:$port" --keepalive ${HB}s) ;;
	esac
	# A single-threaded broker on a busy machine lets some SYNs wait:
	# allow each device 30 s.
	gen+=(--connect-timeout 30s)
	"${gen[@]}" --devices "$IDLE" --rate 0 --hold --connect-rate 2000 --peer-prefix idle >"$tmp/hold.out" 2>&1 &
	LPID=$!
	for _ in $(seq 1 450); do
		grep -q "^connected [0-9]* devices" "$tmp/hold.out" && break
		kill -0 $LPID 2>/dev/null || break
		sleep 0.2
	done
	n=$(sed -n 's/^connected \([0-9]*\) devices$/\1/p' "$tmp/hold.out" | head -1)
	if [ -z "$n" ] || [ "$n" -lt $((IDLE * 99 / 100)) ]; then
		echo "$srv: idle devices did not connect (${n:-none} of $IDLE):" >&2
		cat "$tmp/hold.out" >&2
		exit 1
	fi
	sleep $((HB * 3)) # the steady state: every device heartbeats 3 times
	rss=$(awk '/VmRSS/{print $2}' "/proc/$SPID/status")
	kill -INT $LPID 2>/dev/null || true
	wait $LPID 2>/dev/null || true
	LPID=
	record "RSS/idle conn KiB" "$(python3 -c "print(round(($rss-$base)/$n,2))")"
	echo "  $srv idle: $n of $IDLE devices connected, RSS ${base} -> ${rss} KiB"
	stop
}

echo "termserver: $TERMSERVER; $("$MOSQUITTO" -h 2>/dev/null | head -1), $RESPONDERS responder connections, max_inflight_messages $MQ_INFLIGHT, max_queued_messages $MQ_QUEUED"
echo "$DEVICES devices, saturated at $SAT_RATE msg/s, rates $RATES, $PHASE phases, $IDLE idle devices, $ROUNDS rounds"
echo "load average before: $(cat /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
	case $((round % 2)) in
	1) order="mosquitto termserver" ;;
	0) order="termserver mosquitto" ;;
	esac
	order=$(for x in $order; do case " $SERVERS " in *" $x "*) echo "$x" ;; esac; done | xargs)
	echo "round $round ($order), load average $(loadavg)"
	for srv in $order; do
		measure
	done
	echo "round $round done, load average $(loadavg)"
done
echo "load average after: $(cat /proc/loadavg)"
echo
python3 - "$results" <<'PY'
import statistics, sys
vals, order = {}, []
for line in open(sys.argv[1]):
    rnd, srv, fig, v = line.rstrip("\n").split("\t")
    if fig not in order:
        order.append(fig)
    vals.setdefault((fig, srv), []).append(float(v))
print(f"{'figure (median)':24} {'termserver':>12} {'mosquitto+r':>12} {'t/m':>8}   per round (termserver | mosquitto+responder)")
for fig in order:
    t, m = (vals.get((fig, s), []) for s in ("termserver", "mosquitto"))
    mt, mm = (statistics.median(x) if x else None for x in (t, m))
    ratio = f"{mt / mm:.2f}" if mm and mt is not None else "-"
    cell = lambda v: f"{v:12.2f}" if v is not None else f"{'-':>12}"
    per = " | ".join(" ".join(f"{x:g}" for x in xs) for xs in (t, m))
    print(f"{fig:24} {cell(mt)} {cell(mm)} {ratio:>8}   {per}")
PY
