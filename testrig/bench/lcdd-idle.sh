#!/usr/bin/env bash
# lcdd-idle.sh [SECONDS]
# termd's RSS and CPU while idle on the lcdproc board, beside LCDd's own:
# termserver, LCDd (curses driver, 20x4, in a tmux pane) and termd
# (--board-file: the lcdproc profile pointed at that LCDd) connected and
# left alone for SECONDS (default 60); reports VmRSS and utime+stime of
# both processes over the window.
set -euo pipefail
SECS=${1:-60}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
sock="$tmp/tmux.sock"
trap 'tmux -S "$sock" kill-server 2>/dev/null || true; kill $SPID $TPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termd
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
lport=$((port + 1))
driver=$(dirname "$(ls /usr/lib/*/lcdproc/curses.so /usr/lib/lcdproc/curses.so 2>/dev/null | head -1)")
cat > "$tmp/LCDd.conf" <<CONF
[server]
DriverPath=$driver/
Driver=curses
Bind=127.0.0.1
Port=$lport
User=$(id -un)
Foreground=yes
ReportToSyslog=no
ServerScreen=no
[curses]
Size=20x4
TopLeftX=0
TopLeftY=0
CONF
tmux -S "$sock" new-session -d -x 40 -y 10 "exec LCDd -c $tmp/LCDd.conf -f -s 0 2>$tmp/lcdd.log"
echo '{"workspace":"'"$tmp"'/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}}}' > "$tmp/cfg.json"
"$tmp/termserver" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
SPID=$!
echo '{"name":"lcdproc","display":{"kind":"lcdproc","address":"127.0.0.1:'$lport'"}}' > "$tmp/board.json"
sleep 1
"$tmp/termd" --server 127.0.0.1:$port --board-file "$tmp/board.json" --state-dir "$tmp/state" 2>"$tmp/termd.log" &
TPID=$!
sleep 3
lpid=$(tmux -S "$sock" list-panes -F '#{pane_pid}' | head -1)
tck=$(getconf CLK_TCK)
stat() { awk '{print $14 + $15}' /proc/$1/stat; }
rss() { awk '/VmRSS/{print $2}' /proc/$1/status; }
t0=$(stat $TPID); l0=$(stat $lpid)
sleep "$SECS"
t1=$(stat $TPID); l1=$(stat $lpid)
pct() { python3 -c "print(round(100*($2-$1)/$tck/$SECS, 4))"; }
echo "idle ${SECS}s: termd RSS $(rss $TPID) KiB CPU $(pct $t0 $t1)% of one core; LCDd RSS $(rss $lpid) KiB CPU $(pct $l0 $l1)% of one core"
tmux -S "$sock" capture-pane -p | head -6
grep -c "msg=\"lcdproc: connected to LCDd" "$tmp/termd.log" | sed "s/^/termd connections to LCDd: /"
[ -n "${SHOWLOG:-}" ] && cat "$tmp/termd.log" "$tmp/lcdd.log" | grep -v "^ *$" | tail -40
