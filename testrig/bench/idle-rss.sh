#!/usr/bin/env bash
# idle-rss.sh [N] [HEARTBEAT_SECONDS] [plain|tls]
# Server memory per idle connection: starts termserver (echo agent) and
# `termrig load --rate 0 --hold` with N heartbeating devices, then reports
# (RSS with N connections - RSS at start) / N, the server's CPU while the
# devices idle (ms per second: heartbeats, collections), the load average.
# tls: termserver serves wss:// with a lab CA's certificate (made here
# with openssl, as the README's TLS section) and termrig trusts that CA
# through SSL_CERT_FILE (Go's system roots; termrig load has no CA flag).
# TERMSERVER=path measures another build of termserver; RATE (devices
# dialled per second) and WAIT (seconds for all to connect) override the
# mode's defaults (plain 2000 and 120, tls 500 and 600). PROFILE=path
# saves a heap profile (after a collection) with the devices connected,
# for `go tool pprof -sample_index=inuse_space`. CIPHER (tls only) is the
# AEAD the devices negotiate: aes (default) is what a Go device with AES
# instructions offers first (x86, a Raspberry Pi 5); chacha20 is what one
# without them offers first (every Raspberry Pi before the 5: their
# cores lack the ARMv8 crypto extensions), emulated by starting termrig with
# GODEBUG=cpu.aes=off. termserver honours the device's choice, and the
# two keep different per-connection state (an AES-GCM key schedule and
# GHASH table per direction against a 32-byte ChaCha20 key).
set -euo pipefail
N=${1:-10000}
HB=${2:-5}
MODE=${3:-plain}
case $MODE in plain | tls) ;; *) echo "mode is plain or tls, not $MODE" >&2; exit 2 ;; esac
CIPHER=${CIPHER:-aes}
loadenv=()
case $CIPHER in
aes) ;;
chacha20) loadenv=(GODEBUG=cpu.aes=off) ;;
*) echo "CIPHER is aes or chacha20, not $CIPHER" >&2; exit 2 ;;
esac
[ "$MODE" = plain ] && CIPHER=none
# TLS handshakes cost CPU on both sides: dial slower, wait longer.
if [ "$MODE" = tls ]; then RATE=${RATE:-500} WAIT=${WAIT:-600}; else RATE=${RATE:-2000} WAIT=${WAIT:-120}; fi
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
LPID="" SPID=""
trap 'kill $LPID $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig
TERMSERVER=${TERMSERVER:-$tmp/termserver} # another build to compare with
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
scheme=http wsscheme=ws tlscfg="" curlca=()
if [ "$MODE" = tls ]; then
	(
		cd "$tmp"
		ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
		openssl req -x509 $ec -keyout ca-key.pem -out ca.pem -days 30 -subj "/CN=idle-rss lab CA" \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
		openssl req -new $ec -keyout server-key.pem -out server.csr -subj "/CN=termserver"
		printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' >server.ext
		openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 -extfile server.ext -out server.pem
	) >/dev/null 2>&1
	scheme=https wsscheme=wss curlca=(--cacert "$tmp/ca.pem")
	tlscfg=",\"tls\":{\"certFile\":\"$tmp/server.pem\",\"keyFile\":\"$tmp/server-key.pem\"}"
fi
cat >"$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","maxConnections":$((N + 100)),"channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","config":{"heartbeatSeconds":$HB}}}$tlscfg}
JSON
dbg=()
[ -n "${PROFILE:-}" ] && dbg=(--debug-addr 127.0.0.1:$((port + 1)))
"$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port "${dbg[@]}" 2>"$tmp/server.log" &
SPID=$!
until curl -sf "${curlca[@]}" -o /dev/null $scheme://127.0.0.1:$port/healthz; do # ready, however busy the machine
	kill -0 $SPID 2>/dev/null || { echo "termserver exited:"; cat "$tmp/server.log"; exit 1; }
	sleep 0.05
done
base=$(awk '/VmRSS/{print $2}' /proc/$SPID/status)
env SSL_CERT_FILE="$tmp/ca.pem" "${loadenv[@]}" "$tmp/termrig" load --server $wsscheme://127.0.0.1:$port/api/channels/terminal-dev/ws --devices "$N" --rate 0 --hold --connect-rate "$RATE" >"$tmp/load.out" 2>&1 &
LPID=$!
for _ in $(seq 1 "$WAIT"); do sleep 1; grep -q "connected $N devices" "$tmp/load.out" && break; done
grep -q "connected $N devices" "$tmp/load.out" || { echo "devices did not all connect:"; cat "$tmp/load.out"; exit 1; }
ticks() { awk '{print $14 + $15}' /proc/$SPID/stat; } # user + system CPU, in clock ticks
t0=$(ticks)
sleep $((HB * 3)) # let every device heartbeat a few times
idlecpu=$((($(ticks) - t0) * 1000 / $(getconf CLK_TCK) / (HB * 3))) # CPU ms per second while idle (heartbeats, collections, trims)
rss=$(awk '/VmRSS/{print $2}' /proc/$SPID/status)
threads=$(awk '/Threads/{print $2}' /proc/$SPID/status)
[ -n "${PROFILE:-}" ] && curl -sf -o "$PROFILE" "http://127.0.0.1:$((port + 1))/debug/pprof/heap?gc=1" # after reading the RSS: the collection changes it
peers=$(curl -s "${curlca[@]}" $scheme://127.0.0.1:$port/api/status | python3 -c 'import json,sys; print(json.load(sys.stdin)["connected_peers"])')
echo "mode=$MODE cipher=$CIPHER devices=$N connected_peers=$peers heartbeat=${HB}s threads=$threads rss_start=${base}KiB rss_with_devices=${rss}KiB per_connection=$(((rss - base) * 1024 / N))B idle_cpu=${idlecpu}ms/s loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
