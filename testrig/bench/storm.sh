#!/usr/bin/env bash
# storm.sh [N] [RUNS]
# Reconnect storm (issue 41): N (default 10000) real link.Client devices
# (`termrig load --client --hold`, the link's own backoff: first wait about
# 1s ±50%, doubling, at most 30s; its 10 s connect timeout; they connect
# 300 a second at first) hold wss:// connections to one
# termserver (self-signed P-256 certificate made here with openssl). Each
# run kills the server twice — SIGTERM (graceful: going-away close), then
# SIGKILL — and starts it again at once on the same address and workspace.
# Per storm it prints the time to 50%, 99% and 100% of the devices back
# (from the restarted server's first /healthz answer, and from the kill),
# the server's CPU from that answer to the last device back (utime+stime
# of /proc/PID/stat), /healthz polled every 100 ms (a new TLS connection
# each: worst and p99 latency, failures), the restarted server's TLS
# handshakes by whether they resumed a session (termlink_tls_handshakes_total,
# counted since the restart, the polls' included), and the failed reconnect
# attempts per device by class (termrig load --report-reconnects: 503
# over maxConnections, 503 of ConnGuard, TLS, connect refused, reset,
# timeout), split into those met before the server answered /healthz
# (it was down: expected) and after (the goal: none refused more than
# once). RUNS (default 3) runs; the last lines are the medians. The
# times are link.Client's event times in the generator: when it is short
# of CPU they lag (a "refused" after /healthz answered is one met while
# the server was down, reported late).
# PROFILE=DIR keeps a 10 s CPU profile of the server from each storm's
# first /healthz answer (termserver --debug-addr; go tool pprof).
# Before each kill the links stay up STABLE seconds (default 61: link's
# StableAfter, after which a device's backoff starts again from its first
# wait), as a fleet's links have when its server restarts after a quiet
# while. TERMSERVER=path measures another build. KEEP=1 keeps the scratch dir
# (the reconnect log rec.jsonl, the /healthz polls, the server's log).
#
# HOLD=1 holds the listening socket across the restarts, as systemd's
# termserver.socket does (socket activation, README): the script runs
# under a parent that listens (backlog 4096) and passes the socket to
# each termserver as descriptor 3 with LISTEN_FDS/LISTEN_PID, so a device
# that dials while no termserver runs waits in the queue instead of
# being refused. The build must take a passed socket (internal/sdlisten).
#
# Both processes need N descriptors and more: the script raises the soft
# and hard `ulimit -n` to N+10000 (raising the hard limit needs root or
# CAP_SYS_RESOURCE; without it, it stops and says so).
set -euo pipefail
N=${1:-10000}
RUNS=${2:-3}
if [ -n "${HOLD:-}" ] && [ -z "${STORM_HELD_PORT:-}" ]; then
	# Re-run this script under a parent holding the socket at descriptor 3.
	exec python3 -c '
import os, socket, sys
port = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(4096)
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ["STORM_HELD_PORT"] = str(port)
os.execvp("bash", ["bash"] + sys.argv[2:])
' $((20000 + RANDOM % 12000)) "$0" "$@"
fi
STABLE=${STABLE:-61} # seconds the links stay up before each kill (link.DefaultStableAfter + 1)
cd "$(dirname "$0")/../.."
want=$((N + 10000))
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt $want ]; then
	ulimit -Hn $want 2>/dev/null || {
		echo "storm.sh: ulimit -n is $(ulimit -Hn) at most and cannot be raised to $want (not root?): run as root or with N below $(( $(ulimit -Hn) - 10000 ))" >&2
		exit 1
	}
fi
ulimit -n $want
tmp=$(mktemp -d)
SPID= LPID= PPID_= 
trap 'kill $PPID_ $LPID 2>/dev/null || true; kill -9 $SPID 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig
TERMSERVER=${TERMSERVER:-$tmp/termserver}
[ -n "${PROFILE:-}" ] && mkdir -p "$PROFILE"

# The lab CA and the server's certificate (P-256, as the README's TLS section).
ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
(
	cd "$tmp"
	openssl req -x509 $ec -keyout ca-key.pem -out ca.pem -days 30 -subj "/CN=storm lab CA" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
	openssl req -new $ec -keyout server-key.pem -out server.csr -subj "/CN=termserver"
	printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' >server.ext
	openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 -extfile server.ext -out server.pem
	chmod 600 ./*-key.pem
) 2>"$tmp/openssl.log" || { cat "$tmp/openssl.log" >&2; exit 1; }

port=${STORM_HELD_PORT:-$((20000 + RANDOM % 12000))} # below the ephemeral range (32768-)
dport=$((port + 1))
health=https://127.0.0.1:$port/healthz
cat >"$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","tls":{"certFile":"$tmp/server.pem","keyFile":"$tmp/server-key.pem"},
 "channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}}}
JSON

now() { date +%s%N; }
serve() {
	if [ -n "${STORM_HELD_PORT:-}" ]; then # the held socket is descriptor 3
		LISTEN_FDS=1 sh -c 'LISTEN_PID=$$ exec "$0" "$@"' "$TERMSERVER" --config "$tmp/cfg.json" --debug-addr 127.0.0.1:$dport 2>>"$tmp/server.log" &
	else
		"$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port --debug-addr 127.0.0.1:$dport 2>>"$tmp/server.log" 3<&- &
	fi
	SPID=$!
}
# healthy: waits for the first /healthz answer (every 10 ms) and prints its time.
healthy() {
	until curl -sf --cacert "$tmp/ca.pem" -m 2 -o /dev/null "$health"; do sleep 0.01; done
	now
}
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # clock ticks
# overflows: the kernel's count of connections dropped because a listen
# queue was full (TcpExtListenOverflows in /proc/net/netstat).
overflows() { awk '/^TcpExt:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == "ListenOverflows") c = i; h = 1 } else print $c }' /proc/net/netstat; }
hz=$(getconf CLK_TCK)

# The /healthz poller: one line per poll, "start_ns http_code seconds".
poll() {
	exec 3<&- # not the held socket's holder
	while :; do
		t=$(now)
		r=$(curl -s --cacert "$tmp/ca.pem" -m 5 -o /dev/null -w '%{http_code} %{time_total}' "$health" || true)
		echo "$t ${r:-000 0}"
		sleep 0.1
	done
}

cat >"$tmp/analyze.py" <<'PY'
import json, sys
log, off, n, t_kill, t_health, t_done, polls, cpu_ms, load_ms, kind, t_listen = sys.argv[1:12]
t_listen = int(t_listen)
off, n, t_kill, t_health, t_done = int(off), int(n), int(t_kill), int(t_health), int(t_done)
with open(log, 'rb') as f:
    f.seek(off)
    events = [json.loads(l) for l in f.read().splitlines() if l.strip()]
up, fails_before, fails_after, classes_before, classes_after = {}, {}, {}, {}, {}
down, first_dial, last_dial, dials = {}, {}, {}, {}
for e in events:
    d, t = e['device'], e['at_unix_ns']
    if e['event'] == 'down' and d not in down:
        down[d] = t
    elif e['event'] == 'dial' and d not in up:
        first_dial.setdefault(d, t)
        last_dial[d] = t
        dials[d] = dials.get(d, 0) + 1
    elif e['event'] == 'up' and d not in up:
        up[d] = t
    elif e['event'] == 'failed' and d not in up:
        late = t >= t_health
        (fails_after if late else fails_before)[d] = (fails_after if late else fails_before).get(d, 0) + 1
        c = classes_after if late else classes_before
        c[e['class']] = c.get(e['class'], 0) + 1
ts = sorted(up.values())
def at(q):
    if len(ts) < q * n or not ts:
        return None
    return ts[max(0, int(-(-q * n // 1)) - 1)]
def s(t, base):
    return 'n/a' if t is None else '%.2f' % ((t - base) / 1e9)
def dist(fails):
    h = {}
    for d in range(n):
        k = fails.get(d, 0)
        h[k] = h.get(k, 0) + 1
    return ' '.join('%d:%d' % kv for kv in sorted(h.items()))
def pct(vals):
    v = sorted(vals)
    if not v:
        return 'n/a'
    q = lambda x: v[min(len(v) - 1, int(len(v) * x))] / 1e9
    return 'p50 %.2fs p99 %.2fs max %.2fs' % (q(0.5), q(0.99), v[-1] / 1e9)
lat, bad, seen = [], 0, 0
for line in open(polls):
    p = line.split()
    if len(p) != 3 or not (t_kill <= int(p[0]) <= t_done):
        continue
    seen += 1
    if p[1] != '200':
        bad += 1
    else:
        lat.append(float(p[2]) * 1000)
lat.sort()
p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float('nan')
worst = lat[-1] if lat else float('nan')
t50, t99, t100 = at(0.5), at(0.99), at(1.0)
storm_s = ((t100 or t_done) - t_health) / 1e9
print('%s: back %d/%d; from /healthz 50%% %ss 99%% %ss 100%% %ss; from the kill 50%% %ss 99%% %ss 100%% %ss; server down %.2fs (listening again %.2fs after the kill)'
      % (kind, len(up), n, s(t50, t_health), s(t99, t_health), s(t100, t_health),
         s(t50, t_kill), s(t99, t_kill), s(t100, t_kill), (t_health - t_kill) / 1e9, (t_listen - t_kill) / 1e9))
print('  link lost after the kill: %s; first attempt after the kill: %s; last attempt to connected: %s; attempts per device: %s'
      % (pct([t - t_kill for t in down.values()]), pct([t - t_kill for t in first_dial.values()]),
         pct([up[d] - last_dial[d] for d in up if d in last_dial]), dist(dials)))
share = lambda v: 100 * float(v) / 1000 / storm_s if storm_s > 0 else 0
print('  CPU from /healthz to the last device back (%.2fs): server %s ms (%.0f%% of one core, %.2f ms a device), termrig load %s ms (%.0f%%, %.2f ms a device)'
      % (storm_s, cpu_ms, share(cpu_ms), float(cpu_ms) / n, load_ms, share(load_ms), float(load_ms) / n))
print('  /healthz polls from the kill to the last device back: %d, failed %d, latency p99 %.0f ms, worst %.0f ms (each waits up to 5 s)' % (seen, bad, p99, worst))
print('  failed attempts per device while down (count:devices): %s; by class %s' % (dist(fails_before), classes_before or '{}'))
print('  failed attempts per device after /healthz answered (count:devices): %s; by class %s; devices refused more than once: %d'
      % (dist(fails_after), classes_after or '{}', sum(1 for v in fails_after.values() if v > 1)))
print('RESULT %s %s %s %s %s %s %s %s %d %.0f %d' % (kind, s(t50, t_health), s(t99, t_health), s(t100, t_health),
      s(t50, t_kill), s(t99, t_kill), s(t100, t_kill), cpu_ms, bad, worst, sum(1 for v in fails_after.values() if v > 1)))
PY

# storm SIGNAL: kills the server with SIGNAL, starts it again at once and
# waits until every device is back (at most 120 s).
storm() {
	local sig=$1 off t_kill t_listen before t_health t_done c0 c1 l0 l1 up prof= profpid= ov0 ov1
	# A device's backoff starts again from RetryInitial only once its link
	# has stayed up StableAfter (link.DefaultStableAfter, 60 s): a storm
	# right after the last one would meet devices still backing off from
	# it (first attempts 4-24 s after the kill, not 0.5-1.5 s), which a
	# fleet restarted after a quiet day does not.
	sleep "$STABLE"
	off=$(stat -c %s "$tmp/rec.jsonl")
	ov0=$(overflows)
	t_kill=$(now)
	kill -"$sig" $SPID
	wait $SPID 2>/dev/null || true
	before=$(grep -c "termserver listening" "$tmp/server.log" || true)
	serve
	# The new process is listening (its log says so; every 10 ms).
	until [ "$(grep -c "termserver listening" "$tmp/server.log" || true)" -gt "$before" ]; do sleep 0.01; done
	t_listen=$(now)
	t_health=$(healthy)
	c0=$(cpu $SPID) l0=$(cpu $LPID)
	if [ -n "${PROFILE:-}" ]; then
		prof="$PROFILE/cpu-run$run-$sig.pprof"
		curl -s -o "$prof" "http://127.0.0.1:$dport/debug/pprof/profile?seconds=10" &
		profpid=$!
	fi
	for _ in $(seq 1 1200); do
		up=$(tail -c +$((off + 1)) "$tmp/rec.jsonl" | grep -c '"event":"up"' || true)
		[ "$up" -ge "$N" ] && break
		sleep 0.1
	done
	t_done=$(now)
	c1=$(cpu $SPID) l1=$(cpu $LPID)
	ov1=$(overflows)
	sleep 2 # /healthz polls after the storm
	[ -z "$profpid" ] || wait $profpid || true
	python3 "$tmp/analyze.py" "$tmp/rec.jsonl" "$off" "$N" "$t_kill" "$t_health" "$t_done" "$tmp/polls" \
		$(( (c1 - c0) * 1000 / hz )) $(( (l1 - l0) * 1000 / hz )) "SIG$sig" "$t_listen" | tee -a "$tmp/results"
	# Since the restart (the /healthz polls' own are full handshakes); a
	# build without the metric prints nothing.
	curl -s --cacert "$tmp/ca.pem" -m 5 "https://127.0.0.1:$port/metrics" | grep '^termlink_tls_handshakes_total' |
		sed 's/^termlink_tls_handshakes_total//' | tr '\n' ' ' | sed 's/^./  TLS handshakes since the restart: &/; s/$/\n/' || true
	echo "  listen queue overflows (TcpExtListenOverflows, the whole machine) from the kill to the last device back: $((ov1 - ov0)) (a dropped handshake is retried by the device's kernel after 1 s, then 2 s more, ...)"
	echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
}

held="opened by each termserver"
[ -z "${STORM_HELD_PORT:-}" ] || held="held across restarts (HOLD=1)"
for run in $(seq 1 "$RUNS"); do
	rm -rf "$tmp/ws"
	: >"$tmp/rec.jsonl"
	serve
	healthy >/dev/null
	poll >"$tmp/polls" &
	PPID_=$!
	"$tmp/termrig" load --server "wss://127.0.0.1:$port" --ca-file "$tmp/ca.pem" --client --hold --devices "$N" \
		--connect-rate 300 --report-reconnects "$tmp/rec.jsonl" --json >"$tmp/rep.json" 2>"$tmp/load.err" 3<&- &
	LPID=$!
	for _ in $(seq 1 300); do grep -q "connected [0-9]* devices" "$tmp/load.err" && break; sleep 1; done
	grep -q "connected $N devices" "$tmp/load.err" || { echo "devices did not all connect:" >&2; tail -5 "$tmp/load.err" >&2; exit 1; }
	echo "run $run: $N devices connected over wss:// (listening socket $held; server fds $(ls /proc/$SPID/fd | wc -l), ulimit -n $(ulimit -n))"
	storm TERM
	storm KILL
	kill -INT $LPID; wait $LPID 2>/dev/null || true
	kill $PPID_; wait $PPID_ 2>/dev/null || true
	LPID= PPID_=
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  termrig load: reconnects %d, failed attempts by class %s" % (r["reconnects"], r.get("reconnect_failures", {})))' "$tmp/rep.json"
	kill -9 $SPID; wait $SPID 2>/dev/null || true
	SPID=
done
grep -c "too many open files" "$tmp/server.log" | sed 's/^/server log "too many open files" lines: /' || true

python3 - "$tmp/results" <<'PY'
import statistics, sys
rows = [l.split()[1:] for l in open(sys.argv[1]) if l.startswith('RESULT')]
names = ['50% from /healthz s', '99% from /healthz s', '100% from /healthz s', '50% from kill s', '99% from kill s',
         '100% from kill s', 'server CPU ms', '/healthz failures', '/healthz worst ms', 'devices refused > once']
for kind in sorted({r[0] for r in rows}):
    rs = [r[1:] for r in rows if r[0] == kind]
    out = []
    for i, name in enumerate(names):
        vals = [float(r[i]) for r in rs if r[i] != 'n/a']
        out.append('%s %s' % (name, '%g' % statistics.median(vals) if vals else 'n/a'))
    print('median of %d %s storms: %s' % (len(rs), kind, '; '.join(out)))
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
