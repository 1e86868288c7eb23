#!/usr/bin/env bash
# compare.sh — termserver side by side with a bare WebSocket echo.
#
# Usage: [TERMSERVER=path] [ROUNDS=3] [DEVICES=1000] [IDLE=10000] [PHASE=8s]
#        [SAT_RATE=40000] [RATES="2000 10000" (empty: skipped)] [DEVICE_STEPS="100 1000 5000"]
#        [STEP_RATE=4000] [LONG=0] [LONG_DEVICES=50] [LONG_RATE=2000]
#        [LONG_MSGS=1600] [SAT=1] [SERVERS="termserver bare bare-wal"]
#        testrig/bench/compare.sh
#
# Judges termserver by its ratio to a yardstick measured in the same run,
# not by absolute numbers on a noisy machine. The yardstick is
# testrig/bench/bare: a plain gorilla/websocket server speaking the same
# frames (connect -> connected, message -> ack + "You said: ..." reply,
# ping -> pong, encoded by the link package) with no bus, no session log
# and no agent. A second yardstick, bare-wal, is the same server with
# termserver's durability and nothing else, as lean as it can be (bare
# --wal: the message synced in a group-committed write-ahead log before
# its ack, then the reply synced before it is sent: termserver's two
# durable points, between which its agent runs); its latency is the floor this machine's disk sets, its CPU
# per reply the floor of the durability path. termserver runs with the
# echo agent, fsync on (always),
# its workspace in a temp dir under $TMPDIR (the normal disk, not tmpfs),
# and ratePerPeer/rateBurst raised to 1000 so that the saturated phase
# (SAT_RATE/DEVICES = 40 messages/s per device by default, over the
# default limit of 20) measures capacity, not the rate limit; every other
# bound keeps its default. Both get heartbeatSeconds 5.
#
# Each round starts each server fresh (the order alternates from round to
# round) and drives it with the same `termrig load` built from this tree:
#   warm-up      DEVICES devices, one message each (creates termserver's
#                session logs); not reported.
#   fixed rates  DEVICES devices, each of RATES msg/s for PHASE: the p50
#                and p99 of the round trip (message sent to final reply).
#   device steps for each N of DEVICE_STEPS (empty: skipped): N devices,
#                one message each (not reported), then STEP_RATE msg/s in
#                total over the N devices for PHASE: "CPU/reply µs N dev"
#                (as below); "CPU/reply max/min dev" is the largest of a
#                round's steps over its smallest (flat: near 1).
#   long         only with LONG=1: LONG_DEVICES devices send LONG_MSGS
#                messages each at LONG_RATE msg/s in total, in two halves
#                (the same peer ids, so the same sessions; new message
#                ids). The second half is reported: "CPU/reply µs long"
#                and "p99 ms long" — at the defaults (50 devices, 1,600
#                each, 2,000 msg/s: 2 x 20 s) its messages are 800-1,600
#                of their sessions, mostly past termserver's 1,024
#                remembered message ids.
#   (each phase starts once the server is idle again)
#   saturated    last (SAT=0: skipped), DEVICES devices, SAT_RATE msg/s
#                offered (above capacity) for PHASE, then up to 3 s of
#                drain. "replies/s" is termrig
#                load's throughput: replies / (sending window, or until the
#                last reply if later). "CPU/reply" is the server process's
#                utime+stime (/proc/PID/stat, read by termrig load
#                --server-pid) from the start of sending to the end of the
#                drain, divided by the replies received in that window
#                (what is still queued at the end is in neither). "error
#                frames saturated" counts the error frames (busy, ...)
#                the devices got.
#   idle RSS     a second fresh server (IDLE=0: skipped); IDLE idle
#                devices connect (rate 0, --hold, 2,000 a second) and
#                heartbeat for 3 heartbeats (15 s, as idle-rss.sh and peers.sh):
#                (VmRSS then - VmRSS at start) / IDLE.
# Every device is a descriptor in the load generator and in the server:
# the script raises the soft ulimit -n to the hard one and stops unless
# it is at least the largest device count * 7/6 + 200 (termserver gives
# sockets about 7/8 of its limit). IDLE=10000 thus needs a hard limit of
# 11,867 or more; 10,000 loopback connections fit in Linux's ephemeral
# port range (32768-60999) and connect in 5 s.
# Both the load generator and the server share the machine: at saturation
# the cores are the limit for both servers, and the bare figure is partly
# bounded by the load generator itself. Below saturation bare-wal's
# batches are small, and each sync's fixed cost (the fdatasync call, the
# writer's and the waiters' wake-ups) is shared by few replies.
#
# Output: one line per measurement as it goes, then a table with the median
# of each figure per server over ROUNDS and the ratios termserver/bare,
# termserver/bare-wal and bare-wal/bare, and the load average
# (/proc/loadavg) before and after the run and each round. SERVERS picks
# which servers run (e.g. "bare bare-wal"), in the alternating order.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
DEVICES=${DEVICES:-1000}
IDLE=${IDLE:-10000}
PHASE=${PHASE:-8s}
SAT_RATE=${SAT_RATE:-40000}
RATES=${RATES-2000 10000}
DEVICE_STEPS=${DEVICE_STEPS-100 1000 5000}
STEP_RATE=${STEP_RATE:-4000}
LONG=${LONG:-0}
LONG_DEVICES=${LONG_DEVICES:-50}
LONG_RATE=${LONG_RATE:-2000}
LONG_MSGS=${LONG_MSGS:-1600}
SAT=${SAT:-1}
SERVERS=${SERVERS:-termserver bare bare-wal}
HB=5
# Every device is a socket in the load generator and in the server:
# raise the soft descriptor limit to the hard one. termserver gives
# sockets about 7/8 of its limit (the rest: session files, agents, plain
# HTTP), so IDLE devices need a limit of about IDLE * 7/6 + 200.
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=1048576
ulimit -n "$hard" 2>/dev/null || true
maxdev=$IDLE
for n in $DEVICE_STEPS $DEVICES; do [ "$n" -gt "$maxdev" ] && maxdev=$n; done
need=$((maxdev * 7 / 6 + 200))
if [ "$(ulimit -n)" -lt "$need" ]; then
	echo "compare.sh: $maxdev devices need ulimit -n >= $need (now $(ulimit -n), hard $hard): raise the hard limit (limits.conf, systemd LimitNOFILE or ulimit -Hn as root)" >&2
	exit 1
fi
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
SPID= LPID=
cleanup() {
	[ -n "$LPID" ] && kill "$LPID" 2>/dev/null || true
	[ -n "$SPID" ] && kill "$SPID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig ./testrig/bench/bare
TERMSERVER=${TERMSERVER:-$tmp/termserver}
results=$tmp/results.tsv # round server figure value
: >"$results"

# start NAME: runs server NAME on a free port in the background (SPID, URL).
# The port is picked at random; one taken meanwhile (another program, or a
# load client's ephemeral port) makes the server exit with "address already
# in use", and another port is tried.
start() {
	local try
	for try in 1 2 3 4 5; do
		launch "$1"
		for _ in $(seq 1 100); do
			curl -sf "127.0.0.1:$port/healthz" >/dev/null && return
			kill -0 $SPID 2>/dev/null || break
			sleep 0.1
		done
		wait $SPID 2>/dev/null || true
		grep -q "address already in use" "$tmp/server.log" || break
	done
	echo "$1 did not start:" >&2
	cat "$tmp/server.log" >&2
	exit 1
}

# launch NAME: starts server NAME on a random port (port, SPID, URL).
launch() {
	port=$((20000 + RANDOM % 12000)) # below Linux's ephemeral range (32768-)
	case $1 in
	termserver)
		rm -rf "$tmp/ws"
		cat >"$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","config":{"heartbeatSeconds":$HB,"ratePerPeer":1000,"rateBurst":1000}}}}
JSON
		"$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
		;;
	bare)
		"$tmp/bare" --listen 127.0.0.1:$port --heartbeat $HB >/dev/null 2>"$tmp/server.log" &
		;;
	bare-wal)
		rm -rf "$tmp/bwal"
		"$tmp/bare" --listen 127.0.0.1:$port --heartbeat $HB --wal "$tmp/bwal" >/dev/null 2>"$tmp/server.log" &
		;;
	esac
	SPID=$!
	URL=ws://127.0.0.1:$port/api/channels/terminal-dev/ws
}

# stop ends the server: SIGTERM, and SIGKILL if it is still busy with a
# backlog after 5 s (its workspace is thrown away).
stop() {
	kill "$SPID" 2>/dev/null || true
	for _ in $(seq 1 50); do
		kill -0 "$SPID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$SPID" 2>/dev/null || true
	wait "$SPID" 2>/dev/null || true
	SPID=
}

# settle waits (up to 15 s) until the server is idle — under 3% of a core
# over half a second — so that no backlog of the previous phase runs into
# the next one.
settle() {
	local a b
	for _ in $(seq 1 30); do
		a=$(awk '{print $14 + $15}' "/proc/$SPID/stat")
		sleep 0.5
		b=$(awk '{print $14 + $15}' "/proc/$SPID/stat")
		[ $((b - a)) -le 1 ] && return
	done
	echo "  $srv: still busy 15 s after the last phase" >&2
}

# load, field and record are in lib.sh.
. testrig/bench/lib.sh # the scripts run from the repository root (cd above)

measure() {
	start "$srv"
	load --devices "$DEVICES" --rate "$DEVICES" --duration 1s --peer-prefix bench
	for rate in $RATES; do
		settle
		load --devices "$DEVICES" --rate "$rate" --duration "$PHASE" --peer-prefix bench
		record "p50 ms @$rate/s" "$(field 'r["round_trip_ms"]["p50"]')"
		record "p99 ms @$rate/s" "$(field 'r["round_trip_ms"]["p99"]')"
		echo "  $srv $rate msg/s: $(field '"round trip p50 %.2f ms p99 %.2f ms, %d replies/s, lost %d, error frames %d" % (r["round_trip_ms"]["p50"], r["round_trip_ms"]["p99"], r["throughput_per_sec"], r["lost"], r["error_frames"])')"
	done
	local n half
	for n in $DEVICE_STEPS; do
		settle
		load --devices "$n" --rate "$n" --duration 1s --peer-prefix step # warm-up: sessions exist
		settle
		load --devices "$n" --rate "$STEP_RATE" --duration "$PHASE" --drain 3s --peer-prefix step --server-pid "$SPID"
		record "CPU/reply µs $n dev" "$(field 'round(r.get("server_cpu_per_reply_us", 0), 1)')"
		echo "  $srv $n devices at $STEP_RATE msg/s: $(field '"%.1f µs CPU/reply, p99 %.2f ms, %d replies/s, lost %d, error frames %d" % (r.get("server_cpu_per_reply_us", 0), r["round_trip_ms"]["p99"], r["throughput_per_sec"], r["lost"], r["error_frames"])')"
	done
	if [ "$LONG" = 1 ]; then
		# Two halves, the same sessions (peer ids); termrig load's message
		# ids are new each run, so the second half's are past the first
		# LONG_MSGS/2 of every session and, at the defaults, mostly past
		# termserver's 1,024 remembered ids.
		half=$(python3 -c "print(f'{$LONG_MSGS * $LONG_DEVICES / $LONG_RATE / 2:.3f}s')")
		settle
		load --devices "$LONG_DEVICES" --rate "$LONG_RATE" --duration "$half" --peer-prefix long
		echo "  $srv long, first half ($half): $(field '"p99 %.2f ms, %d replies/s, lost %d, error frames %d" % (r["round_trip_ms"]["p99"], r["throughput_per_sec"], r["lost"], r["error_frames"])')"
		settle
		load --devices "$LONG_DEVICES" --rate "$LONG_RATE" --duration "$half" --drain 3s --peer-prefix long --server-pid "$SPID"
		record "CPU/reply µs long" "$(field 'round(r.get("server_cpu_per_reply_us", 0), 1)')"
		record "p99 ms long" "$(field 'r["round_trip_ms"]["p99"]')"
		echo "  $srv long, second half: $(field '"%.1f µs CPU/reply, p50 %.2f ms p99 %.2f ms, %d replies/s, lost %d, error frames %d" % (r.get("server_cpu_per_reply_us", 0), r["round_trip_ms"]["p50"], r["round_trip_ms"]["p99"], r["throughput_per_sec"], r["lost"], r["error_frames"])')"
	fi
	if [ "$SAT" = 1 ]; then
		settle
		load --devices "$DEVICES" --rate "$SAT_RATE" --duration "$PHASE" --drain 3s --peer-prefix bench --server-pid "$SPID"
		record "replies/s saturated" "$(field 'round(r["throughput_per_sec"])')"
		record "CPU/reply µs" "$(field 'round(r.get("server_cpu_per_reply_us", 0), 1)')"
		record "error frames saturated" "$(field 'r["error_frames"]')"
		echo "  $srv saturated: $(field '"%d replies/s, sent %d acked %d replied %d lost %d, error frames %d, disconnected %d; server cpu %d ms for %d replies" % (r["throughput_per_sec"], r["sent"], r["acked"], r["replied"], r["lost"], r["error_frames"], r["disconnected"], r.get("server_cpu_ms", 0), r.get("server_cpu_replies", 0))')"
	fi
	stop
	[ "$IDLE" -gt 0 ] || return 0

	start "$srv"
	local base rss
	base=$(awk '/VmRSS/{print $2}' "/proc/$SPID/status")
	"$tmp/termrig" load --server "$URL" --devices "$IDLE" --rate 0 --hold --connect-rate 2000 --peer-prefix idle >"$tmp/hold.out" 2>&1 &
	LPID=$!
	for _ in $(seq 1 300); do
		grep -q "connected $IDLE devices" "$tmp/hold.out" && break
		kill -0 $LPID 2>/dev/null || break
		sleep 0.2
	done
	grep -q "connected $IDLE devices" "$tmp/hold.out" || { echo "$srv: idle devices did not all connect:" >&2; cat "$tmp/hold.out" >&2; exit 1; }
	sleep $((HB * 3)) # the steady state: every device heartbeats 3 times
	rss=$(awk '/VmRSS/{print $2}' "/proc/$SPID/status")
	kill -INT $LPID 2>/dev/null || true
	wait $LPID 2>/dev/null || true
	LPID=
	record "RSS/idle conn KiB" "$(python3 -c "print(round(($rss-$base)/$IDLE,2))")"
	echo "  $srv idle: $IDLE devices, RSS ${base} -> ${rss} KiB"
	stop
}

load_before=$(cat /proc/loadavg)
echo "termserver: $TERMSERVER; $DEVICES devices, saturated at $SAT_RATE msg/s, rates $RATES, $PHASE phases, $IDLE idle devices, $ROUNDS rounds"
echo "load average before: $load_before"
for round in $(seq 1 "$ROUNDS"); do
	case $((round % 3)) in
	1) order="termserver bare bare-wal" ;;
	2) order="bare bare-wal termserver" ;;
	0) order="bare-wal termserver bare" ;;
	esac
	order=$(for x in $order; do case " $SERVERS " in *" $x "*) echo "$x" ;; esac; done | xargs)
	echo "round $round ($order), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	for srv in $order; do
		measure
	done
	echo "round $round done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "load average after: $(cat /proc/loadavg)"
echo
python3 - "$results" <<'PY'
import statistics, sys
vals = {}
order = []
steps = {}
for line in open(sys.argv[1]):
    rnd, srv, fig, v = line.rstrip("\n").split("\t")
    if fig not in order:
        order.append(fig)
    vals.setdefault((fig, srv), []).append(float(v))
    if fig.startswith("CPU/reply µs ") and fig.endswith(" dev"):
        steps.setdefault((rnd, srv), []).append(float(v))
# Flatness over the device counts: the largest CPU/reply of a round's
# steps over its smallest.
for (rnd, srv), xs in steps.items():
    if len(xs) > 1 and min(xs) > 0:
        fig = "CPU/reply max/min dev"
        if fig not in order:
            order.append(fig)
        vals.setdefault((fig, srv), []).append(round(max(xs) / min(xs), 3))
print(f"{'figure (median)':24} {'termserver':>12} {'bare':>12} {'bare-wal':>12} {'t/bare':>8} {'t/bare-wal':>10} {'w/bare':>8}   per round (termserver | bare | bare-wal)")
ratio = lambda a, b: f"{a / b:.2f}" if b else "-"
for fig in order:
    t, b, w = (vals.get((fig, s), []) for s in ("termserver", "bare", "bare-wal"))
    mt, mb, mw = (statistics.median(x) if x else 0 for x in (t, b, w))
    per = " | ".join(" ".join(f"{x:g}" for x in xs) for xs in (t, b, w))
    print(f"{fig:24} {mt:12.2f} {mb:12.2f} {mw:12.2f} {ratio(mt, mb):>8} {ratio(mt, mw):>10} {ratio(mw, mb):>8}   {per}")
PY
