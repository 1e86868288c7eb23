#!/usr/bin/env bash
# termd-idle.sh [SECONDS]
# termd's RSS and CPU while idle: termserver and termd (sim board, in a
# tmux pane so it has a terminal) connected and left alone for SECONDS
# (default 600); reports VmRSS and utime+stime at the start and the end.
set -euo pipefail
SECS=${1:-600}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
sock="$tmp/tmux.sock"
trap 'tmux -S "$sock" kill-server 2>/dev/null || true; kill $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termd
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
echo '{"workspace":"'"$tmp"'/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}}}' > "$tmp/cfg.json"
"$tmp/termserver" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
SPID=$!
sleep 1
tmux -S "$sock" new-session -d -x 80 -y 20 "$tmp/termd --server 127.0.0.1:$port --board sim --state-dir $tmp/state"
sleep 2
pid=$(pgrep -f "^$tmp/termd")
tck=$(getconf CLK_TCK)
read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
r0=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
sleep "$SECS"
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
r1=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
cpu=$(python3 -c "print(round(($u1+$s1-$u0-$s0)/$tck, 3))")
echo "termd idle ${SECS}s: RSS ${r0} KiB -> ${r1} KiB; CPU ${cpu}s ($(python3 -c "print(round(100*$cpu/$SECS, 4))")% of one core)"
