#!/usr/bin/env bash
# termd-idle-rss.sh [RUNS] [IDLE_SECONDS]
# termd's idle RSS: termserver (echo agent) on loopback and termd on the
# sim board (the console display in a tmux pane: no hardware), connected
# and then left alone for IDLE_SECONDS (default 10); VmRSS of termd from
# /proc/PID/status. RUNS times (default 3) each of termd for ARMv6 under
# qemu-arm-static (a Pi Zero/1 build, as make pi builds it) and of termd
# for this machine, then the median of each. Under qemu-user the RSS is
# the emulator's process: termd's memory plus qemu's own (its translated
# code cache, its heap), more than termd alone would use on a Pi; the
# native figure is termd alone, for comparison.
# TERMD_ARM6=FILE / TERMD_NATIVE=FILE measure those binaries instead of
# building them (another build to compare with); an empty one is skipped.
set -euo pipefail
RUNS=${1:-3}
IDLE=${2:-10}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
sock="$tmp/tmux.sock"
SPID=
trap 'tmux -S "$sock" kill-server 2>/dev/null || true; [ -n "$SPID" ] && kill $SPID 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
command -v tmux >/dev/null || { echo "termd-idle-rss: needs tmux (the sim board's console needs a terminal)" >&2; exit 1; }
ver=$(git describe --always --dirty 2>/dev/null || echo devel)
go build -o "$tmp/" ./cmd/termserver
if [ -z "${TERMD_ARM6+set}" ]; then
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 go build -trimpath -tags nethttpomithttp2 -ldflags "-s -w -X main.version=$ver" -o "$tmp/termd-arm6" ./cmd/termd
	TERMD_ARM6=$tmp/termd-arm6
fi
if [ -z "${TERMD_NATIVE+set}" ]; then
	CGO_ENABLED=0 go build -trimpath -tags nethttpomithttp2 -ldflags "-s -w -X main.version=$ver" -o "$tmp/termd-native" ./cmd/termd
	TERMD_NATIVE=$tmp/termd-native
fi
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
echo '{"workspace":"'"$tmp"'/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"echo"}},"agents":{"echo":{"builtin":"echo"}}}' >"$tmp/cfg.json"
"$tmp/termserver" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
SPID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do
	kill -0 $SPID 2>/dev/null || { echo "termserver exited:" >&2; cat "$tmp/server.log" >&2; exit 1; }
	sleep 0.05
done
peers() { curl -s 127.0.0.1:$port/api/status | python3 -c 'import json,sys; print(json.load(sys.stdin)["connected_peers"])'; }

# one LABEL RUN CMD...: termd in a tmux pane (exec: the pane's process is
# termd, or qemu running it), connected, idle IDLE seconds; prints its
# VmRSS in KiB.
one() {
	local label=$1 run=$2 pid rss
	shift 2
	local state="$tmp/state-$label-$run"
	tmux -S "$sock" new-session -d -x 80 -y 24 -s "$label$run" \
		"exec $* --server ws://127.0.0.1:$port/api/channels/terminal-dev/ws --board sim --device-name $label-$run --state-dir $state --log-file $tmp/termd-$label-$run.log"
	pid=$(tmux -S "$sock" list-panes -t "$label$run" -F '#{pane_pid}')
	for _ in $(seq 1 1200); do [ "$(peers)" = 1 ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	[ "$(peers)" = 1 ] || { echo "$label run $run: termd did not connect:" >&2; cat "$tmp/termd-$label-$run.log" >&2; exit 1; }
	sleep "$IDLE"
	rss=$(awk '/VmRSS/{print $2}' /proc/"$pid"/status)
	tmux -S "$sock" kill-session -t "$label$run"
	for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	for _ in $(seq 1 200); do [ "$(peers)" = 0 ] && break; sleep 0.05; done
	echo "$rss"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

measure() {
	local label=$1 bin=$2 runs=() r
	shift 2
	[ -n "$bin" ] || return 0
	for r in $(seq 1 "$RUNS"); do runs+=("$(one "$label" "$r" "$@" "$bin")"); done
	echo "$label ($(stat -c %s "$bin") bytes): idle VmRSS ${runs[*]} KiB, median $(printf '%s\n' "${runs[@]}" | median) KiB"
}

echo "idle ${IDLE}s after connecting, $RUNS runs each; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if command -v qemu-arm-static >/dev/null; then
	measure armv6-qemu "$TERMD_ARM6" qemu-arm-static
else
	echo "armv6-qemu: skipped: qemu-arm-static is not installed (apt-get install qemu-user-static)"
fi
measure native "$TERMD_NATIVE"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
